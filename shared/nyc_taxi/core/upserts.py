"""MERGEs that write only what changed: the rows that would change are computed first, and a batch
that changes nothing commits nothing (no snapshot, no rewritten data files).

A changes statement selects one row per change with a ``change`` column: ``added`` (the target lacks
the row), ``changed`` (the target holds it with other values) or ``removed`` (the target holds a row
the batch no longer has; only statements that replace a whole batch select these). Its MERGE applies
them; the counts of each kind are what the commit changed, for its snapshot summary and its lineage.
"""

from __future__ import annotations

from dataclasses import dataclass

from nyc_taxi.core.commits import retry_on_conflict
from nyc_taxi.core.snapshots import commit_properties
from nyc_taxi.core.sql import SqlFolder

KINDS = ("added", "changed", "removed")


@dataclass(frozen=True)
class RowChanges:
    """What one commit did to a table's rows, by the table's key."""

    added: int = 0
    changed: int = 0
    removed: int = 0

    @property
    def written(self) -> int:
        """Rows written: new and changed ones."""
        return self.added + self.changed

    @property
    def total(self) -> int:
        return self.added + self.changed + self.removed

    def as_summary(self) -> dict[str, str]:
        """As Iceberg snapshot-summary properties."""
        return {f"nyc-taxi.rows-{kind}": str(getattr(self, kind)) for kind in KINDS}

    @classmethod
    def from_summary(cls, summary) -> RowChanges | None:
        """The counts a snapshot's summary records (None: a commit that recorded none)."""
        if summary is None or summary.get("nyc-taxi.rows-added") is None:
            return None
        return cls(*(int(summary.get(f"nyc-taxi.rows-{kind}", 0)) for kind in KINDS))


def merge_changes(
    spark,
    sql: SqlFolder,
    changes_sql: str,
    merge_sql: str,
    summary: dict[str, str] | None = None,
    insert_sql: str | None = None,
    **values: object,
) -> RowChanges:
    """Compute the rows that would change, and MERGE them only if there are any (one attempt), with
    ``summary`` and the counts in the commit's snapshot summary.

    A re-run of unchanged data then commits nothing: no snapshot, no rewritten data files. A batch that
    only adds rows is written by ``insert_sql`` when there is one (an insert-only MERGE of the changes as
    its ``staging``): appended, nothing rewritten, and the target's rows only looked up, not joined for a
    rewrite.
    """
    changes = sql.run(spark, changes_sql, **values).persist()
    try:
        counted = {row["change"]: row["count"] for row in changes.groupBy("change").count().collect()}
        unknown = set(counted) - set(KINDS)
        if unknown:
            raise ValueError(f"{changes_sql}.sql selects changes of unknown kinds: {sorted(unknown)}")
        result = RowChanges(*(counted.get(kind, 0) for kind in KINDS))
        if result.total:
            view = f"{changes_sql}_batch"
            changes.createOrReplaceTempView(view)
            with commit_properties(spark, {**(summary or {}), **result.as_summary()}):
                if insert_sql and result.added == result.total:
                    sql.run(spark, insert_sql, **{**values, "staging": view})
                else:
                    sql.run(spark, merge_sql, changes=view, **values)
        return result
    finally:
        changes.unpersist()


def upsert_changes(
    spark, sql: SqlFolder, changes_sql: str, merge_sql: str, summary: dict[str, str] | None = None, **values: object
) -> RowChanges:
    """merge_changes, recomputed and run again when it loses a race with another writer."""
    return retry_on_conflict(
        f"MERGE into {values['raw']}", lambda: merge_changes(spark, sql, changes_sql, merge_sql, summary, **values)
    )
