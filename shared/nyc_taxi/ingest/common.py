"""Small helpers the ingestion steps share."""

from __future__ import annotations

import datetime as dt


def month_bounds(year: int, month: int) -> tuple[dt.date, dt.date]:
    start = dt.date(year, month, 1)
    return start, dt.date(year + month // 12, month % 12 + 1, 1)


def current_snapshot_id(spark, spark_table_name: str) -> int | None:
    """The snapshot the table's main branch points at now (None for a table never written)."""
    row = spark.sql(f"SELECT snapshot_id FROM {spark_table_name}.refs WHERE name = 'main'").first()
    return row[0] if row else None


def day_ranges_predicate(column: str, days: list[dt.date]) -> str:
    """``column`` within any of ``days``, as timestamp ranges Iceberg can prune partitions with."""
    if not days:
        return "FALSE"
    ranges, start, end = [], None, None
    for day in sorted(set(days)):
        if start is not None and day == end + dt.timedelta(days=1):
            end = day
            continue
        if start is not None:
            ranges.append((start, end))
        start = end = day
    ranges.append((start, end))
    return "(" + " OR ".join(
        f"({column} >= TIMESTAMP_NTZ'{a} 00:00:00' AND {column} < TIMESTAMP_NTZ'{b + dt.timedelta(days=1)} 00:00:00')"
        for a, b in ranges) + ")"


def merge_changes(spark, changes_sql: str, merge_sql: str, **values: object) -> int:
    """Compute the rows that would change, and MERGE them only if there are any (one attempt).

    A re-run of unchanged data then commits nothing: no snapshot, no rewritten data files.
    Returns the number of rows upserted.
    """
    from nyc_taxi import sql

    changes = sql.run(spark, changes_sql, **values).persist()
    try:
        changed = changes.count()
        if changed:
            view = f"{changes_sql}_batch"
            changes.createOrReplaceTempView(view)
            sql.run(spark, merge_sql, changes=view, **values)
        return changed
    finally:
        changes.unpersist()


def upsert_changes(spark, changes_sql: str, merge_sql: str, **values: object) -> int:
    """merge_changes, recomputed and run again when it loses a race with another writer."""
    from nyc_taxi.commits import retry_on_conflict

    return retry_on_conflict(f"MERGE into {values['raw']}",
                             lambda: merge_changes(spark, changes_sql, merge_sql, **values))
