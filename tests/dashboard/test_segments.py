"""Where the time went: each episode's stretches, the censored then the longest kept."""

from __future__ import annotations

import polars as pl

from restorelens.dashboard.segments import time_segments


def test_time_segments_keep_the_censored_then_the_longest_episodes() -> None:
    from datetime import datetime

    t0 = datetime(2026, 1, 1)
    # four wake episodes: done in 10 s, 30 s and 20 s, and one censored after 5 s (never served)
    episodes = pl.DataFrame({
        "t0": [t0] * 4, "span_id": ["a" * 16, "b" * 16, "c" * 16, "d" * 16], "model": ["m"] * 4,
        "wake_path": ["in-place"] * 4, "run_id": ["r"] * 4, "ready_s": [4.0, 20.0, 12.0, 5.0],
        "observed_s": [4.0, 20.0, 12.0, None], "overshoot_s": [5.0, 9.0, 7.0, None],
        "engine_schedule_s": [0.5, 0.5, 0.5, None], "total_s": [10.0, 30.0, 20.0, None],
        "censored": [False, False, False, True], "clock_skew": [False] * 4,
    })
    every = time_segments(episodes, "wake")
    order = list(dict.fromkeys(every["span_id"].to_list()))
    assert order == ["d" * 16, "b" * 16, "c" * 16, "a" * 16]
    assert every.filter(pl.col("span_id") == "b" * 16)["total_s"][0] == 30.0
    # the last instant of each, stretches back to back from t0
    for span_id, part in every.group_by("span_id"):
        assert part["from_s"][0] == 0.0 and part["to_s"].to_list() == sorted(part["to_s"].to_list())
        assert (part["from_s"].slice(1) == part["to_s"].slice(0, part.height - 1)).all()
    two = time_segments(episodes, "wake", limit=2)
    assert list(dict.fromkeys(two["span_id"].to_list())) == order[:2]
    assert two.equals(every.filter(pl.col("span_id").is_in(order[:2])))


def test_episodes_alike_to_the_millisecond_keep_a_bar_each() -> None:
    from datetime import datetime

    episodes = pl.DataFrame({"t0": [datetime(2026, 1, 1)] * 2, "span_id": ["abcdef0000000001", "abcdef0000000002"],
                             "policy": ["lend"] * 2, "run_id": ["r"] * 2, "grant_restore_s": [1.0, 2.0],
                             "drain_s": [1.5, 2.5], "engine_schedule_s": [0.1, 0.1], "ttft_s": [2.0, 3.0],
                             "censored": [False] * 2, "clock_skew": [False] * 2})
    assert time_segments(episodes, "lending")["episode"].n_unique() == 2
