"""Audit before publish, for both sources: a staged month is merged into raw only when it passed its
staging table's error checks, and raw's own checks judge the snapshot a merge wrote.

The stage counts its checks while it writes the snapshot (``staging.stage``) and records them in the
table's metadata; the merge reads that record (no scan) or, when there is none for the snapshot by the
checks declared now, counts them itself. An error check that failed stops the merge before anything is
committed: raw keeps its snapshot, the landed files and the staging snapshot stay for inspection, and
the task fails with one message (the check, its failing rows of all, a few of them) and the lineage of
the refusal. Raw's checks run after its commit, which stands: an error there fails the task too.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from nyc_taxi.core import quality, verdicts
from nyc_taxi.core.catalog import load_table
from nyc_taxi.core.datasets import Table
from nyc_taxi.core.naming import iceberg_identifier
from nyc_taxi.core.profiles import profile
from nyc_taxi.core.quality import CheckResult
from nyc_taxi.core.settings import Settings
from nyc_taxi.core.snapshots import LANDED_VERSION
from nyc_taxi.core.statistics import recorded_counts
from nyc_taxi.core.tables import pinned_rows
from nyc_taxi.lineage.write.report import DatasetUse, StepReport


def audit_staged(
    staging: Table,
    raw: Table,
    staged_snapshot,
    values: dict[str, object],
    raw_before,
    spark,
    settings: Settings,
    label: str,
    publisher: str,
    shown: tuple[str, ...],
) -> list[CheckResult]:
    """The staged batch's check results; raises ChecksFailed when an error check failed. ``values``: the
    checks' placeholders as this month has them; ``shown``: the columns that identify an example row."""
    if staged_snapshot is None or not int(staged_snapshot.summary.get("total-records", 0)):
        return []
    version, rows = str(staged_snapshot.snapshot_id), int(staged_snapshot.summary.get("total-records", 0))
    measures = quality.aggregates(staging.checks, values)
    counts = recorded_counts(load_table(staging, settings), staged_snapshot.snapshot_id, measures)
    counted_here = counts is None
    staged = pinned_rows(spark, staging, staged_snapshot, settings)
    if counted_here:  # not recorded, or by other definitions: counted here, in one scan of staging
        counts = quality.count_frame(staged, measures)
    results = [
        replace(r, here=counted_here) for r in quality.judge(staging.name, staging.checks, counts, version, values)
    ]
    before = str(raw_before.snapshot_id) if raw_before else None
    quality.refuse(
        results,
        subject=f"{staging.name} snapshot {version} ({staged_snapshot.summary.get(LANDED_VERSION)})",
        consequence=f"{raw.name} was not changed (it stays at snapshot {before})",
        keep=(
            f"The landed files and {staging.name} snapshot {version} are kept for inspection; once {publisher} "
            f"publishes corrected files, load the month {label} again."
        ),
        examples=lambda check: quality.failing_examples(staged, check, values, shown),
        checks=staging.checks,
        report=lambda checked: StepReport(
            inputs=[DatasetUse(staging, version=version, row_count=rows, checks=checked)],
            outputs=[DatasetUse(raw, version=before, committed=False)],
            summary={"month": label, "staged_rows": rows, "merged_rows": 0, "refused": True},
        ),
    )
    return results


def check_published(
    written: DatasetUse,
    raw: Table,
    spark,
    values: dict[str, object],
    report: StepReport,
    settings: Settings,
    batch: str,
) -> None:
    """Raw's declared checks and profile on the snapshot a merge wrote (``quality.count_snapshot``: a row
    count its data files' bounds settle from the manifests, the rest in one pruned pass), kept on ``written``
    and in raw's metadata for the runs that read it, with the batch it judged (``batch``, the month) and the
    error checks that failed on it. An error is raised after the commit, which stands: the task fails, and
    says how to roll it back."""
    iceberg = load_table(raw, settings)
    snapshot = int(written.version)
    rows = functools.partial(pinned_rows, spark, raw, snapshot, settings)  # only if the manifests do not settle it
    counts = quality.count_snapshot(iceberg, snapshot, rows, raw.checks, values)
    written.checks = quality.judge(raw.name, raw.checks, counts, written.version, values)
    written.profile = profile(raw, iceberg, snapshot)
    verdicts.record(raw, snapshot, written.checks, settings)
    # which month this commit wrote and whether it failed, for every reader of this snapshot or a later
    # one (the flow refuses a window over a failed month: verdicts.failures_of). If it cannot be recorded
    # the task fails, and its retry, which commits nothing, judges the month again (verdicts.unjudged)
    if raw.checks:  # a table that declares none has nothing to judge
        verdicts.record_judgement(raw, snapshot, batch, written.checks, settings)
    quality.refuse(
        written.checks,
        subject=f"{raw.name} snapshot {written.version}",
        consequence="the commit stands (an Iceberg commit is atomic, and this one was made)",
        keep=(
            f"Roll it back (CALL <catalog>.system.rollback_to_snapshot('{iceberg_identifier(raw, settings)}', "
            "<the snapshot before>)) and load the month again."
        ),
        examples=lambda check: [],
        checks=raw.checks,
        report=lambda checked: report,
    )
