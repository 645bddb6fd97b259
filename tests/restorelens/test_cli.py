from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from restorelens import __version__
from restorelens.cli import cli


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"restorelens, version {__version__}"


def test_help_explains_the_tool() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0, result.output
    assert "capacity restored" in result.output
    assert "--version" in result.output


def test_unknown_command_is_a_one_line_usage_error() -> None:
    result = CliRunner().invoke(cli, ["no-such-command"])
    assert result.exit_code == 2
    assert "No such command 'no-such-command'" in result.output
    assert "Traceback" not in result.output


def test_installed_console_script_runs() -> None:
    script = Path(sys.executable).with_name("restorelens")
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert __version__ in proc.stdout
