"""What a commit says about itself: properties in its Iceberg snapshot summary, and reading them back.

The project's commits to raw tables record the source batch they hold (``nyc-taxi.month``, the landed
files' versions in ``nyc-taxi.landed-version``), the version they replaced and how many rows they
added, changed and removed, so a table's own history says which source version replaced which.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MONTH = "nyc-taxi.month"  # the period of the source a commit loaded, YYYY-MM
LANDED_VERSION = "nyc-taxi.landed-version"  # the landed files (name@sha256, ...) a commit holds the rows of
LANDED_ROWS = "nyc-taxi.landed-rows"  # a staging load: the rows its landed files hold (what its checks compare with)
REPLACED_VERSION = "nyc-taxi.replaced-version"  # the landed version whose rows it replaced
COMMITTED_BY = "nyc-taxi.committed-by"  # the task run that committed it (<dag>/<task>/<run>): stable across tries


def month_of(snapshot) -> str | None:
    """The month a commit loaded (a pyiceberg snapshot's summary); None for one that loaded none."""
    return snapshot.summary.get(MONTH) if snapshot.summary else None


@contextlib.contextmanager
def commit_properties(spark, properties: dict[str, str]) -> Iterator[None]:
    """``properties`` in the snapshot summary of every Iceberg commit Spark SQL makes in this thread
    meanwhile (a MERGE INTO).

    Iceberg's ``CommitMetadata.withCommitProperties(properties, callable, ...)`` does this around a Java
    Callable, which Python cannot hand the JVM without py4j's callback server (and a warm Spark server
    shares its gateway between processes). It keeps the properties in a thread-local that Iceberg's
    Spark writes read at commit; PySpark pins each Python thread to one JVM thread, so setting that
    thread-local here reaches the commit of the SQL statement this thread runs. Tested: a MERGE's
    snapshot carries them (``tests/test_lakehouse.py``), so an Iceberg upgrade that moves it fails loudly.
    """
    if not properties:
        yield
        return
    jvm = spark._jvm
    # from the loader that loaded the session's Iceberg catalog: the JVM's class path locally, the session's
    # jars on a cluster (where the JVM's own loader does not see them)
    loader = spark._jsparkSession.sessionState().catalogManager().currentCatalog().getClass().getClassLoader()
    metadata = jvm.java.lang.Class.forName("org.apache.iceberg.spark.CommitMetadata", True, loader)
    field = metadata.getDeclaredField("COMMIT_PROPERTIES")
    field.setAccessible(True)
    local = field.get(None)
    values = jvm.java.util.HashMap()
    for key, value in properties.items():
        values.put(key, value)
    local.set(values)
    try:
        yield
    finally:
        local.remove()


def ancestors(table) -> Iterator:
    """A pyiceberg table's current snapshot and its ancestors, newest first."""
    from pyiceberg.table.snapshots import ancestors_of

    return ancestors_of(table.current_snapshot(), table.metadata)


def month_commits(table, month: str, since=None) -> Iterator:
    """The snapshots that loaded ``month`` into a pyiceberg table, newest first; only those after snapshot
    ``since`` when it is given."""
    for snapshot in ancestors(table):
        if since is not None and snapshot.snapshot_id == since.snapshot_id:
            return
        if month_of(snapshot) == month:
            yield snapshot


def own_commit(table, task_run: str | None, month: str):
    """The snapshot of ``month`` that ``task_run`` committed to a pyiceberg table, if one did: an earlier
    try of the same task run whose commit landed and which was lost before it could say so. None
    without a task run (a step run outside an orchestrator) or such a commit."""
    if not task_run:
        return None
    return next((s for s in month_commits(table, month) if s.summary.get(COMMITTED_BY) == task_run), None)


def held_version(table, month: str) -> str | None:
    """The landed version of ``month`` the table holds now: the newest commit that loaded that month
    (None: it was never loaded, or loaded by a version of the project that did not record it)."""
    return next((s.summary[LANDED_VERSION] for s in month_commits(table, month) if s.summary.get(LANDED_VERSION)), None)


@dataclass(frozen=True)
class DataChange:
    """A data file one commit added or deleted, and the bounds of a column in it (from the manifests)."""

    snapshot_id: int
    kind: str  # "added" | "deleted"
    rows: int
    low: Any = None  # None with high: the file holds no value of the column (all null)
    high: Any = None
    bounded: bool = True  # False: the table keeps no bounds for the column: the file may hold any value

    def overlaps(self, start, end) -> bool:
        """Whether the file can hold a value in [start, end)."""
        if not self.bounded:
            return True
        return self.low is not None and self.low < end and self.high >= start


def data_changes(table, since: int | None, column: str, until: int | None = None) -> list[DataChange] | None:
    """The data files the commits after snapshot ``since`` (up to ``until``, default the current one)
    added or deleted, each with the bounds of ``column`` Iceberg keeps for it: where the table changed,
    from its metadata alone (manifests, no data read). ``since`` None: every commit up to ``until``.
    None when ``since`` is not an ancestor of ``until`` (expired, or another branch): anything may have
    changed since."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.manifest import ManifestEntryStatus
    from pyiceberg.table.snapshots import ancestors_between_ids, is_ancestor_of

    current = table.snapshot_by_id(until) if until is not None else table.current_snapshot()
    if current is None:
        return None if since is not None else []
    if since is not None and not is_ancestor_of(current.snapshot_id, since, table.metadata):
        return None
    chain = list(ancestors_between_ids(since, current.snapshot_id, table.metadata))  # newest first
    field = table.schema().find_field(column)
    changes = []
    for snapshot in reversed(chain):
        for manifest in snapshot.manifests(table.io):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue  # written by an earlier commit: holds none of this one's changes
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                if entry.snapshot_id != snapshot.snapshot_id or entry.status == ManifestEntryStatus.EXISTING:
                    continue
                file = entry.data_file
                low, high = (file.lower_bounds or {}).get(field.field_id), (file.upper_bounds or {}).get(field.field_id)
                nulls, values = (
                    (file.null_value_counts or {}).get(field.field_id),
                    (file.value_counts or {}).get(field.field_id),
                )
                all_null = nulls is not None and values is not None and nulls == values
                changes.append(
                    DataChange(
                        snapshot.snapshot_id,
                        "added" if entry.status == ManifestEntryStatus.ADDED else "deleted",
                        file.record_count,
                        _value(field.field_type, from_bytes(field.field_type, low)) if low is not None else None,
                        _value(field.field_type, from_bytes(field.field_type, high)) if high is not None else None,
                        bounded=all_null or (low is not None and high is not None),
                    )
                )
    return changes


def _value(field_type, raw):
    """A bound as Python has it: timestamps and dates as datetime and date (Iceberg keeps micros and days)."""
    import datetime as dt

    from pyiceberg.types import DateType, TimestampType

    if isinstance(field_type, TimestampType):
        return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=raw)
    if isinstance(field_type, DateType):
        return dt.date(1970, 1, 1) + dt.timedelta(days=raw)
    return raw
