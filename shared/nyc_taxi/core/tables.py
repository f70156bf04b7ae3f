"""Iceberg tables created from the registry (never retyped), through pyiceberg: no JVM needed.

Spark and pyiceberg share the catalog, so a table created here is the table Spark writes.
"""

from __future__ import annotations

import logging

from nyc_taxi.core.datasets import TABLES, Table
from nyc_taxi.core.naming import iceberg_identifier, spark_table, table_location
from nyc_taxi.core.settings import Settings, get_settings

# Format v2: row-level MERGE/DELETE. Copy-on-write keeps readers (pyiceberg, DuckDB) simple.
DEFAULT_PROPERTIES = {
    "format-version": "2",
    "write.merge.mode": "copy-on-write",
    "write.update.mode": "copy-on-write",
    "write.delete.mode": "copy-on-write",
    # What Iceberg's Java API sets on the tables it creates (since 1.4); a table created without it is
    # written with Parquet's old gzip default by Spark.
    "write.parquet.compression-codec": "zstd",
    # Parquet's 2 MB default lets a column of unique values (the trips' row keys) fill a dictionary with a
    # whole day's file before it falls back to plain encoding: hashing every key for nothing. At 64 KB
    # such a column falls back after ~1,700 values, while zones, vendors and fees keep their dictionaries
    # (a month staged by a warm JVM: 10 % less CPU, and 10 % smaller files; README, "Ingestion").
    "write.parquet.dict-size-bytes": str(64 * 1024),
}
# Chosen when a table is created, never changed by ensure_tables: raising it upgrades the table's format.
CREATE_ONLY_PROPERTIES = {"format-version"}
PRIMARY_KEY_PROPERTY = "nyc_taxi.primary-key"  # recorded for readers; Iceberg does not enforce it (the MERGE keys do)
# Partition transforms as Spark SQL writes them, and the partition field name Spark gives them.
TRANSFORMS = {
    "days": ("DayTransform", "day"),
    "months": ("MonthTransform", "month"),
    "years": ("YearTransform", "year"),
}

log = logging.getLogger(__name__)


def iceberg_type(spark_type: str):
    from pyiceberg import types

    return {
        "INT": types.IntegerType(),
        "BIGINT": types.LongType(),
        "DOUBLE": types.DoubleType(),
        "STRING": types.StringType(),
        "DATE": types.DateType(),
        "TIMESTAMP_NTZ": types.TimestampType(),
        "TIMESTAMP": types.TimestamptzType(),
    }[spark_type]


def iceberg_schema(table: Table):
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    return Schema(
        *(
            NestedField(field_id=i, name=c.name, field_type=iceberg_type(c.type), required=not c.nullable, doc=c.doc)
            for i, c in enumerate(table.columns, start=1)
        )
    )


def partition_spec(table: Table, schema):
    from pyiceberg import transforms
    from pyiceberg.partitioning import PartitionField, PartitionSpec

    fields = []
    for number, expression in enumerate(table.partitioned_by):
        function, column = expression.rstrip(")").split("(")
        transform, suffix = TRANSFORMS[function]
        fields.append(
            PartitionField(
                source_id=schema.find_field(column).field_id,
                field_id=1000 + number,
                transform=getattr(transforms, transform)(),
                name=f"{column}_{suffix}",
            )
        )
    return PartitionSpec(*fields)


def table_properties(table: Table) -> dict[str, str]:
    properties = {**DEFAULT_PROPERTIES, **table.properties, "comment": table.description}
    if table.primary_key:
        properties[PRIMARY_KEY_PROPERTY] = ",".join(table.primary_key)
    return properties


class KeyChanged(RuntimeError):
    """A table written under another key than the registry declares now."""


def _declare_properties(iceberg, table: Table) -> None:
    """Set the properties of an existing table that differ from what the registry declares for it
    (others, such as the counts a write recorded, are left as they are). A table written under another key
    is refused (KeyChanged): its rows were written by that key's rule, and no reader of the new key can
    tell which of them it would have kept (for the forecasts: under (zone, hour), a later origin replaced
    the hours an earlier one forecast, leaving parts of forecasts that look whole)."""
    held = iceberg.properties.get(PRIMARY_KEY_PROPERTY)
    if held is not None and held != ",".join(table.primary_key):
        raise KeyChanged(
            f"{table.name} was written under the key ({held.replace(',', ', ')}); the registry declares "
            f"({', '.join(table.primary_key)}) now, and its rows cannot be read as the new key's. Rebuild it: "
            f"`bash run destroy-infra --table {table.name}` (it asks first; its writers create it anew), then "
            "run again what wrote it (for forecasts: `bash run backtest`, or `bash run training-flow run …` per "
            "model and origin)."
        )
    declared = {k: v for k, v in table_properties(table).items() if k not in CREATE_ONLY_PROPERTIES}
    changed = {k: v for k, v in declared.items() if iceberg.properties.get(k) != v}
    if changed:
        with iceberg.transaction() as transaction:
            transaction.set_properties(changed)
        log.info("%s: %s set as the registry declares", table.name, ", ".join(sorted(changed)))


def _declare_columns(iceberg, table: Table) -> None:
    """Add the columns the registry declares that an existing table lacks (a column declared since it was
    created), optional: the rows written before hold NULL there. Nothing is retyped or dropped."""
    have = {f.name for f in iceberg.schema().fields}
    missing = [c for c in table.columns if c.name not in have]
    if not missing:
        return
    with iceberg.update_schema() as update:
        for column in missing:
            update.add_column(column.name, iceberg_type(column.type), doc=column.doc)
    log.info("%s: %s added as the registry declares", table.name, ", ".join(c.name for c in missing))


def drop_table(table: Table, settings: Settings | None = None) -> bool:
    """Drop a registry table and delete its files (metadata, manifests, data); False when there is none."""
    from pyiceberg.exceptions import NoSuchTableError

    from nyc_taxi.core.catalog import load_catalog

    try:
        load_catalog(settings or get_settings()).purge_table(iceberg_identifier(table, settings or get_settings()))
    except NoSuchTableError:
        return False
    return True


def set_property(table: Table, key: str, value: str, settings: Settings | None = None) -> None:
    """One table property, in a metadata-only commit (no snapshot) through pyiceberg; made again on the
    table's new state when another writer committed first."""
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.core.commits import retry_on_conflict

    def commit() -> None:
        with load_table(table, settings).transaction() as transaction:
            transaction.set_properties({key: value})

    retry_on_conflict(f"setting {key} on {table.name}", commit)


def pinned(table: Table, snapshot, settings: Settings | None = None) -> str:
    """The table for Spark SQL, read at ``snapshot`` (a pyiceberg snapshot or id): a run reads exactly
    the version its lineage reports, whatever another writer commits meanwhile."""
    name = spark_table(table, settings)
    snapshot_id = getattr(snapshot, "snapshot_id", snapshot)
    return f"{name} VERSION AS OF {snapshot_id}" if snapshot_id is not None else name


def pinned_rows(spark, table: Table, snapshot, settings: Settings | None = None):
    """The table's rows at ``snapshot`` as a Spark DataFrame."""
    return spark.sql(f"SELECT * FROM {pinned(table, snapshot, settings)}")


def ensure_tables(tables: list[Table] | None = None, settings: Settings | None = None) -> list[str]:
    """Create the given registry tables (all by default) and their namespace if they do not exist yet,
    and give a table that exists the properties the registry declares for it now (a write setting or a
    description changed since it was created: a metadata commit, no new snapshot); the names of the
    tables it created."""
    from pyiceberg.exceptions import NoSuchTableError

    from nyc_taxi.core.catalog import load_catalog
    from nyc_taxi.core.commits import retry_on_conflict

    settings = settings or get_settings()

    def create() -> list[str]:  # two writers starting at once may both find a table missing
        catalog = load_catalog(settings)
        catalog.create_namespace_if_not_exists(settings.database)
        created = []
        for table in tables or list(TABLES.values()):
            identifier = iceberg_identifier(table, settings)
            try:
                existing = catalog.load_table(identifier)
            except NoSuchTableError:
                existing = None
            if existing is not None:
                _declare_properties(existing, table)
                _declare_columns(existing, table)
                continue
            schema = iceberg_schema(table)
            catalog.create_table(
                identifier,
                schema,
                location=table_location(table, settings),
                partition_spec=partition_spec(table, schema),
                properties=table_properties(table),
            )
            created.append(table.name)
        return created

    return retry_on_conflict("creating the tables", create, creating=True)
