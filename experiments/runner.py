"""Run a scenario in virtual time or live, exporting every service's spans to one destination.

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
import statistics
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator

from restorelens.errors import SettingError
from restorelens.experiments.providers import ServiceProviders
from restorelens.loadgen.request import RequestResult
from restorelens.spans import ATTR_RUN_ID, ATTR_SCENARIO

__all__ = ["SERVICE_NAMES", "RunReport", "RunTelemetry", "run_virtual"]

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
        from restorelens.loadgen.export_failures import CountingExporter
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


@dataclass(frozen=True)
class RunReport:
    scenario: str
    arm: str
    seed: int
    mode: str
    run_id: str
    duration_s: float
    results: tuple[RequestResult, ...] = field(repr=False)
    slo_ttft_s: float = 5.0
    slo_e2e_s: float = 30.0
    #: Live runs compressed X times (for the mode label): every result time is in protocol seconds,
    #: live runs included (their clients read a ``ScaledClock``).
    time_scale: float = 1.0
    #: ModelClaim runs: when the first request went out (the wake episode's t0).
    t0_s: float | None = None

    def summary(self) -> dict[str, Any]:
        """Counts per (class, outcome), interactive SLO goodput and batch completions (req/s);
        for a ModelClaim run, what the first request's client saw instead."""
        if self.t0_s is not None:
            return self._wake_summary()
        outcomes = Counter(f"{r.traffic_class}:{r.outcome}" for r in self.results)
        interactive = [r for r in self.results if r.traffic_class == "interactive"]
        x = self.time_scale
        good = sum(r.meets_slo(self.slo_ttft_s, self.slo_e2e_s) for r in interactive)
        ttfts = [r.ttft_s for r in interactive if r.ttft_s is not None]
        batch_ok = sum(1 for r in self.results if r.traffic_class == "batch" and r.outcome == "ok")
        return {
            "scenario": self.scenario,
            "arm": self.arm,
            "seed": self.seed,
            "mode": self.mode if x == 1 else f"{self.mode} (x{x:g})",
            "run_id": self.run_id,
            "requests": len(self.results),
            "outcomes": dict(sorted(outcomes.items())),
            "interactive_slo_goodput_rps": round(good / self.duration_s, 4),
            "interactive_slo_met": f"{good}/{len(interactive)}",
            "interactive_ttft_p50_s": round(statistics.median(ttfts), 3) if ttfts else None,
            "batch_completions_rps": round(batch_ok / self.duration_s, 4),
        }


    def _wake_summary(self) -> dict[str, Any]:
        assert self.t0_s is not None
        first = min(self.results, key=lambda r: r.start_s)
        x, t0 = self.time_scale, self.t0_s
        success = next((a for a in first.attempts if a.status is not None and 200 <= a.status < 300), None)
        hint = first.attempts[0].retry_after.seconds if first.attempts else None
        return {
            "scenario": self.scenario,
            "arm": self.arm,
            "seed": self.seed,
            "mode": self.mode if x == 1 else f"{self.mode} (x{x:g})",
            "run_id": self.run_id,
            "requests": len(self.results),
            "outcomes": dict(sorted(Counter(f"{r.traffic_class}:{r.outcome}" for r in self.results).items())),
            "first_request_statuses": list(first.statuses),
            "first_retry_after_s": hint,
            "success_attempt_s": None if success is None else round(success.start_s - t0, 3),
            "first_token_s": None if first.first_chunk_s is None else round(first.first_chunk_s - t0, 3),
        }


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def run_virtual(scenario: Any, seed: int, providers: ServiceProviders, run_id: str | None = None) -> RunReport:
    """Play ``scenario`` in virtual time; spans go to ``providers`` with virtual timestamps."""
    from restorelens.experiments.moflux.virtual import VirtualMofluxRun

    run_id = run_id or new_run_id()
    if scenario.kind == "modelclaim":
        return _run_virtual_modelclaim(scenario, seed, providers, run_id)
    run = VirtualMofluxRun(scenario, seed, providers, run_id)
    results = run.run()
    workload = run.workload
    return RunReport(scenario.name, scenario.arm, seed, "virtual", run_id, workload.duration_s,
                     tuple(sorted(results, key=lambda r: r.start_s)), workload.slo.ttft_s, workload.slo.e2e_s)


def run_live(scenario: Any, seed: int, providers: ServiceProviders, run_id: str | None = None, *,
             time_scale: float = 1.0) -> RunReport:
    """Play ``scenario`` against real servers on loopback (see ``moflux.live``, ``modelclaim.live``)."""
    from restorelens.experiments.moflux.live import run_live_moflux

    if scenario.kind == "modelclaim":
        from restorelens.experiments.modelclaim.live import run_live_modelclaim

        return run_live_modelclaim(scenario, seed, providers, run_id or new_run_id(), time_scale=time_scale)
    return run_live_moflux(scenario, seed, providers, run_id or new_run_id(), time_scale=time_scale)


def _run_virtual_modelclaim(scenario: Any, seed: int, providers: ServiceProviders, run_id: str) -> RunReport:
    from restorelens.experiments.modelclaim.virtual import VirtualModelClaimRun

    run = VirtualModelClaimRun(scenario, seed, providers, run_id)
    results = tuple(sorted(run.run(), key=lambda r: r.start_s))
    duration_s = max(r.end_s for r in results) - run.t0_s
    return RunReport(scenario.name, scenario.arm, seed, "virtual", run_id, duration_s, results, t0_s=run.t0_s)
