"""``restorelens gate``: run the admission gate in front of OpenAI-compatible engines."""

from __future__ import annotations

import json

import click

__all__ = ["COMMANDS", "gate"]


@click.command("gate")
@click.option("--upstream", "upstreams", multiple=True, metavar="[MODEL=]URL",
              help="Engine base URL; MODEL=URL routes one model (repeat for several models or replicas).")
@click.option("--policy", type=click.Choice(["fcfs", "priority", "static", "lend"]), default=None,
              help="Admission policy (default lend).")
@click.option("--floors", default=None, metavar="CLASS=N,...", help="Per-class slots, e.g. interactive=3,batch=1.")
@click.option("--lendable", "lendable_slots", type=int, default=None,
              help="Protected slots lendable to batch while interactive is idle (at least one is never lent).")
@click.option("--capacity", type=int, default=None, help="Shared cap of the fcfs/priority policies (default: none).")
@click.option("--default-class", "default_traffic_class", type=click.Choice(["interactive", "batch"]), default=None,
              help="Traffic class of requests without an x-traffic-class header.")
@click.option("--wait-timeout-s", "wait_timeout_s", type=float, default=None,
              help="Seconds a request may queue for a grant before 429 (default 30).")
@click.option("--wait-timeout", "wait_timeout_alias", type=float, default=None, hidden=True)  # the old name
@click.option("--host", default=None, help="Bind address (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default 8080).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="TOML file with a [gate] table (and optionally [modelclaim] for the lifecycle driver).")
@click.option("--otlp-endpoint", default=None, metavar="URL", help="Export spans over OTLP/HTTP to URL/v1/traces.")
@click.option("--trace-file", type=click.Path(dir_okay=False), default=None, help="Write spans as OTLP JSON lines.")
@click.option("--no-tracing", is_flag=True, help="Emit no spans at all.")
@click.option("--check", is_flag=True, help="Validate the settings, print them as JSON and exit.")
def gate(
    upstreams: tuple[str, ...],
    policy: str | None,
    floors: str | None,
    lendable_slots: int | None,
    capacity: int | None,
    default_traffic_class: str | None,
    wait_timeout_s: float | None,
    wait_timeout_alias: float | None,
    host: str | None,
    port: int | None,
    config_file: str | None,
    otlp_endpoint: str | None,
    trace_file: str | None,
    no_tracing: bool,
    check: bool,
) -> None:
    """Admission gate: protect interactive capacity, lend it to batch, trace every restoration.

    Settings come from flags, then RESTORELENS_GATE_* environment variables (e.g.
    RESTORELENS_GATE_ADMIN_TOKEN), then the --config file's [gate] table, then defaults.
    Admin endpoints (/admin/state, /admin/policy) need gate.admin_token as a bearer token.
    """
    from restorelens.errors import SettingError
    from restorelens.gate.settings import GateSettings

    if otlp_endpoint and trace_file:
        raise SettingError("--otlp-endpoint/--trace-file", "choose one span destination")
    settings = GateSettings.load(
        config_file,
        upstreams=list(upstreams) or None,
        policy=policy,
        floors=floors,
        lendable_slots=lendable_slots,
        capacity=capacity,
        default_traffic_class=default_traffic_class,
        wait_timeout_s=wait_timeout_alias if wait_timeout_s is None else wait_timeout_s,
        host=host,
        port=port,
        tracing=False if no_tracing else None,
    )
    if check:
        if settings.modelclaim is not None:
            from restorelens.gate.modelclaim import check_table

            check_table(settings.modelclaim)  # what a start would refuse, without starting engines
        shown = {k: v for k, v in _as_dict(settings).items() if k != "admin_token"}
        shown["admin_token"] = "set" if settings.admin_token else None
        click.echo(json.dumps(shown, indent=2, sort_keys=True))
        return
    _serve(settings, otlp_endpoint, trace_file)


def _as_dict(settings) -> dict:
    from dataclasses import asdict

    return {k: (dict(v) if hasattr(v, "items") else v) for k, v in asdict(settings).items()}


def _listen(host: str, port: int):  # -> socket.socket
    """Bind before anything else starts, so a busy port or bad host is one line and no banner."""
    import socket

    from restorelens.errors import SettingError
    from restorelens.serving import bind_socket

    try:
        return bind_socket(host, port)
    except socket.gaierror as exc:
        raise SettingError("--host", f"cannot listen on {host!r}: {exc.strerror or exc}") from None
    except (OSError, OverflowError) as exc:
        problem = getattr(exc, "strerror", None) or exc
        raise SettingError("--port", f"cannot listen on {host}:{port}: {problem}") from None


def _serve(settings, otlp_endpoint: str | None, trace_file: str | None) -> None:
    import uvicorn

    from restorelens.gate.app import create_gate_app
    from restorelens.telemetry import build_tracer_provider

    sock = _listen(settings.host, settings.port)
    provider = None
    try:
        if settings.tracing:
            if trace_file:
                provider = build_tracer_provider(settings.service_name, "file", path=trace_file)
            else:
                endpoint = otlp_endpoint.rstrip("/") + "/v1/traces" if otlp_endpoint else None
                provider = build_tracer_provider(settings.service_name, "otlp", endpoint=endpoint)
        app = create_gate_app(settings, tracer_provider=provider)
        bound_host, bound_port = sock.getsockname()[:2]
        # The bound port, not the asked one: with --port 0 the kernel picked it.
        click.echo(f"restorelens gate: {settings.policy} on http://{bound_host}:{bound_port}", err=True)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        server.run(sockets=[sock])
    finally:
        sock.close()
        if provider is not None:
            provider.shutdown()


COMMANDS = [gate]
