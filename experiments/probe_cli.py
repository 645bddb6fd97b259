"""``restorelens probe``: one first request through a gateway, decomposed from the client's side
and, given the span store, by the report's own wake episode (``probe_episode``).

The client's options and checks are ``restorelens.loadgen.cli``'s; this command composes the
client with the analysis, as only the experiments package may.
"""

from __future__ import annotations

from typing import Any

import click

from restorelens.errors import SettingError
from restorelens.loadgen import cli as client_cli
from restorelens.loadgen import POLICY_NAMES

__all__ = ["COMMANDS", "probe"]


@click.command()
@click.argument("url")
@click.option("--model", "-m", required=True, help="Model name to request (the OpenAI 'model' field).")
@click.option("--readiness-url", default=None,
              help="The engine to poll alongside: its base URL (http://ENGINE; a URL ending in /health or "
                   "/is_sleeping is read as its base), or with --readiness-field the full URL of a JSON answer.")
@click.option("--readiness", "readiness_kind", type=click.Choice(client_cli.READINESS_CHOICES), default=None,
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
@click.option("--deadline-s", "--deadline", "deadline_s", cls=client_cli.OldNamesHidden, type=click.FloatRange(min=0, min_open=True),
              default=300.0, show_default=True, help="No attempt starts later than this many seconds after the first.")
@click.option("--interval-s", "--interval", "interval_s", cls=client_cli.OldNamesHidden, type=click.FloatRange(min=0), default=1.0,
              show_default=True, help="Seconds between attempts for --policy fixed.")
@click.option("--poll-interval-s", "--poll-interval", "poll_interval_s", cls=client_cli.OldNamesHidden,
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
@click.option("--db", "db_path", type=click.Path(dir_okay=False), default=None,
              help="The span store the gate's and the probe's spans reach (e.g. restorelens collect's): read this "
                   "request's wake episode there and print the report's ready, observed, overshoot and hint error.")
@click.option("--episode-wait-s", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="With --db: seconds to wait for the wake episode's spans to reach the store.")
@click.option("--json", "as_json", is_flag=True, help="Print the decomposition as one JSON object.")
@click.option("--timeout-s", "--timeout", "timeout_s", cls=client_cli.OldNamesHidden, type=click.FloatRange(min=0, min_open=True),
              default=120.0, show_default=True, help="Per-attempt HTTP timeout in seconds.")
def probe(url: str, model: str, readiness_url: str | None, readiness_kind: str | None, readiness_field: str | None,
          readiness_equals: str | None, policy: str, max_attempts: int, deadline_s: float,
          interval_s: float, poll_interval_s: float, path: str, max_tokens: int, prompt_chars: int, stream: bool,
          traffic_class: str, out: str | None, collector: str | None, db_path: str | None, episode_wait_s: float,
          as_json: bool, timeout_s: float) -> None:
    """Probe a gateway with one first request and print its wake decomposition.

    Sends one completion request for MODEL to URL (any OpenAI-compatible gateway: AIBrix, the
    restorelens gate, vLLM), retries it per --policy, runs the --readiness check against
    --readiness-url alongside, and prints: the first status and its Retry-After, when readiness was
    the readiness check first said ready, when the client's successful attempt ended, the attempts
    and the time to the first chunk. With --db, the request's wake episode as `restorelens report`
    decomposes it (engine ready, readiness observed by the lifecycle, overshoot, hint error, from
    the gate's spans): those figures carry the report's names; the probe's own carry others. vLLM answers /health 200 while asleep, so by
    default readiness is the engine's own sleep state (GET /is_sleeping, which vLLM serves with
    VLLM_SERVER_DEV_MODE=1).
    Exits 1 when the request did not succeed (outcome other than ok), so it can gate a CI step,
    and when spans could not be exported to --out or --collector.
    """
    import asyncio
    import json
    import uuid

    from restorelens.loadgen import ClientRequest, RunLabels, TracedClient, filler_prompt, run_probe

    client_cli.check_url("URL", url)
    readiness = client_cli.readiness(readiness_url, readiness_kind, readiness_field, readiness_equals)
    if db_path is not None and collector is None:
        raise SettingError("--db", "needs --collector: the probe's own spans must reach that store")
    provider, exported = client_cli.tracer_provider(out, collector)
    request_id = f"probe-{uuid.uuid4().hex[:12]}"
    request = ClientRequest(
        request_id, model, filler_prompt(prompt_chars, 0, request_id), max_tokens, traffic_class=traffic_class,
        stream=stream, path=path, labels=RunLabels(scenario="probe", run_id=request_id),
    )

    async def go() -> Any:
        async with TracedClient(url, policy=client_cli.policy(policy, max_attempts, deadline_s, interval_s, 0),
                                tracer_provider=provider, timeout_s=timeout_s) as client:
            return await run_probe(client, request, readiness_url=readiness_url, readiness=readiness,
                                   poll_interval_s=poll_interval_s)

    try:
        report = asyncio.run(go())
    finally:
        provider.shutdown()  # flushes: every failed export is counted after this
    if db_path is not None and report.first_status is not None and 200 <= report.first_status < 300:
        report = report.with_episode(None, "no wake: the first answer was a success")
    elif db_path is not None:
        from restorelens.experiments.probe_episode import read_episode

        report = report.with_episode(*read_episode(db_path, request_id, wait_s=episode_wait_s))
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
