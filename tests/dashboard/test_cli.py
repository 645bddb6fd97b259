"""``restorelens dashboard``: one-line errors before Streamlit starts, and the command it runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from restorelens.cli import cli
from restorelens.dashboard import cli as dashboard_cli
from restorelens.dashboard.environment import DB_ENV, LABELS_ENV, LIMITS_ENV, MAX_UPLOAD_ENV, WINDOW_ENV


def invoke(*args: str):
    return CliRunner().invoke(cli, ["dashboard", *args])


def handed_over(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment the command hands Streamlit (os.execve would replace the
    test process: it is recorded instead; the browser test starts the real command)."""
    seen: dict = {}
    monkeypatch.setattr(os, "execve", lambda path, argv, env: seen.update(argv=argv, env=env))
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return seen["argv"], seen["env"]


def test_a_missing_store_is_one_line(tmp_path: Path) -> None:
    result = invoke("--db", str(tmp_path / "absent.duckdb"))
    assert result.exit_code == 2  # a usage error, as from every command
    assert result.output.strip().splitlines() == [f"Error: {tmp_path / 'absent.duckdb'}: no such span store "
                                                  "(run `restorelens collect` or `restorelens load` first)"]


def test_a_file_that_is_not_duckdb_is_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.duckdb"
    bogus.write_text("hello\n")
    result = invoke("--db", str(bogus))
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1 and "not a valid DuckDB database" in result.output


def test_a_duckdb_file_without_spans_is_one_line(tmp_path: Path) -> None:
    import duckdb

    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).close()
    result = invoke("--db", str(other))
    assert result.exit_code == 1
    assert "not a restorelens span store (no otel_traces table)" in result.output


def test_a_bad_limit_names_the_option(store_path: Path) -> None:
    result = invoke("--db", str(store_path), "--max", "overshoot_s.p42=1")
    assert result.exit_code == 1
    assert "setting --max" in result.output and "p42" in result.output


def test_a_valid_store_hands_over_to_streamlit_on_loopback(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # os.execve would replace the test process; record what it would run instead (the browser test
    # starts the real command).
    seen: dict = {}
    monkeypatch.setattr(os, "execve", lambda path, argv, env: seen.update(path=path, argv=argv, env=env))
    result = invoke("--db", str(store_path), "--port", "8765", "--max", "wake.overshoot_s.p95=2")
    assert result.exit_code == 0, result.output
    argv = seen["argv"]
    assert argv[1:4] == ["-m", "streamlit", "run"] and argv[4].endswith("dashboard/pages/app.py")
    assert argv[argv.index("--server.address") + 1] == "127.0.0.1"
    assert argv[argv.index("--server.port") + 1] == "8765"
    assert argv[argv.index("--browser.gatherUsageStats") + 1] == "false"
    assert seen["env"][DB_ENV] == str(store_path.resolve())
    assert seen["env"][LIMITS_ENV] == "wake.overshoot_s.p95=2"
    assert seen["env"][MAX_UPLOAD_ENV] == str(256 * 1024 * 1024)
    assert argv[argv.index("--server.maxUploadSize") + 1] == "256"
    assert "http://127.0.0.1:8765" in result.output


def test_the_upload_limit_reaches_the_app_and_streamlit(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict = {}
    monkeypatch.setattr(os, "execve", lambda path, argv, env: seen.update(argv=argv, env=env))
    result = invoke("--db", str(store_path), "--max-upload-bytes", str(10 * 1024 * 1024 + 1))
    assert result.exit_code == 0, result.output
    assert seen["env"][MAX_UPLOAD_ENV] == "10485761"
    assert seen["argv"][seen["argv"].index("--server.maxUploadSize") + 1] == "11"  # whole MiB, rounded up
    result = invoke("--db", str(store_path), "--max-upload-bytes", "0")
    assert result.exit_code == 2 and "--max-upload-bytes" in result.output


def test_the_packaged_app_exists() -> None:
    app = Path(dashboard_cli.streamlit_command("127.0.0.1", 1)[4])
    assert app.is_file() and (app.parent / "overview.py").is_file()
    # a pages/ folder beside the entrypoint would switch Streamlit to its legacy multipage mode
    assert not (app.parent / "pages").exists()


def test_the_label_mapping_reaches_the_app_as_data_the_flag_winning_over_the_file(
        store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from restorelens.dashboard.environment import LABELS_ENV, configured_labels

    config = tmp_path / "restorelens.toml"
    config.write_text('[gate]\nport = 1\n\n[analysis.labels]\ntraffic_class = "app.class"\n'
                      'workload = "deployment.environment"\n')
    argv, env = handed_over(monkeypatch, "--db", str(store_path), "--config", str(config),
                            "--label", "traffic_class=app.tier", "--label", "run=app.run")
    mapping = {"traffic_class": "app.tier", "workload": "deployment.environment", "run_id": "app.run"}
    assert json.loads(env[LABELS_ENV]) == mapping
    assert not any("app.tier" in arg for arg in argv)  # the environment, never the command line
    monkeypatch.setenv(LABELS_ENV, env[LABELS_ENV])
    assert configured_labels() == mapping  # what the app reads back


@pytest.mark.parametrize(("name", "inherited"), [
    (LABELS_ENV, '{"traffic_class": "stale.attribute"}'),
    (WINDOW_ENV, '{"runs": ["stale-run"]}'),
])
def test_without_a_mapping_or_window_an_inherited_one_does_not_reach_the_app(
        store_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, inherited: str) -> None:
    monkeypatch.setenv(name, inherited)
    _, env = handed_over(monkeypatch, "--db", str(store_path))
    assert name not in env


@pytest.mark.parametrize(("args", "problem"), [
    (["--label", "tier=app.tier"], "setting --label: unknown label 'tier'"),
    (["--label", "traffic_class"], "setting --label: 'traffic_class' is not LABEL=ATTRIBUTE"),
    (["--label", "traffic_class=" + "x" * 257], "longer than 256 characters"),
])
def test_a_bad_label_is_one_line_before_streamlit_starts(store_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         args: list[str], problem: str) -> None:
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("Streamlit started"))
    result = invoke("--db", str(store_path), *args)
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: ") and problem in line


def test_a_bad_config_file_is_one_line_naming_it(store_path: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("Streamlit started"))
    config = tmp_path / "bad.toml"
    config.write_text("[analysis.labels]\ntraffic_class = 3\n")
    result = invoke("--db", str(store_path), "--config", str(config))
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert str(config) in line and "analysis.labels.traffic_class" in line
    result = invoke("--db", str(store_path), "--config", str(tmp_path / "absent.toml"))
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(("value", "problem"), [
    ("not json", "not a JSON object"),
    ('["traffic_class", "app.tier"]', "not a JSON object"),
    ('{"traffic_class": {"nested": "x"}}', "not a JSON object"),
    ("[" * 10_000, "not a JSON object"),
    ('{"traffic_class": "' + "x" * 20_000 + '"}', "longer than 16384 characters"),
    ('{"tier": "app.tier"}', "unknown label 'tier'"),
])
def test_the_app_checks_the_mapping_it_is_handed(monkeypatch: pytest.MonkeyPatch, value: str, problem: str) -> None:
    from restorelens.dashboard.environment import LABELS_ENV, configured_labels
    from restorelens.errors import SettingError

    monkeypatch.setenv(LABELS_ENV, value)
    with pytest.raises(SettingError, match=LABELS_ENV) as raised:
        configured_labels()
    assert problem in str(raised.value) and "\n" not in str(raised.value)


# --- the window (--since, --until, --run) -----------------------------------------------------


def test_the_window_options_are_report_and_checks_own() -> None:
    from restorelens.analysis.cli import check, report

    def options(command) -> dict:
        return {p.name: (p.opts, p.help, p.metavar, p.multiple) for p in command.params
                if p.name in ("since", "until", "runs")}

    assert len(options(dashboard_cli.dashboard)) == 3
    assert options(dashboard_cli.dashboard) == options(report) == options(check)


def test_the_window_reaches_the_app_as_data(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from restorelens.analysis.window import Window
    from restorelens.dashboard.environment import WINDOW_ENV, configured_window

    argv, env = handed_over(monkeypatch, "--db", str(store_path), "--since", "2026-01-01T00:00:00Z",
                            "--until", "2026-01-01T02:00:00+01:00", "--run", "lend-1", "--run", "it's; drop")
    window = Window(since_ns=1_767_225_600 * 10**9, until_ns=1_767_229_200 * 10**9, runs=("lend-1", "it's; drop"))
    assert json.loads(env[WINDOW_ENV]) == {"since_ns": window.since_ns, "until_ns": window.until_ns,
                                           "runs": list(window.runs)}
    assert not any("lend-1" in arg for arg in argv)  # the environment, never the command line
    monkeypatch.setenv(WINDOW_ENV, env[WINDOW_ENV])
    assert configured_window() == window  # what the app reads back


@pytest.mark.parametrize(("args", "problem"), [
    (["--since", "yesterday"], "setting --since: 'yesterday' is not an ISO 8601 time"),
    (["--since", ""], "setting --since: '' is not an ISO 8601 time"),
    (["--until", "2300-01-01"], "setting --until: '2300-01-01' is outside what nanoseconds since 1970 can hold"),
    (["--since", "2026-01-02", "--until", "2026-01-02T00:00:00Z"], "setting --until: must be after --since"),
    (["--run", "a", "--run", ""], "setting --run: needs a run id"),
    (["--run", "  "], "setting --run: needs a run id"),
    (["--run", "r" * 65_536], "setting --run: the run ids take more than 65536 characters together"),
    ([arg for i in range(2_000) for arg in ("--run", f"run-{i:040d}")],
     "setting --run: the run ids take more than 65536 characters together"),
])
def test_a_bad_window_is_one_line_before_streamlit_starts_as_in_report(
        store_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], problem: str) -> None:
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("Streamlit started"))
    result = invoke("--db", str(store_path), *args)
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"Error: {problem}")
    if "65536" not in problem:  # report reads any number of runs; the environment holds a bounded one
        report = CliRunner().invoke(cli, ["report", "--db", str(store_path), *args])
        assert report.output.strip() == line


@pytest.mark.parametrize(("value", "problem"), [
    ("not json", "not a JSON object"),
    ('["since_ns", 1]', "not a JSON object"),
    ('{"since": 1}', "not a JSON object"),
    ('{"runs": "lend-1"}', "not a JSON object"),
    ("[" * 10_000, "not a JSON object"),
    ('{"since_ns": 1.5}', "since_ns: is not a whole number of nanoseconds"),
    ('{"until_ns": true}', "until_ns: is not a whole number of nanoseconds"),
    ('{"since_ns": 9223372036854775808}', "since_ns: is not a whole number of nanoseconds since 1970"),
    ('{"runs": ["lend-1", ""]}', "runs: needs a run id"),
    ('{"runs": [["lend-1"]]}', "runs: needs a run id"),
    ('{"since_ns": 2, "until_ns": 1}', "until_ns: must be after RESTORELENS_DASHBOARD_WINDOW since_ns"),
    ('{"runs": ["' + "r" * 70_000 + '"]}', "longer than 65536 characters"),
])
def test_the_app_checks_the_window_it_is_handed(monkeypatch: pytest.MonkeyPatch, value: str, problem: str) -> None:
    from restorelens.dashboard.environment import WINDOW_ENV, configured_window
    from restorelens.errors import SettingError

    monkeypatch.setenv(WINDOW_ENV, value)
    with pytest.raises(SettingError, match=WINDOW_ENV) as raised:
        configured_window()
    assert problem in str(raised.value) and "\n" not in str(raised.value)


def test_an_empty_store_says_so_in_one_line_before_the_banner(empty_store_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    empty = empty_store_path
    monkeypatch.setattr(os, "execve", lambda path, argv, env: None)
    result = invoke("--db", str(empty))
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == (f"note: {empty.resolve()} holds no spans: every figure is empty (record some with "
                        "`restorelens collect` or `restorelens load`)")
    assert lines[1].startswith("restorelens dashboard: http://")


def test_a_store_with_spans_has_no_note(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "execve", lambda path, argv, env: None)
    result = invoke("--db", str(store_path))
    assert result.exit_code == 0 and "holds no spans" not in result.output


def test_a_busy_port_is_one_line_before_any_banner(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As from every other server: Streamlit's own "Port N is not available" came after the banner."""
    from restorelens.serving import bind_socket

    handed: list = []
    monkeypatch.setattr(os, "execve", lambda path, argv, env: handed.append(argv))
    with bind_socket("127.0.0.1", 0) as busy:
        port = busy.getsockname()[1]
        result = invoke("--db", str(store_path), "--port", str(port))
    assert (result.exit_code, result.output) == (
        1, f"Error: setting --port: cannot listen on 127.0.0.1:{port}: Address already in use\n")
    assert handed == []  # Streamlit never started


def test_streamlit_shows_no_developer_toolbar(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv, _ = handed_over(monkeypatch, "--db", str(store_path))
    assert argv[argv.index("--client.toolbarMode") + 1] == "viewer"  # no Deploy button, rerun or clear cache
