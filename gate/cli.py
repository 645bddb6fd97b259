"""``restorelens gate``: run the admission gate in front of OpenAI-compatible engines."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import click

from restorelens.errors import SettingError
from restorelens.gate.settings import SETTINGS, GateSettings, Setting
from restorelens.settings import http_url_problem

__all__ = ["COMMANDS", "gate"]


def _option(setting: Setting, flag: str, dest: str, *, hidden: bool = False) -> click.Option:
    """The flag of a declared setting; None when absent, so that the environment and TOML decide."""
    if setting.flag_value is not None:
        return click.Option([flag, dest], is_flag=True, flag_value=setting.flag_value, default=None, help=setting.help)
    value_type = click.Choice(setting.choices) if setting.choices else setting.kind.from_text
    return click.Option([flag, dest], type=value_type, multiple=setting.repeatable, metavar=setting.metavar,
                        default=None, help=setting.help, hidden=hidden)


def _old_dest(setting: Setting) -> str:
    return f"{setting.name}_old_flag"


def _params() -> list[click.Parameter]:
    flags = []
    for each in SETTINGS:
        if each.flag is not None:
            flags.append(_option(each, each.flag, each.name))
        if each.old_flag is not None:
            flags.append(_option(each, each.old_flag, _old_dest(each), hidden=True))
    no_tracing = next(option for option in flags if option.name == "tracing")
    flags.remove(no_tracing)  # --help has always listed it with the span destinations
    return [
        *flags,
        click.Option(["--config", "config_file"], type=click.Path(dir_okay=False), default=None,
                     help="TOML file with a [gate] table (and optionally [modelclaim] for the lifecycle driver)."),
        click.Option(["--otlp-endpoint"], default=None, metavar="URL", help="Export spans over OTLP/HTTP to URL/v1/traces."),
        click.Option(["--trace-file"], type=click.Path(dir_okay=False), default=None, help="Write spans as OTLP JSON lines."),
        no_tracing,
        click.Option(["--check"], is_flag=True, help="Validate the settings, print them as JSON and exit."),
    ]


def _flag_values(params: dict[str, Any]) -> dict[str, Any]:
    """The settings given as flags, by setting name (None: not given)."""
    values = {}
    for each in SETTINGS:
        if each.flag is None:
            continue
        value = params[each.name]
        if value is None and each.old_flag is not None:
            value = params[_old_dest(each)]
        values[each.name] = (list(value) or None) if each.repeatable else value
    return values


@click.command("gate", params=_params())
def gate(config_file: str | None, otlp_endpoint: str | None, trace_file: str | None, check: bool, **flags: Any) -> None:
    """Admission gate: protect interactive capacity, lend it to batch, trace every restoration.

    Settings come from flags, then RESTORELENS_GATE_* environment variables (e.g.
    RESTORELENS_GATE_ADMIN_TOKEN), then the --config file's [gate] table, then defaults.
    Admin endpoints (/admin/state, /admin/policy) need gate.admin_token as a bearer token.
    """
    if otlp_endpoint and trace_file:
        raise SettingError("--otlp-endpoint/--trace-file", "choose one span destination")
    if otlp_endpoint and (problem := http_url_problem(otlp_endpoint)) is not None:
        # A bad endpoint fails only at the first export, in a log line, and every span is lost.
        raise SettingError("--otlp-endpoint", problem)
    settings = GateSettings.load(config_file, **_flag_values(flags))
    if check:
        if settings.modelclaim is not None:
            from restorelens.gate.modelclaim import check_table

            check_table(settings.modelclaim)  # what a start would refuse, without starting engines
        shown = {k: v for k, v in _as_dict(settings).items() if k != "admin_token"}
        shown["admin_token"] = "set" if settings.admin_token else None
        click.echo(json.dumps(shown, indent=2, sort_keys=True))
        return
    _serve(settings, otlp_endpoint, trace_file)


def _as_dict(settings: GateSettings) -> dict[str, Any]:
    return {k: (dict(v) if hasattr(v, "items") else v) for k, v in asdict(settings).items()}


def _serve(settings: GateSettings, otlp_endpoint: str | None, trace_file: str | None) -> None:
    from restorelens.gate.app import create_gate_app
    from restorelens.serving import ServingLimits, listen_on, serve
    from restorelens.telemetry import build_tracer_provider

    sock = listen_on(settings.host, settings.port)  # listening already: the banner may be read and acted on at once
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
        limits = ServingLimits(settings.head_timeout_s, settings.max_client_connections, settings.drain_timeout_s)
        serve(app, sock, ready=f"restorelens gate: {settings.policy} on http://{bound_host}:{bound_port}", limits=limits)
    finally:
        sock.close()
        if provider is not None:
            provider.shutdown()


COMMANDS = [gate]
