from __future__ import annotations

import json
import socket

from click.testing import CliRunner

from restorelens.cli import cli


def test_sim_is_a_restorelens_command_with_help() -> None:
    result = CliRunner().invoke(cli, ["sim", "--help"])
    assert result.exit_code == 0, result.output
    for flag in ("--preset", "--port", "--time-scale", "--enable-sleep-mode", "--otlp-endpoint", "--trace-file"):
        assert flag in result.output


def test_check_prints_the_effective_settings() -> None:
    result = CliRunner().invoke(
        cli, ["sim", "--preset", "qwen2.5-1.5b-m1", "--scheduling-policy", "priority", "--time-scale", "10", "--check"]
    )
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["num_blocks"] == 320 and shown["scheduling_policy"] == "priority"
    assert shown["cold_start_s"] == 2.0  # 20 s at time scale 10
    assert shown["asleep_requests"] == "hold"
    assert shown["startup_phases"][0] == ["Overall Loading", "", 0.6, 1.3]  # 6 s and 13 s at time scale 10


def test_asleep_requests_can_be_refused() -> None:
    result = CliRunner().invoke(cli, ["sim", "--asleep-requests", "refuse", "--check"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["asleep_requests"] == "refuse"
    wrong = CliRunner().invoke(cli, ["sim", "--asleep-requests", "queue", "--check"])
    assert wrong.exit_code == 2 and "--asleep-requests" in wrong.output


def test_unknown_preset_is_one_line_naming_the_valid_ones() -> None:
    result = CliRunner().invoke(cli, ["sim", "--preset", "nope", "--check"])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "tiny-cpu" in result.output and "Traceback" not in result.output


def test_a_busy_port_is_one_line_error(tmp_path: object) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(cli, ["sim", "--port", str(port), "--trace-file", f"{tmp_path}/t.jsonl"])
    assert result.exit_code == 1 and "--port" in result.output and "Traceback" not in result.output


def test_two_span_destinations_are_refused() -> None:
    result = CliRunner().invoke(cli, ["sim", "--otlp-endpoint", "http://x", "--trace-file", "t.jsonl"])
    assert result.exit_code == 1 and "choose one" in result.output


def test_a_port_out_of_range_is_refused_before_anything_runs() -> None:
    for port in ("-1", "70000"):
        result = CliRunner().invoke(cli, ["sim", "--port", port, "--check"])
        assert result.exit_code == 2, result.output  # click's usage error, naming the option
        assert "--port" in result.output and "0<=x<=65535" in result.output and "Traceback" not in result.output


def test_a_non_ascii_api_key_is_one_line_error(tmp_path: object) -> None:
    result = CliRunner().invoke(cli, ["sim", "--port", "0", "--api-key", "ключ", "--trace-file", f"{tmp_path}/t.jsonl"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: setting --api-key: must be printable ASCII")
    assert result.output.count("\n") == 1


def test_a_bad_host_names_host(tmp_path: object) -> None:
    result = CliRunner().invoke(cli, ["sim", "--host", "999.1.1.1", "--port", "0", "--trace-file", f"{tmp_path}/t.jsonl"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: setting --host: cannot listen on '999.1.1.1'")
