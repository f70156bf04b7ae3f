"""What the ingestion steps share: a month's bounds and label, the snapshot a merge committed (or an earlier
try of its task run did), the report of a merge into raw."""

from __future__ import annotations

import datetime as dt
import logging

from nyc_taxi.core.catalog import current_snapshot, load_table
from nyc_taxi.core.datasets import Table
from nyc_taxi.core.quality import CheckResult
from nyc_taxi.core.settings import Settings
from nyc_taxi.core.snapshots import COMMITTED_BY, month_commits, own_commit
from nyc_taxi.core.upserts import RowChanges
from nyc_taxi.lineage.write.report import ColumnLineage, DatasetUse, StepReport

log = logging.getLogger(__name__)


def month_bounds(year: int, month: int) -> tuple[dt.date, dt.date]:
    start = dt.date(year, month, 1)
    return start, dt.date(year + month // 12, month % 12 + 1, 1)


def month_label(year: int, month: int) -> str:
    return f"{year:04d}-{month:02d}"


def this_merges_snapshot(raw: Table, settings: Settings, label: str, before, changes: RowChanges):
    """The snapshot this merge committed to ``raw``, or None when it committed nothing.

    Raw's newest snapshot is not necessarily it: another writer (another month's load) may have committed
    since, and that commit is not this run's output. It is the newest snapshot since ``before`` that loaded
    month ``label`` (in a task run, that this task run committed). That is also how a try whose commit
    landed but was answered as a lost race is found, when the try after it has nothing left to change.
    Outside a task run no property names the writer: a load of the same month committed beside this one
    would be taken for it (the ingestion DAGs load one month at a time, ``max_active_runs=1``)."""
    writer = settings.task_run
    commits = month_commits(load_table(raw, settings), label, since=before)
    found = next((s for s in commits if not writer or s.summary.get(COMMITTED_BY) == writer), None)
    if found is not None:
        return found
    if changes.total:  # a commit without the properties it was given: raw's newest, said
        log.warning("%s: no snapshot since the merge began names %s; its output is raw's newest", raw.name, label)
        return current_snapshot(raw, settings)
    return None


def merge_output(raw: Table, settings: Settings, label: str, before, base, changes: RowChanges):
    """What a merge into ``raw`` left, for its report: (the snapshot it names, whether this run committed
    it, the changes it made, and the commit's summary when the changes come from it, else None).

    The snapshot is this merge's own commit (``this_merges_snapshot``) or an earlier try's of its task run
    (``earlier_try_commit``); committing nothing, raw as its write found it (``base``), not raw's newest,
    which another writer may have committed since. (A commit that lost the properties it was given is named
    by raw's newest, with a warning: ``this_merges_snapshot``.) A commit that its try was not told of (the try was lost,
    or answered as a lost race, and the try after it had nothing left to change) says in its summary what
    it changed."""
    own = this_merges_snapshot(raw, settings, label, before, changes) or earlier_try_commit(raw, settings, label)
    if own is None:
        return base, False, changes, None
    if changes.total:
        return own, True, changes, None
    return own, True, RowChanges.from_summary(own.summary) or changes, own.summary


def earlier_try_commit(raw: Table, settings: Settings, label: str):
    """The snapshot of month ``label`` that an earlier try of this task run committed to ``raw``, when one
    did and was lost before it could say so (killed after the catalog's commit). That commit is this
    run's output (its asset event, its lineage): nothing is committed again. None otherwise."""
    own = own_commit(load_table(raw, settings), settings.task_run, label)
    if own is not None:
        log.info(
            "%s: the commit of an earlier try of this task run, snapshot %s, is this run's", raw.name, own.snapshot_id
        )
    return own


def merge_report(
    staging: Table,
    staged: tuple[str | None, int, list[CheckResult]],
    raw: Table,
    raw_version: str | None,
    committed: bool,
    changes: RowChanges,
    columns: ColumnLineage,
    label: str,
    version: str | None,
    replaced: str | None,
) -> StepReport:
    """A month's merge into raw: the staged batch it read (``staged``: its version, rows and checks) and
    raw as it left it; the changes, the landed version and the version it replaced only if it committed."""
    staged_version, staged_rows, checked = staged
    replaced = replaced if committed else None
    written = DatasetUse(
        raw,
        version=raw_version,
        row_count=changes.written,
        committed=committed,
        columns=columns,
        changes=changes if committed else None,
        source_version=version if committed else None,
        replaced_version=replaced,
    )
    return StepReport(
        inputs=[DatasetUse(staging, version=staged_version, row_count=staged_rows, checks=checked)],
        outputs=[written],
        summary={
            "month": label,
            "staged_rows": staged_rows,
            "merged_rows": changes.written,
            "added_rows": changes.added,
            "changed_rows": changes.changed,
            "removed_rows": changes.removed,
            **({"replaced_version": replaced} if replaced else {}),
            **{f"check {r.check}": r.status for r in checked if not r.passed},
        },
    )
