"""How an engine the lifecycle starts joins the trace of the wake that started it. Sans-I/O.

The engine is given the wake span's W3C context in its environment (``TRACEPARENT``, and
``TRACESTATE`` when there is one): vLLM, and ``restorelens sim``, parent their startup spans to it,
so a cold start's own phases (loading, warm-up, KV allocation) land in the wake's trace as children
of its ``modelclaim.wake`` span. They also need to know where to export: the endpoint the gate
exports its own spans to.

Per claim, ``engine_tracing`` says how much to add (docs/modelclaim.md):

- ``auto`` (the default): the context, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, and the engine's own
  flag when the command starts vLLM (``--otlp-traces-endpoint``, with OTLP/HTTP protobuf: vLLM's
  default protocol is gRPC, which the collector does not speak) or ``restorelens sim``
  (``--otlp-endpoint``), unless the command already names a destination;
- ``env``: the context and ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` only, for any engine whose
  OpenTelemetry SDK reads the standard environment;
- ``off``: nothing.

A value the claim's ``env`` sets is never overridden. Requests the gate forwards carry their own
``traceparent``; vLLM parents a request without one to the environment's trace, which is why the
analysis never takes a request's span for a startup phase (docs/analysis.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from opentelemetry.trace import NonRecordingSpan, SpanContext, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["AUTO", "ENGINE_TRACING_MODES", "ENV", "OFF", "EngineTracing", "engine_kind", "trace_environment"]

AUTO, ENV, OFF = "auto", "env", "off"
ENGINE_TRACING_MODES = (AUTO, ENV, OFF)
VLLM, RESTORELENS_SIM = "vllm", "restorelens sim"

_TRACES_PATH = "/v1/traces"
_VLLM_FLAG = "--otlp-traces-endpoint"
_SIM_DESTINATIONS = ("--otlp-endpoint", "--trace-file")


def trace_environment(context: SpanContext) -> dict[str, str]:
    """``TRACEPARENT`` (and ``TRACESTATE`` if any) for ``context``, as the W3C propagator writes them."""
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=set_span_in_context(NonRecordingSpan(context)))
    return {key.upper(): value for key, value in carrier.items()}


def _program(item: str) -> str:
    return item.rsplit("/", 1)[-1]


def engine_kind(argv: Sequence[str]) -> str | None:
    """``vllm`` or ``restorelens sim`` when the command starts one of them, else None."""
    items = list(argv)
    for index, item in enumerate(items):
        name = _program(item)
        if name == "vllm" or item.startswith("vllm.entrypoints."):
            return VLLM
        if name == "restorelens" and "sim" in items[index + 1:index + 2]:
            return RESTORELENS_SIM
    return None


def _names(argv: Sequence[str], flags: Sequence[str]) -> bool:
    return any(item == flag or item.startswith(flag + "=") for item in argv for flag in flags)


@dataclass(frozen=True, slots=True)
class EngineTracing:
    """A claim's ``engine_tracing`` mode and the OTLP/HTTP traces endpoint the gate exports to."""

    mode: str = AUTO
    otlp_traces_endpoint: str | None = None

    def apply(
        self, argv: Sequence[str], env: Mapping[str, str], context: SpanContext | None
    ) -> tuple[list[str], dict[str, str]]:
        """The command and the environment additions for a start whose wake span is ``context``."""
        argv = list(argv)
        if self.mode == OFF:
            return argv, {}
        added = trace_environment(context) if context is not None and context.is_valid else {}
        endpoint = self.otlp_traces_endpoint
        if endpoint:
            added["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
            kind = engine_kind(argv) if self.mode == AUTO else None
            if kind == VLLM and not _names(argv, (_VLLM_FLAG,)):
                argv += [_VLLM_FLAG, endpoint]
                added["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
            elif kind == RESTORELENS_SIM and not _names(argv, _SIM_DESTINATIONS):
                base = endpoint[: -len(_TRACES_PATH)] if endpoint.endswith(_TRACES_PATH) else endpoint
                argv += ["--otlp-endpoint", base]
        return argv, {key: value for key, value in added.items() if key not in env}
