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
from urllib.parse import urlsplit

from restorelens.errors import InputError, SettingError

__all__ = ["DEFAULT_DRAIN_TIMEOUT_S", "DEFAULT_HEAD_TIMEOUT_S", "ENV_PREFIX", "env_name", "from_env", "http_url_problem",
           "read_toml", "require_keys"]

ENV_PREFIX = "RESTORELENS_"

# The defaults of the settings every server shares (restorelens/serving.py), here so that the
# gate's and the collector's settings name them without importing the server.
#: From a connection's opening, or a head's first byte, to the head's end. A real client sends its
#: head in one write, within a round trip; uvicorn closes an idle keep-alive connection after 5 s.
DEFAULT_HEAD_TIMEOUT_S = 5.0
#: Kubernetes sends SIGKILL 30 s after SIGTERM by default: 25 s of draining leave the rest for
#: the app's own shutdown and the last spans' export.
DEFAULT_DRAIN_TIMEOUT_S = 25.0

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


#: What a host name may hold (RFC 3986 reg-name without percent-encoding; letters may be non-ASCII,
#: which the HTTP client encodes with IDNA).
_HOST_PUNCTUATION = frozenset("-._~")


def http_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be the base URL of an HTTP service, or None when it can.

    It needs an http or https scheme, a host and, when given, a port in 1-65535. A query, a fragment
    or credentials are refused: paths are appended to a base URL, and the gate forwards requests
    without a URL's credentials. Checked when the settings load, so that a typo is found then, not at
    the first connection (or, for an engine the lifecycle waits for, at the end of its start timeout).
    """
    if url != url.strip():
        return f"{url!r} has spaces around it"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port out of range, not a number, or a bracketed host that is no IPv6 address
        return f"{url!r} is not a URL with a host and a port in 1-65535"
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        return f"{url!r} is not an http(s) URL (e.g. http://127.0.0.1:8000)"
    host = parts.hostname or ""
    if not host:
        return f"{url!r} has no host"
    if "[" not in parts.netloc and not all(c.isalnum() or c in _HOST_PUNCTUATION for c in host):
        return f"{url!r}: {host!r} is not a host name"
    if port == 0:
        return f"{url!r}: port 0 cannot be connected to (give 1-65535, or none for the scheme's default)"
    if parts.username is not None:
        return f"{url!r} holds credentials, which the gate does not forward"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return f"{url!r} has a query or fragment; give the base URL only (paths are appended to it)"
    return None
