"""A batch that is new to a table joins it as the files it was staged in: no second Parquet write.

A staging table written in its target's shape (the same schema, field ids and partitioning) already
holds the batch as the target would store it. Appending those data files to the target is then a
metadata commit: each file is shared into the target's own location (a hard link locally, a
server-side copy on S3) under a name of the attempt's own, so either table's snapshot expiry leaves the
other whole and a lost attempt's cleanup touches no other attempt's files, and the target's
new snapshot lists them with the metrics they were written with (the bounds that prune reads).

Iceberg's Java API does the commit, in the Spark session's JVM and through its catalog, as Spark's
own writes do. The commit is validated against the snapshot the caller decided on: if another writer
committed to the target since, it fails as a conflict and the caller decides again
(``retry_on_conflict``), so a batch is never appended twice.
"""

from __future__ import annotations

import uuid
from pathlib import PurePosixPath

from nyc_taxi.core.commits import lost_race
from nyc_taxi.core.datasets import Table
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.settings import Settings
from nyc_taxi.core.spark import java_table

APPENDED_FROM = "nyc-taxi.appended-from"  # snapshot summary property: the staged table and snapshot taken


def copy_name(name: str, attempt: str) -> str:
    """The name of a staged data file's copy in the target, made by one attempt to append it."""
    return f"{attempt}-{name}"


def append_staged_files(
    spark,
    staged: Table,
    snapshot_id: int,
    target: Table,
    base_id: int | None,
    settings: Settings,
    summary: dict[str, str] | None = None,
):
    """Append ``staged``'s data files at ``snapshot_id`` to ``target``, validated from ``base_id`` (the
    target's snapshot the caller found holding none of the batch; None: the target was empty), with
    ``summary`` in the new snapshot's summary.

    Returns the number of rows appended, or None when the two tables' shapes differ (e.g. a staging
    table created before it was given its target's partitioning): the caller then writes the rows.
    """
    iceberg = spark._jvm.org.apache.iceberg
    source, destination = java_table(spark, staged, settings), java_table(spark, target, settings)
    same_shape = (
        source.schema().sameSchema(destination.schema())
        and source.spec().compatibleWith(destination.spec())
        and source.spec().specId() == destination.spec().specId()  # a data file carries its spec id
        and source.sortOrder().orderId() == destination.sortOrder().orderId()
    )
    if not same_shape:
        return None
    # the column metrics are read too: the target prunes its reads by them
    planned = source.newScan().useSnapshot(snapshot_id).includeColumnStats().planFiles()
    try:
        tasks = list(planned.iterator())
    finally:
        planned.close()
    if any(task.deletes().size() for task in tasks):
        return None  # rows deleted by delete files: only a rewrite gives the target the batch
    # An overwrite that only adds files is recorded as an append; unlike AppendFiles it validates that
    # nothing was committed to the target since the snapshot the caller decided on.
    append = destination.newOverwrite().validateNoConflictingData()
    append = append.conflictDetectionFilter(iceberg.expressions.Expressions.alwaysTrue())
    if base_id is not None:
        append = append.validateFromSnapshot(base_id)
    # Each attempt's copies have names of their own: an attempt that loses the race removes its copies,
    # never a file another attempt of the same batch (a retry running beside a try Airflow gave up on)
    # copied under the same name and committed.
    store, rows, shared, attempt = lakehouse(settings), 0, [], uuid.uuid4().hex[:12]
    for task in tasks:
        file = task.file()
        location = str(file.location())
        copy = destination.locationProvider().newDataLocation(
            destination.spec(), file.partition(), copy_name(PurePosixPath(location).name, attempt)
        )
        if store.share(location, copy):
            shared.append(copy)
        append.addFile(iceberg.DataFiles.builder(destination.spec()).copy(file).withPath(copy).build())
        rows += file.recordCount()
    for key, value in {**(summary or {}), APPENDED_FROM: f"{staged.name}@{snapshot_id}"}.items():
        append = append.set(key, value)
    try:
        append.commit()
    except Exception as error:
        if lost_race(error):  # certainly not committed: the copies made for it would be orphans in the target
            for copy in shared:
                store.remove(copy)
        raise
    return rows
