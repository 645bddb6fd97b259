"""Errors that reach users. Each carries a one-line message; the CLI prints it without a traceback.

Exception tree::

    RestorelensError          exit code 1
    ├── SettingError          a setting (flag, env variable, TOML key) is invalid; names it
    └── InputError            an input file or value is malformed; names file:line when known
        └── MissingInput      exit code 2: what a command must read does not exist (a usage error)
"""

from __future__ import annotations

__all__ = ["InputError", "MissingInput", "RestorelensError", "SettingError", "first_line"]


class RestorelensError(Exception):
    """An error with a message meant for the user."""

    exit_code = 1


class SettingError(RestorelensError):
    """A setting has an invalid value. The message names the setting."""

    def __init__(self, setting: str, problem: str) -> None:
        self.setting = setting
        self.problem = problem
        super().__init__(f"setting {setting}: {problem}")


class InputError(RestorelensError):
    """An input is malformed. The message names where (``file:line``) when known."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}" if where else problem)


class MissingInput(InputError):
    """What a command must read (a span store, a chDB folder) does not exist: the command line
    names the wrong place, a usage error, so it exits 2 as click's own usage errors do, from every
    command (a script tells it from a store that was read and found wanting)."""

    exit_code = 2


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (a library's often runs to a page), else its type."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
