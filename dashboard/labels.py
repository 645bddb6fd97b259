"""How a missing label reads on the pages: a null traffic class, engine, workload or lending policy
is named, never shown as "None" (a null policy outside lending is ``NO_GATE``, the analysis's);
any other missing value, in a table or a picker, reads ``MISSING``."""

from __future__ import annotations

import polars as pl

from restorelens.analysis.report import with_no_gate

__all__ = [
    "MISSING",
    "NO_CLASS",
    "NO_ENGINE",
    "NO_WORKLOAD",
    "UNNAMED_POLICY",
    "shown",
    "with_arm_labels",
    "with_unnamed_policy",
]

#: A missing value (a censored episode's readiness, a run without a seed) in every table and
#: picker: Streamlit would print "None".
MISSING = "—"

#: How a request without a traffic class reads: a user's app whose class attribute is not mapped
#: (``restorelens dashboard --label traffic_class=ATTR``).
NO_CLASS = "no class"
#: An engine span with neither a service name of its own nor a model to name it by.
NO_ENGINE = "unnamed engine"
#: A request's null workload: it carries no workload label (a request that passed no gate usually
#: carries none either); the policy page's panels and tables name it so, never "None".
NO_WORKLOAD = "no workload"
#: A lending episode's null policy: its gate named none (it is at a gate, so never "no gate").
UNNAMED_POLICY = "policy not named"


def shown(value: object) -> str:
    """``value`` as a picker's label shows it: ``MISSING`` for None."""
    return MISSING if value is None else str(value)


def with_arm_labels(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (the policy summary or paired differences) as the policy page shows it: a null
    policy and baseline spelt ``NO_GATE``, a null workload ``NO_WORKLOAD``."""
    shown = with_no_gate(frame)
    if "workload" in shown.columns and shown.schema["workload"] == pl.String:
        shown = shown.with_columns(pl.col("workload").fill_null(NO_WORKLOAD))
    return shown


def with_unnamed_policy(episodes: pl.DataFrame) -> pl.DataFrame:
    """Lending episodes with a null policy spelt ``UNNAMED_POLICY``: the gate that lent named none."""
    return episodes.with_columns(pl.col("policy").fill_null(UNNAMED_POLICY))
