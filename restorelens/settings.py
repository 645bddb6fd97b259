"""Settings from the environment and TOML files, cast explicitly, with errors that name the setting.

Precedence everywhere: command-line flag, then environment variable (``RESTORELENS_*``), then the
TOML file, then the default. Components build their own typed settings on these helpers.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from restorelens.errors import InputError, SettingError

__all__ = ["ENV_PREFIX", "env_name", "from_env", "read_toml", "require_keys"]

ENV_PREFIX = "RESTORELENS_"

T = TypeVar("T")


def env_name(setting: str) -> str:
    """``gate.port`` -> ``RESTORELENS_GATE_PORT``."""
    return ENV_PREFIX + setting.upper().replace(".", "_").replace("-", "_")


def from_env(setting: str, cast: Callable[[str], T], environ: Mapping[str, str] | None = None) -> T | None:
    """The setting's value from its environment variable, cast; None when unset."""
    environ = os.environ if environ is None else environ
    name = env_name(setting)
    raw = environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return cast(raw)
    except (TypeError, ValueError) as exc:
        raise SettingError(name, f"value {raw!r} is not a valid {getattr(cast, '__name__', 'value')} ({exc})") from None


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a TOML file; a missing or malformed file is an InputError naming it (and the line)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(str(p), f"cannot read: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(str(p), f"not UTF-8 text ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        where = f"{p}:{line}" if line else str(p)
        msg = getattr(exc, "msg", str(exc))
        raise InputError(where, f"invalid TOML: {msg}") from None


def require_keys(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    """Unknown keys are errors (a typo must not silently fall back to a default)."""
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise SettingError(f"{where}.{unknown[0]}", f"unknown setting; valid ones: {', '.join(sorted(allowed))}")
