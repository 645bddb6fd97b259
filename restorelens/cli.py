"""The ``restorelens`` command.

Subcommands live next to the code they drive: each component package may hold a ``cli.py`` whose
``COMMANDS`` list holds click commands (keep those modules light: import heavy libraries inside the
command). Commands are discovered when the group lists or resolves them, so ``--help`` stays fast.
Errors meant for users (``RestorelensError``) print as one line, never a traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from restorelens._version import __version__
from restorelens.errors import RestorelensError

__all__ = ["COMMAND_MODULES", "main"]

#: Every command, in help order, with the module that holds it. A module's ``COMMANDS`` list holds
#: its click commands; one module may hold several, and the help order follows the data flow, not
#: the modules.
COMMAND_MODULES = (
    ("demo", "restorelens.experiments.cli"),
    ("sim", "restorelens.sim.cli"),
    ("gate", "restorelens.gate.cli"),
    ("probe", "restorelens.experiments.probe_cli"),
    ("run", "restorelens.experiments.cli"),
    ("experiment", "restorelens.experiments.cli"),
    ("collect", "restorelens.collector.cli"),
    ("load", "restorelens.collector.cli"),
    ("export", "restorelens.collector.cli"),
    ("report", "restorelens.analysis.cli"),
    ("check", "restorelens.analysis.cli"),
    ("calibrate", "restorelens.experiments.calibrate"),
    ("dashboard", "restorelens.dashboard.cli"),
)


def _discover() -> dict[str, click.Command]:
    commands: dict[str, click.Command] = {}
    for name, module_name in COMMAND_MODULES:
        module = importlib.import_module(module_name)
        found = {command.name: command for command in getattr(module, "COMMANDS", ())}
        if name not in found:
            raise RuntimeError(f"{module_name} has no command {name!r}")  # a packaging error, not a user's
        commands[name] = found[name]
    return commands


class _Group(click.Group):
    _found: dict[str, click.Command] | None = None

    def _commands(self) -> dict[str, click.Command]:
        if self._found is None:
            self._found = _discover()
        return self._found

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self._commands())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._commands().get(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RestorelensError as exc:
            click.secho(f"Error: {exc}", err=True, fg="red")
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="restorelens")
def cli() -> None:
    """restorelens: what "capacity restored" really means for LLM serving.

    Instrument a gate, a retrying client and OpenAI-compatible engines (vLLM or the built-in
    simulator), record OpenTelemetry spans, load them into DuckDB and decompose every restoration
    (grant restored, borrowed work drained, engine scheduled; 503 + Retry-After, engine ready,
    readiness observed, retry) with SQL.
    """


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="restorelens")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
