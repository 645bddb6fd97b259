"""Where spans live besides a DuckDB store: the ``--source`` text every command reads (a
ClickHouse server, read through clickhouse-connect, or chDB, the embedded engine), and times.

- ``PATH`` (or ``duckdb:PATH``): a DuckDB store, the embedded default;
- ``chdb:PATH``: a chDB data folder holding ``otel_traces`` in the OpenTelemetry Collector
  ClickHouse exporter's schema;
- ``clickhouse://USER@HOST:PORT/DATABASE`` (``clickhouses://`` for TLS): a ClickHouse server's
  HTTP interface; the password comes from ``RESTORELENS_CLICKHOUSE_PASSWORD`` (never from the
  URL, which ends up in shell histories and process lists).

Shared by the collector (``restorelens export --to``) and the analysis (``--source``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from urllib.parse import unquote, urlsplit

from restorelens.errors import SettingError

__all__ = ["PASSWORD_ENV", "Source", "parse_source", "parse_time", "password"]

#: Where a ClickHouse source's password comes from.
PASSWORD_ENV = "RESTORELENS_CLICKHOUSE_PASSWORD"
_SCHEMES = ("clickhouse", "clickhouses")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: What a signed 64-bit count of nanoseconds holds: DuckDB's and ClickHouse's instants both are one.
_MIN_NS, _MAX_NS = -(2**63), 2**63 - 1
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


@dataclass(frozen=True)
class Source:
    """A parsed ``--source``: ``kind`` is ``duckdb``, ``chdb`` or ``clickhouse``."""

    kind: str
    path: str = ""
    host: str = ""
    port: int = 8123
    user: str = "default"
    database: str = "default"
    secure: bool = False

    def describe(self) -> str:
        if self.kind == "clickhouse":
            scheme = "clickhouses" if self.secure else "clickhouse"
            host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address, as a URL holds it
            return f"{scheme}://{self.user}@{host}:{self.port}/{self.database}"
        return self.path if self.kind == "duckdb" else f"chdb:{self.path}"


def parse_source(text: str, setting: str = "--source") -> Source:
    """``--source`` text -> ``Source``; anything else is a one-line ``SettingError`` naming ``setting``."""
    text = text.strip()
    if not text:
        raise SettingError(setting, "is empty: give a DuckDB path, chdb:PATH or clickhouse://USER@HOST:PORT/DB")
    if text.startswith("chdb:"):
        path = text[len("chdb:"):]
        if not path:
            raise SettingError(setting, "chdb: needs the data folder, e.g. chdb:/var/lib/spans")
        return Source("chdb", path=path)
    if text.startswith("duckdb:"):
        return Source("duckdb", path=text[len("duckdb:"):])
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if not scheme:
        return Source("duckdb", path=text)
    if scheme not in _SCHEMES:
        raise SettingError(setting, f"unknown scheme {scheme}://; use a DuckDB path, chdb:PATH or clickhouse://")
    try:
        # urlsplit refuses an unbalanced "[" (or a bracketed host that is not an IPv6 address)
        parts = urlsplit(text)
        host = parts.hostname
    except ValueError as exc:
        raise SettingError(setting, f"is not a URL ({exc}): clickhouse://USER@HOST:PORT/DATABASE, "
                                    "an IPv6 host in brackets") from None
    if parts.password is not None:
        raise SettingError(setting, f"put no password in the URL: set {PASSWORD_ENV} instead")
    if not host:
        raise SettingError(setting, "needs a host: clickhouse://USER@HOST:PORT/DATABASE")
    database = unquote(parts.path.strip("/")) or "default"
    if not _NAME.match(database):
        raise SettingError(setting, f"database {database!r} is not a plain ClickHouse name")
    try:
        port = parts.port or (8443 if scheme == "clickhouses" else 8123)
    except ValueError:
        raise SettingError(setting, "the port is not a number from 1 to 65535") from None
    return Source("clickhouse", host=host, port=port, user=unquote(parts.username or "default"),
                  database=database, secure=scheme == "clickhouses")


def parse_time(text: str, setting: str) -> int:
    """An ISO 8601 instant (a naive one is UTC) -> epoch nanoseconds; else a ``SettingError``."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise SettingError(setting, f"{text!r} is not an ISO 8601 time, e.g. 2026-12-02T10:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    # exact integer arithmetic (a float timestamp rounds, and truncates the wrong way before 1970)
    nanoseconds = (moment - _EPOCH) // timedelta(microseconds=1) * 1_000
    if not _MIN_NS <= nanoseconds <= _MAX_NS:
        raise SettingError(setting, f"{text!r} is outside what nanoseconds since 1970 can hold (1677 to 2262)")
    return nanoseconds


def password() -> str:
    """A ClickHouse source's password (``PASSWORD_ENV``; empty: none)."""
    return os.environ.get(PASSWORD_ENV, "")
