"""How missing labels read: no gate, no workload, a lending policy not named."""

from __future__ import annotations

import polars as pl

from restorelens.analysis.report import NO_GATE, with_no_gate
from restorelens.dashboard.labels import NO_WORKLOAD, UNNAMED_POLICY, with_arm_labels, with_unnamed_policy


def test_a_null_policy_reads_no_gate_and_nothing_else_changes() -> None:
    frame = pl.DataFrame({"policy": ["lend", None], "baseline": [None, "static"], "model": [None, "tiny"]})
    shown = with_no_gate(frame)
    assert shown["policy"].to_list() == ["lend", NO_GATE]
    assert shown["baseline"].to_list() == [NO_GATE, "static"]
    assert shown["model"].to_list() == [None, "tiny"]
    assert NO_GATE == "no gate"


def test_a_lending_episodes_null_policy_is_a_gate_that_named_none_not_no_gate() -> None:
    episodes = pl.DataFrame({"policy": ["lend", None]}, schema={"policy": pl.String})
    assert with_unnamed_policy(episodes)["policy"].to_list() == ["lend", UNNAMED_POLICY]
    assert UNNAMED_POLICY != NO_GATE


def test_the_policy_pages_frames_name_the_no_gate_arm_and_a_missing_workload() -> None:
    frame = pl.DataFrame({"policy": [None, "lend"], "workload": [None, "balanced"], "seed": [None, 1]},
                         schema={"policy": pl.String, "workload": pl.String, "seed": pl.Int64})
    shown = with_arm_labels(frame)
    assert shown.rows() == [(NO_GATE, NO_WORKLOAD, None), ("lend", "balanced", 1)]
    assert NO_WORKLOAD == "no workload"
