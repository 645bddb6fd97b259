"""The engine page's numbers: the engines' requests as shown, their statistics, distribution
curves and the slowest scheduled (``engine_requests``, from the engines' own spans)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from restorelens.analysis import percentiles_of
from restorelens.analysis.report import ENGINE_METRICS, with_no_gate
from restorelens.dashboard.labels import NO_CLASS, NO_ENGINE

__all__ = [
    "ENGINE_FIGURE_METRICS",
    "MAX_CURVE_POINTS",
    "EngineSummary",
    "distribution_curves",
    "engine_policies",
    "engine_statistics",
    "engine_summary",
    "engine_view",
    "schedule_points",
]

#: The engine view's metrics whose distributions the engine page draws (the table adds the
#: schedule delay's bounds).
ENGINE_FIGURE_METRICS = ("queue_s", "schedule_delay_s", "ttft_s", "prefill_s", "decode_s")
#: Most points of one distribution curve: the figure's size stays bounded whatever the store holds.
MAX_CURVE_POINTS = 200


def engine_view(requests: pl.DataFrame) -> pl.DataFrame:
    """``engine_requests`` with its labels as the pages show them: a null policy is ``NO_GATE``, a
    null traffic class ``NO_CLASS``, an engine without a name ``NO_ENGINE``."""
    return with_no_gate(requests).with_columns(
        pl.col("engine").fill_null(NO_ENGINE), pl.col("traffic_class").fill_null(NO_CLASS),
    )


def engine_statistics(view: pl.DataFrame, groups: Sequence[str] = ("engine", "traffic_class"),
                      method: str = "linear") -> pl.DataFrame:
    """Count, p50, p90, p95, p99 and max of every engine metric per group (the report's ``engine``
    section when ``groups`` are engine and traffic class); ``view`` from ``engine_view``."""
    return percentiles_of(view, ENGINE_METRICS, list(groups), method=method)


def schedule_points(view: pl.DataFrame) -> dict[str, int]:
    """How many requests' schedule delay is each bound (``upper``, ``lower``) of its interval."""
    counts = {"upper": 0, "lower": 0}
    for point, count in view.group_by("schedule_point").len().iter_rows():
        if point in counts:
            counts[point] = int(count)
    return counts


def distribution_curves(view: pl.DataFrame, groups: Sequence[str] = ("engine", "traffic_class"),
                         metrics: Sequence[str] = ENGINE_FIGURE_METRICS,
                         max_points: int = MAX_CURVE_POINTS) -> pl.DataFrame:
    """Each metric's empirical distribution per group, as the points of a step curve: ``seconds``
    and ``fraction`` of the group's values at or below it, every value when a group holds at most
    ``max_points``, else ``max_points`` of them evenly by rank (the first and the last included)."""
    schema = {"group": pl.String, "metric": pl.String, "seconds": pl.Float64, "fraction": pl.Float64,
              "count": pl.Int64}
    rows: list[tuple[str, str, float, float, int]] = []
    ordered = view.sort(list(groups), nulls_last=True, maintain_order=True) if groups else view
    parts = ordered.group_by(list(groups), maintain_order=True) if groups else [((), ordered)]
    for key, part in parts:
        group = " · ".join(str(value) for value in key) or "all"
        for metric in metrics:
            values = part[metric].cast(pl.Float64).drop_nulls().drop_nans().sort().to_list()
            n = len(values)
            if n == 0:
                continue
            ranks = range(n) if n <= max_points else sorted(
                {round(k * (n - 1) / (max_points - 1)) for k in range(max_points)})
            rows.extend((group, metric, values[rank], (rank + 1) / n, n) for rank in ranks)
    return pl.DataFrame(rows, schema=schema, orient="row")


@dataclass(frozen=True)
class EngineSummary:
    """The engine page: its counts, statistics and distribution curves over the chosen policies."""

    requests: int
    via_gate: int
    clock_skew: int
    unclassified: int
    points: dict[str, int]
    groups: tuple[str, ...]
    statistics: pl.DataFrame
    curves: pl.DataFrame
    slowest: pl.DataFrame


#: The slowest-scheduled requests' columns the engine page lists.
_SLOWEST_COLUMNS = ("engine", "traffic_class", "policy", "model", "attempt_source", "arrival", "queue_s",
                    "schedule_delay_s", "schedule_delay_lower_s", "schedule_delay_upper_s", "schedule_point",
                    "ttft_s", "prefill_s", "decode_s", "trace_id")


def engine_policies(requests: pl.DataFrame) -> tuple[str, ...]:
    """The policies ``engine_requests`` holds, as shown (``NO_GATE`` for none)."""
    return tuple(sorted(set(with_no_gate(requests.select("policy"))["policy"].to_list())))


def engine_summary(requests: pl.DataFrame, policies: Sequence[str] | None = None, *, by_policy: bool = False,
                   slowest: int = 20, method: str = "linear") -> EngineSummary:
    """``engine_requests`` under ``policies`` (as shown; None: all), per engine × traffic class (×
    policy with ``by_policy``), and the ``slowest`` requests by schedule delay."""
    view = engine_view(requests)
    if policies is not None:
        view = view.filter(pl.col("policy").is_in(list(policies)))
    groups = ("engine", "traffic_class", "policy") if by_policy else ("engine", "traffic_class")
    return EngineSummary(
        requests=view.height,
        via_gate=int(view["via_gate"].fill_null(False).sum()),
        clock_skew=int(view["clock_skew"].fill_null(False).sum()),
        unclassified=int((view["traffic_class"] == NO_CLASS).sum()),
        points=schedule_points(view),
        groups=groups,
        statistics=engine_statistics(view, groups, method),
        curves=distribution_curves(view, groups),
        slowest=view.sort("schedule_delay_s", descending=True, nulls_last=True).head(slowest)
        .select(_SLOWEST_COLUMNS),
    )
