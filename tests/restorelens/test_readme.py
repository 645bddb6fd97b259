"""README.md opens with the two commands and carries a CLI reference equal to --help."""

from __future__ import annotations

from pathlib import Path

from restorelens.clidoc import END_MARKER, START_MARKER, cli_reference, replace_reference

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_opens_with_the_demo_and_test_commands() -> None:
    head = "\n".join(README.read_text(encoding="utf-8").splitlines()[:15])
    assert "make demo" in head and "make test" in head


def test_cli_reference_matches_help() -> None:
    text = README.read_text(encoding="utf-8")
    assert replace_reference(text) == text, "README's CLI reference is stale: python -m restorelens.clidoc --write README.md"


def test_reference_names_every_command() -> None:
    from click.testing import CliRunner

    from restorelens.cli import cli

    reference = cli_reference()
    listed = CliRunner().invoke(cli, ["--help"]).output.split("Commands:")[1].split()
    commands = [word for word in listed if word.isidentifier() and f"### `restorelens {word}`" in reference]
    assert len(commands) >= 10
    assert START_MARKER not in reference and END_MARKER not in reference
