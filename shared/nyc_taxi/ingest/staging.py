"""Staging a landed month: one way for both sources.

A staging table holds exactly one load. Each staging snapshot records, in Iceberg's own snapshot
summary, which landed version it holds; staging the same landed version again commits nothing
(and starts no Spark), and the lineage of a staging snapshot can be read from the table itself.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path

from nyc_taxi.core import quality
from nyc_taxi.core.catalog import current_snapshot, load_table
from nyc_taxi.core.commits import retry_on_conflict
from nyc_taxi.core.datasets import LandedFiles, Table
from nyc_taxi.core.naming import spark_table
from nyc_taxi.core.profiles import distinct_aggregates, profile
from nyc_taxi.core.settings import Settings
from nyc_taxi.core.snapshots import LANDED_VERSION
from nyc_taxi.core.sql import SqlFolder
from nyc_taxi.core.statistics import observing, record_counts
from nyc_taxi.core.tables import pinned_rows
from nyc_taxi.ingest import download
from nyc_taxi.ingest.errors import BadSourceFile
from nyc_taxi.lineage.write.report import DatasetUse, StepReport

log = logging.getLogger(__name__)


def landed_file_version(landed: LandedFiles, locations: list[str], settings: Settings) -> str:
    """The version of the landed files a stage reads: each file's name and sha256."""
    versions = []
    for location in locations:
        version = download.landed_version(location, settings)
        if version is None:
            raise BadSourceFile(
                f"{location} has not landed (or has no version record beside it): "
                "run the download task for this month first"
            )
        versions.append(f"{Path(location).name}@{version.landed_version}")
    return ", ".join(sorted(versions))


def staged_files(snapshot) -> list[str]:
    """The names of the landed files a staging snapshot holds (its rows' ``source_file``), as its
    summary records them: no scan."""
    if snapshot is None:
        return []
    version = snapshot.summary.get(LANDED_VERSION)
    if version is None:
        raise BadSourceFile(
            f"staging snapshot {snapshot.snapshot_id} was not written by the stage step (it records no "
            f"{LANDED_VERSION}): run the stage task for this month first"
        )
    return [entry.rsplit("@", 1)[0] for entry in version.split(", ")]


def stage(
    sql: SqlFolder,
    statement: str,
    staging: Table,
    landed: LandedFiles,
    version: str,
    locations: list[str],
    landed_view: Callable[[object], str],
    settings: Settings,
    summary: dict,
    check_values: dict[str, object],
    key: tuple[str, ...],
    properties: dict[str, str] | None = None,
    empty: Callable[[], Exception] | None = None,
    small: bool = False,
    **values: object,
) -> StepReport:
    """Replace ``staging`` with ``statement`` (a SELECT over the landed files' view) unless it holds ``version``,
    and check what it wrote.

    ``landed_view(spark)`` registers the landed files as a view and returns its name; ``empty()``, if
    given, is the error to raise when the statement selects no rows (nothing is written then);
    ``small``: the rows staged are few (the session's quick JIT tier, see ``get_spark``); ``properties``: more
    of the load's facts for its snapshot summary. The staging
    table's declared checks (their ``${…}`` placeholders from ``check_values``; ``key``: the columns that
    name a failing row in the results' examples) and its categorical
    columns' distinct values are counted in the write's own pass (Spark's ``observe``), a column's nulls
    and the rows from the written snapshot's manifests (no row read), a check Spark cannot observe, such as
    a unique key, in one more pass over what was written; and recorded for the new
    snapshot (``core/statistics.py``): the merge publishes the batch only if no error check failed, and
    reads the counts instead of scanning staging again. The column lineage is the statement's, as
    DataHub's SQL parser reads it.
    """
    from nyc_taxi.lineage.write.columns import Statement, column_lineage

    columns = column_lineage(
        staging, [Statement(sql, statement, reads={"landed": "landed"}, values=values)], {"landed": landed}, settings
    )
    checks = quality.aggregates(staging.checks, check_values)  # what the record's digest names
    in_the_pass = [c for c in staging.checks if quality.counted_in_the_pass(c, check_values)]
    observed = {**quality.aggregates(in_the_pass, check_values), **distinct_aggregates(staging)}
    later = [c for c in staging.checks if c not in in_the_pass]
    snapshot = current_snapshot(staging, settings)
    committed = not (snapshot and snapshot.summary.get(LANDED_VERSION) == version)
    results, profiled = [], None
    if committed:
        from pyspark.sql.functions import lit

        from nyc_taxi.core.spark import get_spark

        spark = get_spark(settings, small=small)
        frame = sql.run(spark, statement, landed=landed_view(spark), **values)
        if empty is not None and frame.isEmpty():
            raise empty()

        def write():
            written, observation = observing(frame, observed)
            writer = written.writeTo(spark_table(staging, settings))
            for key, value in {LANDED_VERSION: version, **(properties or {})}.items():
                writer = writer.option(f"snapshot-property.{key}", value)
            (
                writer
                # One load from a few files: each task writes its own file per partition, with no
                # shuffle to gather a partition's rows first (a month into daily partitions: 1-2 s less).
                .option("distribution-mode", "none")
                .option("fanout-enabled", "true")
                .option("overwrite-mode", "static")  # whatever the session's partitionOverwriteMode says
                .overwrite(lit(True))  # all of it, whatever partitions the previous load had
            )
            return observation

        observation = retry_on_conflict(f"staging {staging.name}", write)
        snapshot = current_snapshot(staging, settings)
        if snapshot.summary.get(LANDED_VERSION) == version:  # this write's snapshot: its counts are its rows'
            counts = dict(observation.get)
            iceberg = load_table(staging, settings)
            counts |= counted_after_the_write(spark, staging, iceberg, snapshot, later, check_values, settings)
            results = quality.judge(staging.name, staging.checks, counts, str(snapshot.snapshot_id), check_values)
            if failed := {r.check for r in quality.stopping(results)}:  # a few of their rows, for the record
                written = pinned_rows(spark, staging, snapshot, settings)
                results = quality.with_examples(
                    results,
                    {
                        c.name: quality.failing_examples(written, c, check_values, key)
                        for c in staging.checks
                        if c.name in failed
                    },
                )
            profiled = profile(staging, iceberg, snapshot.snapshot_id, counts)
            try:
                record_counts(staging, snapshot.snapshot_id, checks, counts, settings, results)
            except Exception:  # the load stands: a reader without the record counts for itself
                log.warning(
                    "could not record %s's counts; the merge will count them by scanning", staging.name, exc_info=True
                )
            for result in results:
                if not result.passed:
                    log.info(
                        "check %s on %s snapshot %s: %s", result.status, staging.name, result.version, result.summary()
                    )
    rows = int(snapshot.summary.get("total-records", 0))
    return StepReport(
        inputs=[DatasetUse(landed, version=version, locations=tuple(locations))],
        outputs=[
            DatasetUse(
                staging,
                version=str(snapshot.snapshot_id),
                row_count=rows,
                operation="INSERT",
                committed=committed,
                columns=columns,
                checks=results,
                profile=profiled,
            )
        ],
        summary={**summary, "staged_rows": rows, "restaged": committed},
    )


def counted_after_the_write(spark, staging: Table, iceberg, snapshot, checks, values, settings: Settings) -> dict:
    """The staging checks the write's pass did not count, on the snapshot it wrote: from its manifests where
    they settle it, else in one more pass over what was written (``quality.count_snapshot``)."""
    if not checks:
        return {}
    rows = functools.partial(pinned_rows, spark, staging, snapshot, settings)
    return quality.count_snapshot(iceberg, snapshot.snapshot_id, rows, checks, values)
