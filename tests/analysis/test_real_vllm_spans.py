"""Spans recorded from real vLLM 0.32 (CPU) called directly by a user's own app: the app's span
with its own ``app.tier``, opentelemetry-instrumentation-httpx's ``POST`` at its defaults (the
older HTTP semconv names), vLLM's ``llm_request`` — made by tests/live/test_vllm_direct.py with
``RESTORELENS_WRITE_VLLM_FIXTURE``, so the default suite checks the engine view on spans nobody
here wrote by hand. The file is the store's export (``restorelens export --format otlp-json``), so
attribute values are text, as the store keeps them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import restorelens.cli
from restorelens import spans as sc
from restorelens.analysis import Analysis
from restorelens.collector import load_paths

FIXTURE = Path(__file__).parent / "data" / "vllm_direct.jsonl"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vllm") / "spans.duckdb"
    summary = load_paths([FIXTURE], path)
    assert summary.loaded > 0 and not summary.errors
    return path


def _vllm_queue_times() -> dict[str, float]:
    """trace id -> vLLM's own time_in_queue, read from the fixture's JSON, not through the store."""
    found = {}
    for line in FIXTURE.read_text().splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    if span["name"] == sc.SPAN_LLM_REQUEST:
                        values = {a["key"]: a["value"] for a in span["attributes"]}
                        # the store keeps attribute values as text, and export writes them so
                        found[span["traceId"]] = float(next(iter(values[sc.ATTR_LATENCY_TIME_IN_QUEUE].values())))
    return found


def test_the_instrumentations_default_names_give_every_attempt_its_status_and_method(store: Path) -> None:
    with Analysis.open(store) as analysis:
        attempts = analysis.view("typed_http_attempts")
    assert attempts.height == 5
    assert set(attempts["status_code"].to_list()) == {200}
    assert set(attempts["method"].to_list()) == {sc.SPAN_HTTP_POST}
    assert all(url.endswith("/v1/completions") for url in attempts["url"].to_list())


def test_the_engine_view_holds_vllms_own_queue_times_under_the_apps_tiers(store: Path) -> None:
    with Analysis.open(store, labels={"traffic_class": "app.tier"}) as analysis:
        engine = analysis.engine_requests()
    assert dict(zip(engine["trace_id"], engine["queue_s"], strict=True)) == _vllm_queue_times()
    assert sorted(engine["traffic_class"].to_list()) == ["bronze", "bronze", "bronze", "gold", "gold"]
    assert set(engine["attempt_source"].to_list()) == {"client"}
    assert engine["policy"].null_count() == engine.height
    # real vLLM: the engine core's first token reaches the API server later than it was made, so
    # the interval has width, and the point is its upper bound
    assert set(engine["schedule_point"].to_list()) == {"upper"}
    assert (engine["schedule_delay_upper_s"] > engine["schedule_delay_lower_s"]).all()
    assert (engine["schedule_delay_lower_s"] >= engine["queue_s"]).all()


def test_report_prints_the_engine_section_for_traffic_without_a_gate(store: Path) -> None:
    result = CliRunner().invoke(restorelens.cli.cli, ["report", "--db", str(store), "--format", "json",
                                                      "--section", "engine", "--label", "traffic_class=app.tier"])
    assert result.exit_code == 0, result.output
    queue = {row["traffic_class"]: row for row in json.loads(result.output)["engine"] if row["metric"] == "queue_s"}
    assert {tier: row["count"] for tier, row in queue.items()} == {"gold": 2, "bronze": 3}
    assert queue["bronze"]["max"] == max(_vllm_queue_times().values())
