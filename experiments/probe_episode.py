"""The probe's request as the report decomposes it: its row of ``wake_episodes``, read from the
span store its spans and the gate's reach.

The spans arrive in batches, each service's on its own schedule, so the row is read again until it
shows the request served (or the wait is over): the figures printed are then the ones a later
``restorelens report`` gives, from the same SQL.
"""

from __future__ import annotations

import time
from typing import Any

import polars as pl

from restorelens.analysis import Analysis

__all__ = ["read_episode"]

#: Real seconds between reads of the store while the episode's spans are still arriving.
POLL_S = 0.25


def read_episode(db_path: str, request_id: str, *, wait_s: float, poll_s: float = POLL_S) -> tuple[dict[str, Any] | None, str | None]:
    """(the ``wake_episodes`` row of ``request_id``, None), or (None, why there is none), waiting
    up to ``wait_s`` real seconds for a served episode."""
    deadline = time.monotonic() + wait_s
    while True:
        with Analysis.open(db_path) as analysis:
            rows = analysis.wake_episodes().filter(pl.col("request_id") == request_id)
        row = rows.row(0, named=True) if rows.height else None
        if (row is not None and row["served"]) or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    if row is None:
        return None, f"no wake episode of request {request_id} in {db_path} after {wait_s:g} s (no wake, or its spans went elsewhere)"
    return row, None
