"""Prometheus metrics read from the admission core at scrape time (one registry per gate app).

A custom collector instead of counters updated on every request: the core already counts, so the
request path pays nothing for metrics and the numbers cannot drift from the core's own state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from restorelens.spans import TRAFFIC_CLASSES

from .admission import Admission

__all__ = ["GateCollector", "new_registry"]

PREFIX = "restorelens_gate_"


class GateCollector(Collector):
    def __init__(
        self,
        admission: Admission,
        upstream_errors: Callable[[], Mapping[str, int]] | None = None,
        refusals: Mapping[str, int] | None = None,
    ) -> None:
        self.admission = admission
        self.upstream_errors = upstream_errors
        self.refusals = refusals

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        core = self.admission
        occupancy = core.occupancy()
        admitted = CounterMetricFamily(PREFIX + "admitted", "Requests granted capacity", labels=["traffic_class"])
        rejected = CounterMetricFamily(PREFIX + "rejected", "Requests answered 429 (queue full or wait timed out)", labels=["traffic_class"])
        withdrawn = CounterMetricFamily(PREFIX + "withdrawn", "Queued requests whose client left before an answer", labels=["traffic_class"])
        queued = GaugeMetricFamily(PREFIX + "queued", "Requests waiting for a grant", labels=["traffic_class"])
        own = GaugeMetricFamily(PREFIX + "in_flight_own", "Granted requests running on their class's own capacity", labels=["traffic_class"])
        for traffic_class in TRAFFIC_CLASSES:
            admitted.add_metric([traffic_class], core.counters.admitted[traffic_class])
            rejected.add_metric([traffic_class], core.counters.rejected[traffic_class])
            withdrawn.add_metric([traffic_class], core.counters.withdrawn[traffic_class])
            queued.add_metric([traffic_class], occupancy.queued.get(traffic_class, 0))
            own.add_metric([traffic_class], occupancy.own.get(traffic_class, 0))
        yield admitted
        yield rejected
        yield withdrawn
        yield queued
        yield own
        yield GaugeMetricFamily(PREFIX + "in_flight_borrowed", "Batch requests running on lent protected slots", value=occupancy.borrowed)
        yield GaugeMetricFamily(PREFIX + "lending", "1 while protected slots may be lent (a lending period is open)", value=int(core.tracker.lending))
        yield CounterMetricFamily(PREFIX + "lending_periods", "Lending periods started", value=core.tracker.periods_started)
        yield CounterMetricFamily(PREFIX + "restoration_episodes", "Protected demand returned while capacity was lent", value=core.tracker.episodes_started)
        yield GaugeMetricFamily(PREFIX + "restoration_episodes_open", "Episodes whose grant or drain is still pending", value=core.tracker.open_episodes)
        yield CounterMetricFamily(PREFIX + "history_dropped", "Lending periods and episodes no longer retained (gate.max_retained_episodes)",
                                  value=core.tracker.dropped)
        if self.refusals is not None:
            refused = CounterMetricFamily(PREFIX + "refused", "Requests refused for passing a size limit, by the limit's setting", labels=["limit"])
            for limit, count in sorted(self.refusals.items()):
                refused.add_metric([limit], count)
            yield refused
        if self.upstream_errors is not None:
            errors = CounterMetricFamily(PREFIX + "upstream_errors", "Upstream failures by kind", labels=["kind"])
            for kind, count in sorted(self.upstream_errors().items()):
                errors.add_metric([kind], count)
            yield errors


def new_registry(
    admission: Admission,
    upstream_errors: Callable[[], Mapping[str, int]] | None = None,
    refusals: Mapping[str, int] | None = None,
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(GateCollector(admission, upstream_errors, refusals))
    return registry
