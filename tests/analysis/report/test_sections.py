"""The report's vocabulary: ``build_report`` returns ``SECTIONS``, in order, and ``render``
writes every one of ``FORMATS`` (the CLI's ``--section`` and ``--format`` offer those tuples)."""

from __future__ import annotations

import pytest
from builders import Traces

from restorelens.analysis import Analysis
from restorelens.analysis.report import FORMATS, SECTIONS, build_report, render


def _sections() -> dict:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 2.0, first_chunk_s=1.0, traffic_class="interactive")
    attempt = traces.attempt(trace, client, 0.0, 2.0, status=200)
    traces.engine(trace, attempt, 0.0, time_in_queue_s=0.5, ttft_s=1.0, e2e_s=1.5)
    return build_report(Analysis(traces.store()))


def test_the_report_is_its_sections_in_order() -> None:
    # the engine startup phases only when an engine exported some (report/test_phases.py)
    assert tuple(_sections()) == tuple(name for name in SECTIONS if name != "wake_phases")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_renders_every_section(fmt: str) -> None:
    text = render(_sections(), fmt)
    assert all(name in text for name in ("episode_counts", "paired_differences")) or fmt in ("table", "markdown")
    assert text.strip()


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown format"):
        render(_sections(), "yaml")
