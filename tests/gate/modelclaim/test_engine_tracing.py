"""A started engine is told the wake's trace: the environment and flags each mode adds."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanContext, TraceFlags
from opentelemetry.trace.span import TraceState

from restorelens.gate.modelclaim.engine_tracing import EngineTracing, engine_kind, trace_environment

WAKE = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=False,
                   trace_flags=TraceFlags(TraceFlags.SAMPLED))
ENDPOINT = "http://127.0.0.1:4318/v1/traces"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
VLLM = ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "9000"]
SIM = ["python", "-m", "restorelens", "sim", "--port", "9000", "--start", "cold"]


def test_the_context_is_written_as_the_w3c_propagator_reads_it() -> None:
    assert trace_environment(WAKE) == {"TRACEPARENT": TRACEPARENT}
    stated = SpanContext(WAKE.trace_id, WAKE.span_id, False, WAKE.trace_flags, TraceState([("vendor", "x")]))
    assert trace_environment(stated) == {"TRACEPARENT": TRACEPARENT, "TRACESTATE": "vendor=x"}


@pytest.mark.parametrize(("argv", "kind"), [
    (VLLM, "vllm"),
    (["vllm", "serve", "m"], "vllm"),
    (["/usr/local/bin/vllm", "serve", "m"], "vllm"),
    (SIM, "restorelens sim"),
    (["/venv/bin/restorelens", "sim", "--port", "1"], "restorelens sim"),
    (["/venv/bin/restorelens", "gate"], None),
    (["sglang", "--port", "1"], None),
])
def test_the_engine_is_recognised_from_its_command(argv: list[str], kind: str | None) -> None:
    assert engine_kind(argv) == kind


def test_auto_gives_vllm_the_context_its_flag_and_the_http_protocol() -> None:
    argv, env = EngineTracing("auto", ENDPOINT).apply(VLLM, {}, WAKE)
    assert argv == [*VLLM, "--otlp-traces-endpoint", ENDPOINT]
    assert env == {"TRACEPARENT": TRACEPARENT, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT,
                   "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}


def test_auto_gives_the_simulator_its_base_url() -> None:
    argv, env = EngineTracing("auto", ENDPOINT).apply(SIM, {}, WAKE)
    assert argv == [*SIM, "--otlp-endpoint", "http://127.0.0.1:4318"]
    assert env["TRACEPARENT"] == TRACEPARENT


@pytest.mark.parametrize("given", [["--otlp-traces-endpoint", "http://elsewhere/v1/traces"],
                                   ["--otlp-traces-endpoint=http://elsewhere/v1/traces"]])
def test_a_destination_the_command_names_is_kept(given: list[str]) -> None:
    argv, env = EngineTracing("auto", ENDPOINT).apply([*VLLM, *given], {}, WAKE)
    assert argv == [*VLLM, *given]
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" not in env  # the command's owner chose the destination
    assert env["TRACEPARENT"] == TRACEPARENT
    sim_argv, _ = EngineTracing("auto", ENDPOINT).apply([*SIM, "--trace-file", "s.jsonl"], {}, WAKE)
    assert sim_argv == [*SIM, "--trace-file", "s.jsonl"]


def test_the_claims_own_environment_wins() -> None:
    _, env = EngineTracing("auto", ENDPOINT).apply(VLLM, {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, WAKE)
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" not in env


def test_env_mode_adds_only_the_standard_variables_and_off_adds_nothing() -> None:
    argv, env = EngineTracing("env", ENDPOINT).apply(VLLM, {}, WAKE)
    assert argv == VLLM
    assert env == {"TRACEPARENT": TRACEPARENT, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT}
    assert EngineTracing("off", ENDPOINT).apply(VLLM, {}, WAKE) == (VLLM, {})


def test_without_a_wake_identity_or_an_endpoint_only_what_is_known_is_given() -> None:
    argv, env = EngineTracing("auto", None).apply(VLLM, {}, WAKE)
    assert (argv, env) == (VLLM, {"TRACEPARENT": TRACEPARENT})
    argv, env = EngineTracing("auto", ENDPOINT).apply(VLLM, {}, None)
    assert "TRACEPARENT" not in env and argv[-2:] == ["--otlp-traces-endpoint", ENDPOINT]
