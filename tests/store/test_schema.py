import duckdb

from restorelens.store import COLUMNS, TABLE, create_schema


def test_schema_has_the_clickhouse_exporter_columns_in_order() -> None:
    con = duckdb.connect(":memory:")
    create_schema(con)
    create_schema(con)  # idempotent
    names = [row[0] for row in con.execute(f"describe {TABLE}").fetchall()]
    assert tuple(names) == COLUMNS


def test_the_benchmarks_frozen_anchor_table_has_the_store_columns_and_the_key() -> None:
    import duckdb

    from benchmarks.bench_collector import _ANCHOR_DDL
    from restorelens.store import create_schema

    described = []
    for make in (lambda con: con.execute(_ANCHOR_DDL), create_schema):
        with duckdb.connect() as con:
            make(con)
            described.append(con.execute(
                "select column_name, data_type from duckdb_columns() where table_name = 'otel_traces' "
                "order by column_index").fetchall())
            key = con.execute("select constraint_column_names from duckdb_constraints() "
                              "where table_name = 'otel_traces' and constraint_type = 'PRIMARY KEY'").fetchall()
            assert key == [(["TraceId", "SpanId"],)]
    assert described[0] == described[1]
