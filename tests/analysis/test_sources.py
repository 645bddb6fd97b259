"""``--source``: what it accepts and what it refuses, and the times ``--since``/``--until`` take."""

from __future__ import annotations

import pytest

from restorelens.sources import PASSWORD_ENV, Source, parse_source, parse_time
from restorelens.errors import SettingError


@pytest.mark.parametrize(("text", "expected"), [
    ("spans.duckdb", Source("duckdb", path="spans.duckdb")),
    ("duckdb:/data/spans.duckdb", Source("duckdb", path="/data/spans.duckdb")),
    ("chdb:/var/lib/spans", Source("chdb", path="/var/lib/spans")),
    ("clickhouse://reader@ch.internal:8123/otel", Source("clickhouse", host="ch.internal", port=8123, user="reader",
                                                        database="otel")),
    ("clickhouses://ch.internal/otel", Source("clickhouse", host="ch.internal", port=8443, user="default",
                                              database="otel", secure=True)),
    ("clickhouse://ch.internal", Source("clickhouse", host="ch.internal", database="default")),
])
def test_a_source_is_read_from_its_text(text: str, expected: Source) -> None:
    assert parse_source(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("", "is empty"),
    ("chdb:", "chdb: needs the data folder"),
    ("postgres://x/y", "unknown scheme postgres://"),
    ("clickhouse://reader:secret@ch/otel", PASSWORD_ENV),
    ("clickhouse:///otel", "needs a host"),
    ("clickhouse://ch/otel;drop", "not a plain ClickHouse name"),
    ("clickhouse://ch:99999/otel", "port"),
    ("clickhouse://u@[::1:1/db", "is not a URL"),  # an unbalanced "[": urlsplit's ValueError
    ("clickhouse://u@[not-an-address]:1/db", "is not a URL"),
])
def test_a_bad_source_is_one_line_naming_the_option(text: str, message: str) -> None:
    with pytest.raises(SettingError, match="--source") as raised:
        parse_source(text)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_source_names_itself_without_a_password() -> None:
    assert parse_source("clickhouse://reader@ch:9000/otel").describe() == "clickhouse://reader@ch:9000/otel"
    assert parse_source("chdb:/d").describe() == "chdb:/d"
    assert parse_source("clickhouse://reader@[::1]:9000/otel").describe() == "clickhouse://reader@[::1]:9000/otel"


def test_times_are_iso_8601_and_naive_ones_utc() -> None:
    assert parse_time("1970-01-01T00:00:01Z", "--since") == 1_000_000_000
    assert parse_time("1970-01-01T00:00:01", "--since") == 1_000_000_000
    assert parse_time("1970-01-01T01:00:01.5+01:00", "--until") == 1_500_000_000
    assert parse_time("1969-12-31T23:59:59.5Z", "--since") == -500_000_000  # exact before 1970 too
    assert parse_time("2026-12-02T10:00:00.123456Z", "--since") == 1_796_205_600_123_456_000
    with pytest.raises(SettingError, match="--since"):
        parse_time("yesterday", "--since")
    with pytest.raises(SettingError, match="--until.*1677 to 2262"):  # past what nanoseconds hold
        parse_time("2300-01-01", "--until")
