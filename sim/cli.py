"""``restorelens sim``: serve one simulated vLLM engine (heavy imports stay inside the command)."""

from __future__ import annotations

import dataclasses
import json

import click

__all__ = ["COMMANDS", "sim"]


@click.command("sim")
@click.option("--preset", default="tiny-cpu", show_default=True,
              help="Engine shape: tiny-cpu, qwen2.5-1.5b-m1 or llama-8b-h20 (see docs/sim.md).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port (0 picks a free one).")
@click.option("--model", "model_name", default="tiny", show_default=True, help="Served model name (the 'model' field).")
@click.option("--time-scale", type=float, default=1.0, show_default=True,
              help="Divide every modelled duration by this (e.g. 10 for a fast demo).")
@click.option("--enable-sleep-mode", is_flag=True, help="Serve vLLM's /sleep, /wake_up and /is_sleeping.")
@click.option("--start", "start_mode", type=click.Choice(["ready", "asleep", "cold"]), default="ready",
              show_default=True, help="Start ready, asleep (level 1) or cold (loading for the preset's cold-start time).")
@click.option("--max-num-seqs", type=int, default=None, help="Override the preset's max_num_seqs.")
@click.option("--num-blocks", type=int, default=None, help="Override the preset's KV blocks (--num-gpu-blocks-override).")
@click.option("--scheduling-policy", type=click.Choice(["fcfs", "priority"]), default=None,
              help="Override the preset's scheduling policy (priority honours the request's 'priority').")
@click.option("--asleep-requests", type=click.Choice(["hold", "refuse"]), default=None,
              help="Inference requests while asleep, falling asleep or waking: hold them until the wake, as vLLM "
                   "does (the preset's default), or refuse them with 503.")
@click.option("--api-key", envvar="RESTORELENS_SIM_API_KEY", default=None,
              help="Require 'Authorization: Bearer KEY' on /v1/* and the sleep API [env RESTORELENS_SIM_API_KEY].")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the latency jitter.")
@click.option("--otlp-endpoint", default=None, metavar="URL", help="Export spans over OTLP/HTTP to URL/v1/traces.")
@click.option("--trace-file", type=click.Path(dir_okay=False), default=None, help="Write spans as OTLP JSON lines.")
@click.option("--service-name", default="restorelens-sim", show_default=True, help="service.name of the spans.")
@click.option("--check", is_flag=True, help="Print the effective engine settings as JSON and exit.")
def sim(
    preset: str,
    host: str,
    port: int,
    model_name: str,
    time_scale: float,
    enable_sleep_mode: bool,
    start_mode: str,
    max_num_seqs: int | None,
    num_blocks: int | None,
    scheduling_policy: str | None,
    asleep_requests: str | None,
    api_key: str | None,
    seed: int,
    otlp_endpoint: str | None,
    trace_file: str | None,
    service_name: str,
    check: bool,
) -> None:
    """A vLLM-compatible engine simulator: OpenAI API, KV-cache scheduler, vLLM spans, metrics and sleep mode.

    Spans (llm_request, POST /sleep, POST /wake_up, and vLLM's startup spans when --start cold
    ends) go over OTLP/HTTP (--otlp-endpoint, or the OTEL_EXPORTER_OTLP_* environment, default
    http://localhost:4318) or to --trace-file. A TRACEPARENT (and TRACESTATE) in the environment
    parents the startup spans and requests without a traceparent header, as vLLM does.
    """
    from restorelens.errors import SettingError
    from restorelens.sim.config import get_preset

    if otlp_endpoint and trace_file:
        raise SettingError("--otlp-endpoint/--trace-file", "choose one span destination")
    if api_key is not None and not _header_safe(api_key):
        raise SettingError("--api-key", "must be printable ASCII: it is compared with an HTTP Authorization header")
    overrides = {"max_num_seqs": max_num_seqs, "num_blocks": num_blocks, "scheduling_policy": scheduling_policy,
                 "asleep_requests": asleep_requests}
    config = get_preset(preset).replace(**{k: v for k, v in overrides.items() if v is not None})
    effective = config.scaled(time_scale)
    if check:
        shown = {"preset": preset, "model": model_name, "time_scale": time_scale, **dataclasses.asdict(effective)}
        click.echo(json.dumps(shown, indent=2))
        return
    _serve(config, host, port, model_name, time_scale, enable_sleep_mode, start_mode, api_key, seed,
           otlp_endpoint, trace_file, service_name)


def _header_safe(value: str) -> bool:
    return value.isascii() and value.isprintable()


def _serve(config, host, port, model_name, time_scale, enable_sleep_mode, start_mode, api_key, seed,  # noqa: ANN001
           otlp_endpoint, trace_file, service_name) -> None:  # noqa: ANN001
    from restorelens.serving import listen_on, serve
    from restorelens.sim.app import create_app
    from restorelens.telemetry import build_tracer_provider

    if trace_file:
        provider = build_tracer_provider(service_name, "file", path=trace_file)
    else:
        endpoint = otlp_endpoint.rstrip("/") + "/v1/traces" if otlp_endpoint else None
        provider = build_tracer_provider(service_name, "otlp", endpoint=endpoint)
    try:
        app = create_app(config, model_name=model_name, tracer_provider=provider, time_scale=time_scale,
                         enable_sleep_mode=enable_sleep_mode, start_mode=start_mode, api_key=api_key, seed=seed)
        sock = listen_on(host, port)
        bound_port = sock.getsockname()[1]
        serve(app, sock, ready=f"restorelens sim: model {model_name!r} on http://{host}:{bound_port} "
                               f"(max_num_seqs {config.max_num_seqs}, {config.num_blocks} KV blocks)")
    finally:
        provider.shutdown()


COMMANDS = [sim]
