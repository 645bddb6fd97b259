"""The tracer providers of a run's services over one exporter: every service's spans in one destination.

``RunTelemetry`` builds one tracer provider per service (client, gate, engine) over a single shared
exporter, so spans from all three land in one file or one collector, each with its own
``service.name``, as they would from three processes. The shared exporter is shut down once, after
every provider has flushed into it. Given the run's id (and scenario), every provider's resource
carries them (``restore.run_id``, ``restore.scenario``), so every span of the run can be told apart
from another run's in a shared store, spans that have no attribute of their own for it included
(e.g. ``modelclaim.state``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator

from restorelens.errors import SettingError
from restorelens.experiments.providers import ServiceProviders
from restorelens.spans import ATTR_RUN_ID, ATTR_SCENARIO

__all__ = ["SERVICE_NAMES", "RunTelemetry"]

SERVICE_NAMES = {"client": "restorelens-loadgen", "gate": "restorelens-gate", "engine": "restorelens-sim"}


class _Shared(SpanExporter):
    """Lets several providers export into one exporter; only ``RunTelemetry`` shuts it down."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export(spans)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _SeededIds(IdGenerator):
    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1


class RunTelemetry:
    """Providers for the run's services over one exporter: ``"file"`` (path), ``"otlp"``
    (endpoint), ``"none"``, ``"memory"`` or any ``SpanExporter``."""

    def __init__(self, exporter: str | SpanExporter = "none", *, path: Any = None, endpoint: str | None = None,
                 batch: bool | None = None, id_seed: int | None = None, run_id: str | None = None,
                 scenario: str | None = None) -> None:
        """``id_seed``: trace/span ids from a seeded generator and a fixed ``service.instance.id``,
        so a virtual run writes byte-identical output every time (recorded sample traces).
        ``run_id`` / ``scenario``: resource attributes of every service's spans (none when not given)."""
        from restorelens.loadgen import CountingExporter
        from restorelens.telemetry import EXPORTER_NAMES, JsonLinesSpanExporter, build_tracer_provider

        inner: SpanExporter | str
        #: Counts the batches the run's file or collector did not take (``raise_if_spans_dropped``).
        self.counting: CountingExporter | None = None
        if isinstance(exporter, SpanExporter):
            inner = exporter
        elif exporter == "file":
            if path is None:
                raise SettingError("--out", "the file exporter needs a path")
            inner = self.counting = CountingExporter(JsonLinesSpanExporter(path), str(path))
        elif exporter == "otlp":
            from restorelens.otlp_export import OtlpHttpSpanExporter

            inner = self.counting = CountingExporter(OtlpHttpSpanExporter(endpoint),
                                                     endpoint or "the OTLP endpoint (OTEL_EXPORTER_OTLP_*)")
        elif exporter in EXPORTER_NAMES:
            inner = exporter  # "memory" / "none": one provider's own exporter, shared below
        else:
            raise SettingError("exporter", f"unknown exporter {exporter!r}")
        if isinstance(inner, str):
            first = build_tracer_provider(SERVICE_NAMES["client"], inner, batch=batch)
            inner = first.restorelens_exporter  # type: ignore[attr-defined]
        self.exporter: SpanExporter = inner
        shared = _Shared(inner)
        run_labels = {key: value for key, value in ((ATTR_RUN_ID, run_id), (ATTR_SCENARIO, scenario)) if value}
        resources = {key: {**run_labels, **({} if id_seed is None else {"service.instance.id": f"{name}-{id_seed}"})}
                     for key, name in SERVICE_NAMES.items()}
        built = {key: build_tracer_provider(name, shared, batch=batch, resource_attributes=resources[key])
                 for key, name in SERVICE_NAMES.items()}
        if id_seed is not None:
            ids = _SeededIds(id_seed)
            for provider in built.values():
                provider.id_generator = ids  # read by every tracer made after this
        self.providers = ServiceProviders(built["client"], built["gate"], built["engine"], exporter=shared)
        self._all = list(built.values())

    def shutdown(self) -> None:
        for provider in self._all:
            provider.shutdown()
        self.exporter.shutdown()

    def raise_if_spans_dropped(self) -> None:
        """After ``shutdown``: a ``RestorelensError`` naming the destination when any span batch
        could not be exported (a run that lost spans must not look like a good one)."""
        if self.counting is not None:
            self.counting.raise_if_dropped()

    def __enter__(self) -> RunTelemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
