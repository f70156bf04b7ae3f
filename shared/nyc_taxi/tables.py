"""Iceberg DDL generated from the registry (never retyped) and run through Spark SQL."""

from __future__ import annotations

from nyc_taxi.registry import TABLES, Table
from nyc_taxi.settings import Settings, get_settings

# Format v2: row-level MERGE/DELETE. Copy-on-write keeps readers (pyiceberg, DuckDB) simple.
DEFAULT_PROPERTIES = {
    "format-version": "2",
    "write.merge.mode": "copy-on-write",
    "write.update.mode": "copy-on-write",
    "write.delete.mode": "copy-on-write",
}


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def create_table_sql(table: Table, settings: Settings | None = None) -> str:
    settings = settings or get_settings()
    columns = ",\n  ".join(
        f"{c.name} {c.type}{'' if c.nullable else ' NOT NULL'} COMMENT {_sql_string(c.doc)}" for c in table.columns
    )
    properties = {**DEFAULT_PROPERTIES, **table.properties}
    if table.primary_key:
        # Recorded for readers; Iceberg does not enforce it (the MERGE keys do).
        properties["nyc_taxi.primary-key"] = ",".join(table.primary_key)
    sql = f"CREATE TABLE IF NOT EXISTS {table.spark_name(settings)} (\n  {columns}\n)\nUSING iceberg"
    if table.partitioned_by:
        sql += f"\nPARTITIONED BY ({', '.join(table.partitioned_by)})"
    sql += f"\nCOMMENT {_sql_string(table.description)}"
    sql += f"\nLOCATION {_sql_string(table.location(settings))}"
    sql += "\nTBLPROPERTIES (" + ", ".join(f"{_sql_string(k)}={_sql_string(v)}" for k, v in properties.items()) + ")"
    return sql


def ensure_namespace(spark, settings: Settings | None = None) -> None:
    settings = settings or get_settings()
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {settings.catalog_name}.{settings.database}")


def ensure_tables(spark, tables: list[Table] | None = None, settings: Settings | None = None) -> None:
    """Create the given registry tables (all by default) if they do not exist yet."""
    from nyc_taxi.commits import retry_on_conflict

    settings = settings or get_settings()

    def create() -> None:  # two writers starting at once may both find a table missing
        ensure_namespace(spark, settings)
        for table in tables or list(TABLES.values()):
            spark.sql(create_table_sql(table, settings))

    retry_on_conflict("creating the tables", create, creating=True)
