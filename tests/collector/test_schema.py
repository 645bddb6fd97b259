import duckdb

from restorelens.collector.schema import COLUMNS, TABLE, create_schema


def test_schema_has_the_clickhouse_exporter_columns_in_order() -> None:
    con = duckdb.connect(":memory:")
    create_schema(con)
    create_schema(con)  # idempotent
    names = [row[0] for row in con.execute(f"describe {TABLE}").fetchall()]
    assert tuple(names) == COLUMNS
