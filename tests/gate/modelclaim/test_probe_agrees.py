"""One number per name: `restorelens probe --db` prints the wake episode `restorelens report`
gives for the same wake, to the millisecond. Real servers on loopback: a collector writing a span
store, the simulator started asleep, the gate whose lifecycle wakes it; every service's spans
reach the collector over OTLP/HTTP, the probe's too."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from click.testing import CliRunner

from restorelens.cli import cli
from restorelens.collector.receiver import create_receiver_app
from restorelens.gate.app import create_gate_app
from restorelens.gate.settings import GateSettings
from restorelens.otlp_export import OtlpHttpSpanExporter
from restorelens.sim.app import create_app
from restorelens.sim.config import get_preset
from restorelens.telemetry import build_tracer_provider

from .test_attach_asleep import MODEL, lifecycle_table, status_of
from .test_http import wait_for

#: The wake episode's figures both commands print, under the same names.
SHARED = ("ready_s", "observed_s", "overshoot_s", "hint_error_s")


def test_the_probe_prints_the_reports_wake_figures(serve_asgi, tmp_path: Path) -> None:  # noqa: ANN001
    db = tmp_path / "spans.duckdb"
    collector = serve_asgi(create_receiver_app(db)).url
    # each span exported as it ends, so the store holds the wake's spans when the probe reads it
    providers = [build_tracer_provider(name, OtlpHttpSpanExporter(f"{collector}/v1/traces"), batch=False)
                 for name in ("restorelens-sim", "restorelens-gate")]
    config = dataclasses.replace(get_preset("tiny-cpu"), wake_fixed_s=1.0)
    sim = serve_asgi(create_app(config, model_name=MODEL, enable_sleep_mode=True, start_mode="asleep",
                                tracer_provider=providers[0]))
    gate = serve_asgi(create_gate_app(GateSettings(modelclaim=lifecycle_table(sim.url)), tracer_provider=providers[1]))
    wait_for(lambda: status_of(gate.url)["phase"] == "Sleeping", "the attach")

    probed = CliRunner().invoke(cli, [
        "probe", gate.url, "--model", MODEL, "--readiness-url", sim.url, "--poll-interval-s", "0.5",
        "--policy", "fixed", "--interval-s", "0.1", "--no-stream", "--json", "--collector", collector,
        "--db", str(db)])
    assert probed.exit_code == 0, probed.output
    probe = json.loads(probed.stdout)
    assert probe["first_status"] == 503 and probe["episode_note"] is None and probe["wake_path"] == "in-place"
    for provider in providers:
        provider.force_flush()

    reported = CliRunner().invoke(cli, ["report", "--db", str(db), "--format", "json", "--section", "wake_episodes"])
    assert reported.exit_code == 0, reported.output
    # the report's statistics of one wake: each metric's max is that wake's value
    rows = json.loads(reported.stdout)["wake_episodes"]
    wake = {row["metric"]: row["max"] for row in rows if row["count"] == 1}
    assert {row["count"] for row in rows} == {1} and set(SHARED) <= set(wake)
    for name in SHARED:
        assert probe[name] is not None, name
        assert round(probe[name], 3) == round(wake[name], 3), (name, probe[name], wake[name])
    # ready before observed, as the lifecycle saw them; the probe's poll is its own figure
    assert 0 < probe["ready_s"] <= probe["observed_s"]
    assert probe["polled_ready_s"] is not None and "polled_ready_s" not in wake
