"""The client side's command-line pieces: ``restorelens probe``'s options, checks and span output.

The command itself is ``restorelens.experiments.probe_cli``: it reads the wake episode from a span
store too, which the client, knowing nothing of the analysis, cannot. Kept light: heavy imports
(httpx, the OTel SDK, the cores) happen inside the functions.
"""

from __future__ import annotations

from typing import Any

import click

from restorelens.errors import SettingError
from restorelens.loadgen.retry import POLICY_NAMES

__all__ = ["CHECKED_PATHS", "READINESS_CHOICES", "SERVICE_NAME", "OldNamesHidden", "check_url", "policy",
           "readiness", "traces_endpoint", "tracer_provider"]

#: ``restorelens.readiness`` kinds a flag can name; a JSON check is given by --readiness-field.
READINESS_CHOICES = ("auto", "health", "completion")
#: The path each of them asks on the engine.
CHECKED_PATHS = {"auto": "/is_sleeping", "health": "/health", "completion": "/v1/completions"}
SERVICE_NAME = "restorelens-loadgen"


def traces_endpoint(collector: str) -> str:
    endpoint = check_url("--collector", collector).rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


def tracer_provider(out: str | None, collector: str | None) -> tuple[Any, Any]:
    """The probe's provider, and the exporter counting what it could not export (None: no output)."""
    from restorelens.loadgen.export_failures import CountingExporter
    from restorelens.telemetry import JsonLinesSpanExporter, build_tracer_provider

    if out and collector:
        raise SettingError("--out/--collector", "give one of them, not both")
    if out:
        counting = CountingExporter(JsonLinesSpanExporter(out), out)
    elif collector:
        from restorelens.otlp_export import OtlpHttpSpanExporter

        endpoint = traces_endpoint(collector)
        counting = CountingExporter(OtlpHttpSpanExporter(endpoint), endpoint)
    else:
        return build_tracer_provider(SERVICE_NAME, "none"), None
    return build_tracer_provider(SERVICE_NAME, counting), counting


def policy(name: str, max_attempts: int, deadline_s: float, interval_s: float, seed: int) -> Any:
    from restorelens.loadgen.retry import make_policy

    return make_policy(name, max_attempts=max_attempts, deadline_s=deadline_s, interval_s=interval_s, seed=seed)


class OldNamesHidden(click.Option):
    """An option whose names after the first are old spellings: still accepted, not in --help."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        names, self.opts = self.opts, self.opts[:1]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = names


def check_url(setting: str, url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise SettingError(setting, f"{url!r} is not an http(s) URL")
    return url


def _equals_value(raw: str) -> Any:
    """A --readiness-equals value: a JSON scalar when it reads as one (false, 0, "up"), else the text."""
    import json

    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, str | int | float | bool) else raw


def readiness(url: str | None, kind: str | None, field: str | None, equals: str | None) -> Any:
    """The probe's readiness check (None without --readiness-url); a note on stderr when a URL's
    path is not what the check asks."""
    from restorelens.loadgen.probe import readiness_target
    from restorelens.readiness import AUTO, JSON, ReadinessCheck

    given = [name for name, value in (("--readiness", kind), ("--readiness-field", field),
                                      ("--readiness-equals", equals)) if value is not None]
    if url is None:
        if given:
            raise SettingError(given[0], "needs --readiness-url (the engine to check)")
        return None
    check_url("--readiness-url", url)
    if field is not None or equals is not None:
        if kind is not None:
            raise SettingError("--readiness-field", f"a JSON check replaces --readiness {kind}; give one of them")
        if not field:
            raise SettingError("--readiness-field", "give the JSON field to compare with --readiness-equals")
        if equals is None:
            raise SettingError("--readiness-equals", f"give the value of {field!r} that means ready (e.g. false)")
        return ReadinessCheck(JSON, "/", field, _equals_value(equals))
    check = ReadinessCheck(kind or AUTO)
    _, _, suffix = readiness_target(url, check)
    if suffix is not None and suffix != CHECKED_PATHS[check.kind]:
        # Said, not silently changed: until the checks came, this URL was polled as given.
        hint = " (--readiness health counts /health alone)" if suffix == "/health" else ""
        click.echo(f"note: --readiness-url ends in {suffix}, read as the engine's base URL; the check is "
                   f"{check.describe()}{hint}", err=True)
    return check
