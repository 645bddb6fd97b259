"""``restorelens dashboard``: one-line errors before Streamlit starts, and the command it runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from restorelens.cli import cli
from restorelens.dashboard import cli as dashboard_cli
from restorelens.dashboard.source import DB_ENV, LIMITS_ENV, MAX_UPLOAD_ENV


def invoke(*args: str):
    return CliRunner().invoke(cli, ["dashboard", *args])


def test_a_missing_store_is_one_line(tmp_path: Path) -> None:
    result = invoke("--db", str(tmp_path / "absent.duckdb"))
    assert result.exit_code == 1
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

    from restorelens.dashboard.source import LABELS_ENV, configured_labels

    config = tmp_path / "restorelens.toml"
    config.write_text('[gate]\nport = 1\n\n[analysis.labels]\ntraffic_class = "app.class"\n'
                      'workload = "deployment.environment"\n')
    seen: dict = {}
    monkeypatch.setattr(os, "execve", lambda path, argv, env: seen.update(argv=argv, env=env))
    result = invoke("--db", str(store_path), "--config", str(config), "--label", "traffic_class=app.tier",
                    "--label", "run=app.run")
    assert result.exit_code == 0, result.output
    mapping = {"traffic_class": "app.tier", "workload": "deployment.environment", "run_id": "app.run"}
    assert json.loads(seen["env"][LABELS_ENV]) == mapping
    assert not any("app.tier" in arg for arg in seen["argv"])  # the environment, never the command line
    monkeypatch.setenv(LABELS_ENV, seen["env"][LABELS_ENV])
    assert configured_labels() == mapping  # what the app reads back


def test_without_a_mapping_an_inherited_one_does_not_reach_the_app(store_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from restorelens.dashboard.source import LABELS_ENV

    monkeypatch.setenv(LABELS_ENV, '{"traffic_class": "stale.attribute"}')
    seen: dict = {}
    monkeypatch.setattr(os, "execve", lambda path, argv, env: seen.update(env=env))
    assert invoke("--db", str(store_path)).exit_code == 0
    assert LABELS_ENV not in seen["env"]


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
    from restorelens.dashboard.source import LABELS_ENV, configured_labels
    from restorelens.errors import SettingError

    monkeypatch.setenv(LABELS_ENV, value)
    with pytest.raises(SettingError, match=LABELS_ENV) as raised:
        configured_labels()
    assert problem in str(raised.value) and "\n" not in str(raised.value)
