"""MERGEs that write only what changed: the rows that would change are computed first, and a batch
that changes nothing commits nothing (no snapshot, no rewritten data files)."""

from __future__ import annotations

from nyc_taxi.core.commits import retry_on_conflict
from nyc_taxi.core.sql import SqlFolder


def merge_changes(spark, sql: SqlFolder, changes_sql: str, merge_sql: str, **values: object) -> int:
    """Compute the rows that would change, and MERGE them only if there are any (one attempt).

    A re-run of unchanged data then commits nothing: no snapshot, no rewritten data files.
    Returns the number of rows upserted.
    """
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


def upsert_changes(spark, sql: SqlFolder, changes_sql: str, merge_sql: str, **values: object) -> int:
    """merge_changes, recomputed and run again when it loses a race with another writer."""
    return retry_on_conflict(
        f"MERGE into {values['raw']}", lambda: merge_changes(spark, sql, changes_sql, merge_sql, **values)
    )
