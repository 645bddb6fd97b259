"""Prometheus metrics read from the admission core at scrape time (one registry per gate app).

A custom collector instead of counters updated on every request: the core already counts, so the
request path pays nothing for metrics and the numbers cannot drift from the core's own state. The
restoration histograms are the same: the tracker adds each episode's events to fixed buckets as
they happen (a few per episode, none per request), and a scrape copies them out
(docs/alerting.md defines them and the over-budget count).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from restorelens.spans import TRAFFIC_CLASSES

from .admission import Admission
from .restoration import SecondsHistogram

__all__ = ["GateCollector", "new_registry"]

PREFIX = "restorelens_gate_"


def _histogram(name: str, documentation: str, histogram: SecondsHistogram) -> HistogramMetricFamily:
    buckets = [(floatToGoString(bound), count) for bound, count in histogram.cumulative()]
    return HistogramMetricFamily(PREFIX + name, documentation, buckets=buckets, sum_value=histogram.sum_s)


class GateCollector(Collector):
    def __init__(
        self,
        admission: Admission,
        upstream_errors: Callable[[], Mapping[str, int]] | None = None,
        refusals: Mapping[str, int] | None = None,
        span_export: Any = None,
    ) -> None:
        self.admission = admission
        self.upstream_errors = upstream_errors
        self.refusals = refusals
        #: The tracer provider when it is restorelens's (its processor counts drops, its exporter failures).
        self.span_export = span_export

    def collect(self) -> Iterator[Metric]:
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
        yield from self._restoration()
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
        yield from self._span_export()

    def _span_export(self) -> Iterator[Metric]:
        processor = getattr(self.span_export, "restorelens_processor", None)
        if hasattr(processor, "dropped_spans"):
            yield CounterMetricFamily(PREFIX + "spans_dropped", "Spans dropped because the export queue was full "
                                      "(OTEL_BSP_MAX_QUEUE_SIZE): the exporter fell behind or its endpoint is down",
                                      value=processor.dropped_spans)
        exporter = getattr(self.span_export, "restorelens_exporter", None)
        if hasattr(exporter, "spans_failed"):
            yield CounterMetricFamily(PREFIX + "spans_export_failed", "Spans the OTLP exporter could not deliver "
                                      "after its retries", value=exporter.spans_failed)

    def _restoration(self) -> Iterator[Metric]:
        stats = self.admission.tracker.stats
        yield _histogram("restoration_grant_restored_seconds",
                         "Seconds after t0 (protected demand returned while capacity was lent) until the protected floor was back at its nominal size",
                         stats.grant_restored)
        yield _histogram("restoration_borrowed_drained_seconds",
                         "Seconds after t0 until the last request borrowed at t0 finished", stats.borrowed_drained)
        yield _histogram("restoration_first_byte_seconds",
                         "Seconds after t0 until the returning request's first response byte came back from the engine",
                         stats.first_byte)
        yield CounterMetricFamily(PREFIX + "restoration_over_budget",
                                  "Episodes whose returning request's first byte came later than the policy's restore budget after t0 "
                                  "(without a first byte yet: the episode finished later than the budget)", value=stats.over_budget)
        budget_s = self.admission.policy.restore_budget_s
        if budget_s is not None:
            yield GaugeMetricFamily(PREFIX + "restoration_budget_seconds", "The restore budget of the policy in force", value=budget_s)


def new_registry(
    admission: Admission,
    upstream_errors: Callable[[], Mapping[str, int]] | None = None,
    refusals: Mapping[str, int] | None = None,
    span_export: Any = None,
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(GateCollector(admission, upstream_errors, refusals, span_export))
    return registry
