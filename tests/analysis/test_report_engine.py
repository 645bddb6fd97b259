"""The report's engine section and label mapping through the real CLI on a real DuckDB file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import Traces
from test_cli import invoke


def build_store(path: Path) -> None:
    """A user's own client calling vLLM directly (two tiers, their attribute ``app.tier``) and one
    restorelens client that passed no gate and names no policy."""
    traces = Traces()
    for tier, queue_s in (("gold", 0.25), ("gold", 0.75), ("bronze", 2.0)):
        trace = traces.new_trace()
        chat = traces.span(trace, "chat", 0.0, 5.0, service="app", attributes={"app.tier": tier})
        post = traces.attempt(trace, chat, 0.0, 5.0, status=200, service="app")
        traces.engine(trace, post, 0.125, time_in_queue_s=queue_s, ttft_s=queue_s + 0.5, e2e_s=4.0)
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 2.0, first_chunk_s=1.0, traffic_class="interactive")
    attempt = traces.attempt(trace, client, 0.0, 2.0, status=200)
    traces.engine(trace, attempt, 0.0, time_in_queue_s=0.5, ttft_s=1.0, e2e_s=1.5)
    traces.save(path)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "spans.duckdb"
    build_store(path)
    return path


def _engine_rows(output: str, metric: str) -> dict[str | None, dict]:
    rows = json.loads(output)["engine"]
    return {row["traffic_class"]: row for row in rows if row["metric"] == metric}


def test_the_engine_section_groups_every_engine_request_by_engine_and_class(store: Path) -> None:
    result = invoke("report", "--db", str(store), "--format", "json", "--label", "traffic_class=app.tier")
    assert result.exit_code == 0, result.output
    queue = _engine_rows(result.output, "queue_s")
    assert set(queue) == {"gold", "bronze", "interactive"}
    assert (queue["gold"]["count"], queue["gold"]["p50"], queue["gold"]["max"]) == (2, 0.5, 0.75)
    assert queue["bronze"]["engine"] == "unknown_service:python"
    assert queue["interactive"]["engine"] == "tiny"  # the model the restorelens client asked for
    delay = _engine_rows(result.output, "schedule_delay_s")
    # the attempt started 0.125 s before vLLM's arrival; queued on arrival for 2 s
    assert delay["bronze"]["max"] == 2.125
    metrics = {row["metric"] for row in json.loads(result.output)["engine"]}
    assert metrics == {"queue_s", "schedule_delay_s", "schedule_delay_lower_s", "schedule_delay_upper_s", "ttft_s",
                       "prefill_s", "decode_s"}


def test_without_a_mapping_the_users_classes_are_unknown_not_invented(store: Path) -> None:
    result = invoke("report", "--db", str(store), "--format", "json", "--section", "engine")
    assert result.exit_code == 0, result.output
    assert set(_engine_rows(result.output, "queue_s")) == {None, "interactive"}


def test_a_toml_mapping_works_like_the_flag_and_the_flag_wins(store: Path, tmp_path: Path) -> None:
    config = tmp_path / "restorelens.toml"
    config.write_text('[gate]\npolicy = "lend"\n\n[analysis.labels]\ntraffic_class = "no.such.attribute"\n')
    from_file = invoke("report", "--db", str(store), "--format", "json", "--config", str(config))
    assert from_file.exit_code == 0, from_file.output
    assert set(_engine_rows(from_file.output, "queue_s")) == {None, "interactive"}
    flag = invoke("report", "--db", str(store), "--format", "json", "--config", str(config),
                  "--label", "traffic_class=app.tier")
    assert set(_engine_rows(flag.output, "queue_s")) == {"gold", "bronze", "interactive"}


@pytest.mark.parametrize(("args", "names"), [
    (("--label", "traffic_class"), "--label"),
    (("--label", "tier=app.tier"), "--label"),
])
def test_a_bad_label_is_one_line_naming_the_option(store: Path, args: tuple[str, ...], names: str) -> None:
    result = invoke("report", "--db", str(store), *args)
    assert result.exit_code != 0
    assert names in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_a_bad_toml_table_names_the_file_and_the_key(store: Path, tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[analysis.labels]\ntier = \"app.tier\"\n")
    result = invoke("report", "--db", str(store), "--config", str(config))
    assert result.exit_code != 0
    assert str(config) in result.output and "tier" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_request_that_passed_no_gate_reads_no_gate_in_text_and_null_in_json(store: Path) -> None:
    as_json = invoke("report", "--db", str(store), "--format", "json", "--section", "policy_summary")
    assert [row["policy"] for row in json.loads(as_json.output)["policy_summary"]] == [None]
    for fmt in ("markdown", "table"):
        text = invoke("report", "--db", str(store), "--format", fmt, "--section", "policy_summary").output
        assert "no gate" in text and "none" not in text


def test_check_takes_limits_on_the_engine_view(store: Path) -> None:
    held = invoke("check", "--db", str(store), "--max", "queue_s.max=2", "--max", "engine.schedule_delay_s.p50=1")
    assert held.exit_code == 0, held.output
    failed = invoke("check", "--db", str(store), "--max", "queue_s.max=1.5")
    assert failed.exit_code == 1
    assert "engine.queue_s.max = 2 > 1.5 (n=4)" in failed.output


def test_a_store_the_sql_cannot_decompose_is_one_line_naming_it(store: Path) -> None:
    import duckdb

    from restorelens import spans

    con = duckdb.connect(str(store))
    # a duration no span can have (above int64 nanoseconds), as another tool might write it
    con.execute('update otel_traces set "Duration" = 18446744073709551615 where "SpanName" = $name',
                {"name": spans.SPAN_HTTP_POST})
    con.close()
    for command in (("report",), ("check", "--max", "queue_s.max=1")):
        result = invoke(*command, "--db", str(store))
        assert result.exit_code == (2 if command[0] == "check" else 1), result.output
        assert str(store) in result.output and "cannot decompose" in result.output
        assert len(result.output.strip().splitlines()) == 1
