"""``restorelens probe``: the client side, from the command line.

Kept light: heavy imports (httpx, the OTel SDK, the cores) happen inside the commands.
"""

from __future__ import annotations

from typing import Any

import click

from restorelens.errors import SettingError
from restorelens.loadgen.retry import POLICY_NAMES

__all__ = ["COMMANDS", "probe", "traces_endpoint"]

#: ``restorelens.readiness`` kinds a flag can name; a JSON check is given by --readiness-field.
READINESS_CHOICES = ("auto", "health", "completion")
#: The path each of them asks on the engine.
CHECKED_PATHS = {"auto": "/is_sleeping", "health": "/health", "completion": "/v1/completions"}
SERVICE_NAME = "restorelens-loadgen"


def traces_endpoint(collector: str) -> str:
    endpoint = _check_url("--collector", collector).rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


def _tracer_provider(out: str | None, collector: str | None) -> tuple[Any, Any]:
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


def _policy(name: str, max_attempts: int, deadline_s: float, interval_s: float, seed: int) -> Any:
    from restorelens.loadgen.retry import make_policy

    return make_policy(name, max_attempts=max_attempts, deadline_s=deadline_s, interval_s=interval_s, seed=seed)


class _OldNamesHidden(click.Option):
    """An option whose names after the first are old spellings: still accepted, not in --help."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        names, self.opts = self.opts, self.opts[:1]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = names


def _check_url(setting: str, url: str) -> str:
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


def _readiness(url: str | None, kind: str | None, field: str | None, equals: str | None) -> Any:
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
    _check_url("--readiness-url", url)
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


@click.command()
@click.argument("url")
@click.option("--model", "-m", required=True, help="Model name to request (the OpenAI 'model' field).")
@click.option("--readiness-url", default=None,
              help="The engine to poll alongside: its base URL (http://ENGINE; a URL ending in /health or "
                   "/is_sleeping is read as its base), or with --readiness-field the full URL of a JSON answer.")
@click.option("--readiness", "readiness_kind", type=click.Choice(READINESS_CHOICES), default=None,
              help="What says ready [default: auto]: auto = GET /is_sleeping says false (an engine without it: "
                   "/health 2xx, sleep state unknown); health = /health 2xx (vLLM says 200 while asleep); "
                   "completion = a one-token completion for --model answers 2xx.")
@click.option("--readiness-field", default=None, metavar="FIELD",
              help="Instead: --readiness-url answers 200 with a JSON object whose FIELD equals --readiness-equals.")
@click.option("--readiness-equals", default=None, metavar="VALUE",
              help="The --readiness-field value that means ready: JSON (false, 0, \"up\"), else taken as a string.")
@click.option("--policy", type=click.Choice(POLICY_NAMES), default="honour-retry-after", show_default=True,
              help="Retry policy: wait the server's Retry-After; wait the gate's precise "
                   "retry-after-ms or x-restorelens-retry-after-ms (else Retry-After); full-jitter backoff; or a fixed interval.")
@click.option("--max-attempts", type=click.IntRange(min=1), default=20, show_default=True, help="Attempts in all.")
@click.option("--deadline-s", "--deadline", "deadline_s", cls=_OldNamesHidden, type=click.FloatRange(min=0, min_open=True),
              default=300.0, show_default=True, help="No attempt starts later than this many seconds after the first.")
@click.option("--interval-s", "--interval", "interval_s", cls=_OldNamesHidden, type=click.FloatRange(min=0), default=1.0,
              show_default=True, help="Seconds between attempts for --policy fixed.")
@click.option("--poll-interval-s", "--poll-interval", "poll_interval_s", cls=_OldNamesHidden,
              type=click.FloatRange(min=0, min_open=True), default=0.5, show_default=True,
              help="Seconds between readiness polls.")
@click.option("--path", default="/v1/completions", show_default=True, help="Request path under URL.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--prompt-chars", type=click.IntRange(min=1), default=400, show_default=True,
              help="Length of the synthetic filler prompt.")
@click.option("--stream/--no-stream", default=True, show_default=True, help="Ask for SSE and time the first token.")
@click.option("--traffic-class", type=click.Choice(("interactive", "batch")), default="interactive", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the probe's spans to this OTLP/JSON-lines file.")
@click.option("--collector", default=None, help="Send the probe's spans to this OTLP/HTTP endpoint.")
@click.option("--json", "as_json", is_flag=True, help="Print the decomposition as one JSON object.")
@click.option("--timeout-s", "--timeout", "timeout_s", cls=_OldNamesHidden, type=click.FloatRange(min=0, min_open=True),
              default=120.0, show_default=True, help="Per-attempt HTTP timeout in seconds.")
def probe(url: str, model: str, readiness_url: str | None, readiness_kind: str | None, readiness_field: str | None,
          readiness_equals: str | None, policy: str, max_attempts: int, deadline_s: float,
          interval_s: float, poll_interval_s: float, path: str, max_tokens: int, prompt_chars: int, stream: bool,
          traffic_class: str, out: str | None, collector: str | None, as_json: bool, timeout_s: float) -> None:
    """Probe a gateway with one first request and print its wake decomposition.

    Sends one completion request for MODEL to URL (any OpenAI-compatible gateway: AIBrix, the
    restorelens gate, vLLM), retries it per --policy, runs the --readiness check against
    --readiness-url alongside, and prints: the first status and its Retry-After, when readiness was
    reached and when the client observed it, the overshoot (ready, but still waiting), the
    attempts, and the total time to first token. vLLM answers /health 200 while asleep, so by
    default readiness is the engine's own sleep state (GET /is_sleeping, which vLLM serves with
    VLLM_SERVER_DEV_MODE=1).
    Exits 1 when the request did not succeed (outcome other than ok), so it can gate a CI step,
    and when spans could not be exported to --out or --collector.
    """
    import asyncio
    import json
    import uuid

    from restorelens.loadgen.client import TracedClient
    from restorelens.loadgen.probe import run_probe
    from restorelens.loadgen.prompts import filler_prompt
    from restorelens.loadgen.request import ClientRequest, RunLabels

    _check_url("URL", url)
    readiness = _readiness(readiness_url, readiness_kind, readiness_field, readiness_equals)
    provider, exported = _tracer_provider(out, collector)
    request_id = f"probe-{uuid.uuid4().hex[:12]}"
    request = ClientRequest(
        request_id, model, filler_prompt(prompt_chars, 0, request_id), max_tokens, traffic_class=traffic_class,
        stream=stream, path=path, labels=RunLabels(scenario="probe", run_id=request_id),
    )

    async def go() -> Any:
        async with TracedClient(url, policy=_policy(policy, max_attempts, deadline_s, interval_s, 0),
                                tracer_provider=provider, timeout_s=timeout_s) as client:
            return await run_probe(client, request, readiness_url=readiness_url, readiness=readiness,
                                   poll_interval_s=poll_interval_s)

    try:
        report = asyncio.run(go())
    finally:
        provider.shutdown()  # flushes: every failed export is counted after this
    if as_json:
        click.echo(json.dumps(report.as_dict()))
    else:
        click.echo(f"probe {url} model={model} policy={policy}")
        for line in report.lines():
            click.echo(f"  {line}")
    if exported is not None:
        exported.raise_if_dropped()
    if report.outcome != "ok":
        # like `restorelens check`: a failed probe fails a CI step
        click.echo(f"probe failed: the request ended {report.outcome}", err=True)
        click.get_current_context().exit(1)


COMMANDS = [probe]
