"""The clients the ClickHouse analysis sends its queries through: chDB (the embedded engine on a
data folder) or a ClickHouse server's HTTP interface, both read only, both answering polars frames.
"""

from __future__ import annotations

import contextlib
import io
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from restorelens.analysis.clickhouse import dialect
from restorelens.errors import InputError, MissingInput, first_line
from restorelens.sources import Source, password

__all__ = ["SESSION_TIMEOUT_S", "Chdb", "Server", "connect", "error_code", "param_type"]

#: How long a server keeps an idle session (and its temporary tables), in seconds.
SESSION_TIMEOUT_S = 3600
_CODE = re.compile(r"Code: (\d+)")


def param_type(value: Any) -> str:
    if isinstance(value, bool):
        return "Bool"
    if isinstance(value, int):
        return "Int64"
    if isinstance(value, float):
        return "Float64"
    if isinstance(value, (list, tuple)):
        return "Array(String)"
    return "String"



_SETTINGS = ", ".join(f"{name} = {value}" for name, value in dialect.SETTINGS.items())


#: What chDB makes in the data folder it opens, whatever it is asked to do: its temporary files'
#: folder (clickhouse-local fixes it at ``PATH/tmp``, with no setting to move it) and the folder
#: of the temporary tables the analysis keeps. Removed at close when chDB made them (empty by then).
_CHDB_SCRATCH = ("tmp", "data/_temporary_and_external_tables")


class Chdb:
    """The embedded engine on a data folder, which reading leaves as it found it: chDB cannot open
    a folder without making ``_CHDB_SCRATCH`` (and its lock file ``status``, removed at shutdown),
    so ``close`` removes the folders it made once the engine is shut down."""

    def __init__(self, path: str) -> None:
        from chdb import session

        self.name = f"chdb:{path}"
        self._folder = Path(path)
        self._made = [name for name in _CHDB_SCRATCH if not (self._folder / name).exists()]
        self._session = session.Session(path)

    def frame(self, sql: str, parameters: Mapping[str, Any]) -> pl.DataFrame:
        import pyarrow as pa

        answer = self._session.query(f"{sql}\nsettings {_SETTINGS}", "ArrowStream",
                                     params=dialect.chdb_parameters(parameters) or None)
        return pl.from_arrow(pa.ipc.open_stream(io.BytesIO(answer.bytes())).read_all())  # type: ignore[return-value]

    def execute(self, sql: str, parameters: Mapping[str, Any]) -> None:
        self._session.query(f"{sql}\nsettings {_SETTINGS}", params=dialect.chdb_parameters(parameters) or None)

    def close(self) -> None:
        self._session.close()
        if (self._folder / "status").exists():
            return  # another session of this process still runs the engine on the folder
        for name in self._made:
            with contextlib.suppress(OSError):  # not empty, or gone: then it is not ours to remove
                (self._folder / name).rmdir()


class Server:
    """A ClickHouse server's HTTP interface (clickhouse-connect), read only."""

    def __init__(self, source: Source) -> None:
        import clickhouse_connect

        self.name = source.describe()
        # a session of its own, named here rather than left to the driver's global default, so
        # the kept layers' temporary tables are there for every later query of this analysis
        self._client = clickhouse_connect.get_client(
            host=source.host, port=source.port, username=source.user, password=password(),
            database=source.database, secure=source.secure, session_id=f"restorelens-{uuid.uuid4()}",
            settings={**dialect.SETTINGS, "readonly": 2, "session_timeout": SESSION_TIMEOUT_S},
        )

    def frame(self, sql: str, parameters: Mapping[str, Any]) -> pl.DataFrame:
        return pl.from_arrow(self._client.query_arrow(sql, parameters=dict(parameters)))  # type: ignore[return-value]

    def execute(self, sql: str, parameters: Mapping[str, Any]) -> None:
        self._client.command(sql, parameters=dict(parameters))

    def close(self) -> None:
        self._client.close()


def connect(source: Source) -> Any:
    """The client for a chdb or clickhouse ``source``; an unreachable one is a one-line ``InputError``."""
    if source.kind == "chdb" and not Path(source.path).is_dir():
        # chDB would make the folder: reading must not create anything
        raise MissingInput(source.describe(), "no such chDB data folder")
    try:
        return Chdb(source.path) if source.kind == "chdb" else Server(source)
    except ImportError as exc:
        raise InputError(source.describe(), f"needs the clickhouse extra (pip install 'restorelens[clickhouse]'): "
                                            f"{exc.name} is missing") from None
    except Exception as exc:  # the drivers raise their own types; the message names what failed
        raise InputError(source.describe(), f"cannot connect: {first_line(exc)}") from None



def error_code(exc: Exception) -> int | None:
    """The ClickHouse error code in a driver's exception (both put ``Code: N`` in the message)."""
    match = _CODE.search(str(exc))
    return int(match.group(1)) if match else None

