"""Frames from ClickHouse as DuckDB gives them: each query's columns and types learnt from an empty
in-memory DuckDB store, so both engines hand back the same frame types."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import polars as pl

from restorelens.analysis.views import Analysis
from restorelens.store import create_schema

__all__ = ["as_duckdb_gives", "duckdb_schema"]

_EMPTY_STORE: list[Any] = []


def duckdb_schema(sql: str, parameters: Mapping[str, Any]) -> pl.Schema:
    """The columns and types DuckDB gives ``sql``: run on an empty in-memory store (cached per query
    text), so both engines hand back the same frame types (ClickHouse's flags are UInt8, its
    instants carry UTC, its counts are unsigned)."""
    return _schema_of(sql, tuple(sorted((name, repr(value)) for name, value in parameters.items())))


@cache
def _schema_of(sql: str, parameters: tuple[tuple[str, str], ...]) -> pl.Schema:
    import ast

    import duckdb

    if not _EMPTY_STORE:
        con = duckdb.connect()
        create_schema(con)
        _EMPTY_STORE.append(Analysis(con))
    values = {name: ast.literal_eval(text) for name, text in parameters}
    return _EMPTY_STORE[0]._frame(f"select * from ({sql}) limit 0", values or None).schema


def as_duckdb_gives(frame: pl.DataFrame, sql: str, parameters: Mapping[str, Any]) -> pl.DataFrame:
    schema = duckdb_schema(sql, parameters)
    if list(schema) != frame.columns:
        return frame
    columns = []
    for name, dtype in schema.items():
        column = frame[name]
        if isinstance(dtype, pl.Datetime) and isinstance(column.dtype, pl.Datetime) and column.dtype.time_zone:
            column = column.dt.replace_time_zone(None)
        if column.dtype != dtype:
            try:
                column = column.cast(dtype, strict=False)
            except pl.exceptions.InvalidOperationError:
                pass  # an internal integer key (UInt128 arrives as bytes): no page reads it as a number
        columns.append(column)
    return pl.DataFrame(columns)

