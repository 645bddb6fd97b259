"""Fixtures of the real-client tests: the OpenAI SDK's waits on the gate's scaled clock."""

from __future__ import annotations

import time
from types import SimpleNamespace

import openai._base_client as sdk_base
import pytest

from restorelens.clock import ScaledClock


@pytest.fixture
def scaled_sdk(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """Make the SDK wait on the gate's scale: ``scaled_sdk(clock)``. Only its ``time`` is replaced,
    so which header it reads, whether it retries and how long it waits stay the SDK's own code."""
    def scale(clock: ScaledClock) -> None:
        monkeypatch.setattr(sdk_base, "time", SimpleNamespace(sleep=lambda s: time.sleep(s / clock.time_scale),
                                                              time=clock.now_s))
    return scale
