"""``restorelens gate`` through the real click group."""

from __future__ import annotations

import json
import os
import re
import select
import socket
import stat
import subprocess
import sys

import click
import httpx
import pytest
from click.testing import CliRunner

import restorelens.cli
import restorelens.gate.cli
from restorelens.gate.settings import SETTINGS


def test_check_prints_effective_settings(monkeypatch) -> None:
    monkeypatch.setenv("RESTORELENS_GATE_ADMIN_TOKEN", "a-long-token")
    result = CliRunner().invoke(restorelens.cli.cli, [
        "gate", "--upstream", "http://127.0.0.1:9", "--upstream", "tiny=http://127.0.0.1:10",
        "--policy", "lend", "--floors", "interactive=3,batch=1", "--lendable", "2", "--port", "0", "--check",
    ])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["upstreams"] == {"*": ["http://127.0.0.1:9"], "tiny": ["http://127.0.0.1:10"]}
    assert shown["floors"] == {"interactive": 3, "batch": 1} and shown["lendable_slots"] == 2
    assert shown["admin_token"] == "set"  # never echoed


def test_bad_setting_is_one_line_naming_it() -> None:
    result = CliRunner().invoke(restorelens.cli.cli, ["gate", "--upstream", "http://x", "--lendable", "5", "--check"])
    assert result.exit_code == 1
    assert "setting gate.lendable_slots:" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_help_lists_the_gate() -> None:
    result = CliRunner().invoke(restorelens.cli.cli, ["gate", "--help"])
    assert result.exit_code == 0 and "--lendable" in result.output and "RESTORELENS_GATE_" in result.output
    assert "--wait-timeout-s" in result.output and "--wait-timeout " not in result.output


def test_wait_timeout_flag_has_its_unit_and_keeps_the_old_name() -> None:
    base = ["gate", "--upstream", "http://x", "--check"]
    for flag in ("--wait-timeout-s", "--wait-timeout"):
        result = CliRunner().invoke(restorelens.cli.cli, [*base, flag, "7.5"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["wait_timeout_s"] == 7.5


def test_non_finite_wait_timeout_is_rejected() -> None:
    for value in ("nan", "inf", "-1"):
        result = CliRunner().invoke(restorelens.cli.cli, ["gate", "--upstream", "http://x", "--wait-timeout-s", value, "--check"])
        assert result.exit_code == 1, result.output
        assert "setting gate.wait_timeout_s: expected a finite number" in result.output
        assert len(result.output.strip().splitlines()) == 1


MODELCLAIM = """
[gate]
admin_token = "a-long-token"
[modelclaim]
policy = {{ sleepAfterSeconds = 60 }}
{extra}
[[modelclaim.pods]]
name = "pod-1"
gpus = ["24Gi"]
[[modelclaim.claims]]
model = "m"
perGPU = {{ maximumFootprint = "10Gi", kvFloor = "4Gi" }}
command = ["/nonexistent/engine", "--port", "{{port}}"]
"""


def test_check_validates_the_modelclaim_table_without_starting_engines(tmp_path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(MODELCLAIM.format(extra=""))
    result = CliRunner().invoke(restorelens.cli.cli, ["gate", "--config", str(good), "--check"])
    assert result.exit_code == 0, result.output  # the engine command does not exist: nothing was started
    assert json.loads(result.output)["modelclaim"]["claims"][0]["model"] == "m"

    for extra, setting in [("foo = 1", "modelclaim.foo"), ("poll_interval_s = \"fast\"", "modelclaim.poll_interval_s")]:
        bad = tmp_path / "bad.toml"
        bad.write_text(MODELCLAIM.format(extra=extra))
        result = CliRunner().invoke(restorelens.cli.cli, ["gate", "--config", str(bad), "--check"])
        assert result.exit_code == 1, result.output
        assert f"setting {setting}:" in result.output and len(result.output.strip().splitlines()) == 1


#: Each passed --check and then failed once the gate ran (issue #17): --check must refuse it, in one
#: line naming the setting and what is wrong.
@pytest.mark.parametrize(("argv", "setting"), [
    (["--floors", "batch=1,batch=9,interactive=3"], "gate.floors"),
    (["--upstream", "tiny=http://127.0.0.1:99999"], "gate.upstreams"),
    (["--otlp-endpoint", "not a url at all"], "--otlp-endpoint"),
    (["--control-period-s", "1e-320"], "gate.control_period_s"),  # then every lent-while-returning request 500ed
])
def test_check_refuses_gate_values_that_would_fail_once_running(argv: list[str], setting: str) -> None:
    base = [] if argv[0] == "--upstream" else ["--upstream", "http://127.0.0.1:9"]
    result = CliRunner().invoke(restorelens.cli.cli, ["gate", *base, *argv, "--check"])
    assert result.exit_code == 1, result.output
    assert f"setting {setting}: " in result.output and len(result.output.strip().splitlines()) == 1


CLAIMS_THAT_FAIL_ONCE_RUNNING = [
    ('command = ["vllm", "serve", "{{model", "--port", "{{port}}"]', "modelclaim.claims[0].command[2]",
     "not a valid template"),
    ('command = ["vllm", "serve", "{{model}}", "--port", "{{prot}}"]', "modelclaim.claims[0].command[4]",
     "unknown placeholder {prot}"),
    ('engine_url = "not a url at all"', "modelclaim.claims[0].engine_url", "not an http(s) URL"),
    ("simulated = {{ cold_start_s = 1 }}", "modelclaim.claims[0].simulated", "only for virtual-time experiments"),
]


@pytest.mark.parametrize(("backend", "setting", "problem"), CLAIMS_THAT_FAIL_ONCE_RUNNING)
def test_check_refuses_a_claim_that_would_fail_once_running(tmp_path, backend: str, setting: str, problem: str) -> None:
    config = tmp_path / "gate.toml"
    config.write_text(MODELCLAIM.replace('command = ["/nonexistent/engine", "--port", "{{port}}"]', backend).format(extra=""))
    result = CliRunner().invoke(restorelens.cli.cli, ["gate", "--config", str(config), "--check"])
    assert result.exit_code == 1, result.output
    assert f"setting {setting}: " in result.output and problem in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_check_refuses_a_fifo_at_the_calibration_path_in_one_line_without_hanging(tmp_path) -> None:
    path = tmp_path / "wakes.json"
    os.mkfifo(path)
    config = tmp_path / "gate.toml"
    config.write_text(MODELCLAIM.format(extra=f'calibration_path = "{path}"'))
    # The guard: a child process, killed (and the test failed) if it blocks on the FIFO, as --check did.
    done = subprocess.run([sys.executable, "-m", "restorelens", "gate", "--config", str(config), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == (f"Error: setting modelclaim.calibration_path {path}: is a FIFO, not a regular "
                                   "file: give the path of a calibration file")
    assert stat.S_ISFIFO(os.stat(path).st_mode)  # left as it was


def test_check_refuses_retry_after_that_is_not_whole_seconds(tmp_path) -> None:
    config = tmp_path / "gate.toml"
    config.write_text(MODELCLAIM.format(extra="retry_after = { not_ready_s = 2.7 }"))
    result = CliRunner().invoke(restorelens.cli.cli, ["gate", "--config", str(config), "--check"])
    assert result.exit_code == 1, result.output
    assert "setting modelclaim.retry_after.not_ready_s: must be a whole number of seconds" in result.output


def test_a_busy_port_is_one_line_naming_port() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(restorelens.cli.cli, ["gate", "--upstream", "http://x", "--no-tracing", "--port", str(port)])
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: setting --port: cannot listen on 127.0.0.1:{port}")
    assert len(result.output.strip().splitlines()) == 1  # no "listening" banner before it


def test_a_bad_host_is_one_line_naming_host() -> None:
    result = CliRunner().invoke(restorelens.cli.cli, ["gate", "--upstream", "http://x", "--no-tracing", "--host", "999.1.1.1"])
    assert result.exit_code == 1, result.output
    assert "setting --host:" in result.output and len(result.output.strip().splitlines()) == 1


def test_port_zero_prints_the_port_the_gate_really_listens_on() -> None:
    # A real process: the banner and uvicorn's serving loop are what is under test.
    argv = [sys.executable, "-m", "restorelens", "gate", "--upstream", "http://127.0.0.1:9", "--port", "0", "--no-tracing"]
    with subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True) as proc:
        try:
            ready, _, _ = select.select([proc.stderr], [], [], 120)
            assert ready, "no banner from the gate"
            banner = proc.stderr.readline()
            match = re.search(r"on http://127\.0\.0\.1:(\d+)$", banner.strip())
            assert match and int(match.group(1)) != 0, banner
            answer = httpx.get(f"http://127.0.0.1:{match.group(1)}/health", timeout=30)
            assert answer.json()["status"] == "ok"
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_the_setting_flags_are_the_declared_ones_in_declaration_order() -> None:
    options = [p for p in restorelens.gate.cli.gate.params if isinstance(p, click.Option)]
    by_flag = {o.opts[0]: o for o in options}
    flagged = [s for s in SETTINGS if s.flag is not None]
    for each in flagged:
        assert by_flag[each.flag].name == each.name and by_flag[each.flag].help == each.help
        assert by_flag[each.flag].default is None  # unset flags leave the setting to the environment and TOML
    assert [o.opts[0] for o in options if o.name in {s.name for s in flagged}] == [s.flag for s in flagged]
    assert by_flag["--wait-timeout"].hidden and by_flag["--wait-timeout"].type == by_flag["--wait-timeout-s"].type


#: A value for each setting flag other than the default, and the value --check then shows.
FLAG_VALUES = {
    "--upstream": (["m=http://127.0.0.1:9"], {"m": ["http://127.0.0.1:9"]}),
    "--policy": (["priority"], "priority"),
    "--floors": (["interactive=4,batch=2"], {"interactive": 4, "batch": 2}),
    "--lendable": (["1"], 1),
    "--capacity": (["3"], 3),
    "--default-class": (["batch"], "batch"),
    "--wait-timeout-s": (["2.5"], 2.5),
    "--control-period-s": (["0.25"], 0.25),
    "--restore-budget-s": (["2.5"], 2.5),
    "--kv-blocks": (["320"], 320),
    "--extra-slots": (["2"], 2),
    "--host": (["0.0.0.0"], "0.0.0.0"),
    "--port": (["0"], 0),
    "--no-tracing": ([], False),
}


def test_every_setting_flag_reaches_the_settings() -> None:
    assert set(FLAG_VALUES) == {s.flag for s in SETTINGS if s.flag is not None}
    argv = [word for flag, (values, _) in FLAG_VALUES.items() for word in (flag, *values)]
    result = CliRunner().invoke(restorelens.cli.cli, ["gate", *argv, "--check"], env={"RESTORELENS_GATE_PORT": "9"})
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    for each in SETTINGS:
        if each.flag is not None:
            assert shown[each.name] == FLAG_VALUES[each.flag][1], each.flag
