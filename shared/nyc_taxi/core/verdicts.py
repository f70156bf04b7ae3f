"""What the checks judged, kept in the table they judged, for the runs that read a version: each version's
results, and each month's failed error checks, carried from snapshot to snapshot so that no expiry loses one
and a reader refuses a window over a failed month (``failures_of``), or a month no check judged
(``unjudged``)."""

from __future__ import annotations

from nyc_taxi.core.quality import CheckResult


def record(table, snapshot_id: int, results: list[CheckResult], settings) -> None:
    """Keep ``results`` in ``table``'s metadata for the runs that read ``snapshot_id`` (a metadata-only
    commit). What was written stands if this fails: a reader then reports no results for that version."""
    import logging

    from nyc_taxi.core.statistics import record_counts

    try:
        record_counts(table, snapshot_id, {}, {}, settings, results)
    except Exception:
        logging.getLogger(__name__).warning("could not record %s's check results", table.name, exc_info=True)


JUDGED_PREFIX = "nyc-taxi.judged."  # + "<snapshot id>.<batch>": {"batch": ..., "failed": [[batch, result], ...]}


def record_judgement(table, snapshot_id: int, batch: str, results: list[CheckResult], settings) -> None:
    """Keep, for ``snapshot_id`` of ``table`` (a registry table) and ``batch`` (the month its commit wrote, or
    that a retry judged on it), the failed error checks it holds: its own, and those of earlier months its
    ancestry still holds (carried, so the expiry of an old snapshot loses none). A property of its own per
    snapshot and batch: writers recording at once, or a retry judging its month on another month's
    snapshot, never overwrite each other's. Properties of snapshots the table no longer has are dropped."""
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.core.commits import retry_on_conflict

    retry_on_conflict(
        f"recording what {table.name}'s checks judged",
        lambda: record_judgement_on(load_table(table, settings), snapshot_id, batch, results),
    )


def record_judgement_on(iceberg, snapshot_id: int, batch: str, results: list[CheckResult]) -> None:
    """``record_judgement`` on a pyiceberg table, in one metadata commit."""
    import json

    carried = [(b, r) for b, r in failures_of(iceberg, snapshot_id) if b != batch]
    failed = [(batch, r) for r in results if r.stops] + carried
    entry = {"batch": batch, "failed": [[b, r.as_dict()] for b, r in failed]}
    gone = [k for k in iceberg.properties if k.startswith(JUDGED_PREFIX) and not _held(iceberg, k)]
    with iceberg.transaction() as transaction:
        transaction.set_properties({f"{JUDGED_PREFIX}{snapshot_id}.{batch}": json.dumps(entry, default=str)})
        if gone:
            transaction.remove_properties(*gone)


def _held(iceberg, key: str) -> bool:
    return iceberg.snapshot_by_id(int(key.removeprefix(JUDGED_PREFIX).split(".")[0])) is not None


def _judgements(iceberg) -> dict[int, list[dict]]:
    """Every recorded judgement, by snapshot id."""
    import json

    found: dict[int, list[dict]] = {}
    for key, value in iceberg.properties.items():
        if key.startswith(JUDGED_PREFIX):
            try:
                found.setdefault(int(key.removeprefix(JUDGED_PREFIX).split(".")[0]), []).append(json.loads(value))
            except ValueError:  # not written by record_judgement
                continue
    return found


def _ancestry(iceberg, snapshot_id):
    snapshot = iceberg.snapshot_by_id(int(snapshot_id)) if snapshot_id is not None else None
    while snapshot is not None:
        yield snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = iceberg.snapshot_by_id(parent) if parent is not None else None


def failures_of(iceberg, snapshot_id) -> list[tuple[str, CheckResult]]:
    """The failed error checks of the batches ``snapshot_id`` of ``iceberg`` (a pyiceberg table) holds, with
    their batches: walking back from it through its ancestors, each batch as the latest snapshot that
    judged it left it. On one snapshot, a judgement of the batch itself (its merge's, or a retry's) is its
    verdict; only a batch no judgement there is of is taken from the failures they carried, each once. A
    raw table's check judges the batch its commit wrote (a month); a later commit of another month, or one
    no check judged (a compaction), leaves those rows as they were. A rollback to before the failed commit
    leaves it out of the ancestry. Two merges recording at once can carry a failure a later one judged
    again: refused, not let through."""
    judged, seen, failures = _judgements(iceberg), set(), []
    for snapshot in _ancestry(iceberg, snapshot_id):
        entries = judged.get(snapshot.snapshot_id, [])
        own = {e["batch"]: [(b, r) for b, r in e["failed"] if b == e["batch"]] for e in entries}
        carried: dict[str, dict[tuple, dict]] = {}
        for entry in entries:
            for b, r in entry["failed"]:
                if b not in own:
                    carried.setdefault(b, {})[(r.get("check"), r.get("version"))] = r
        for batch in [*sorted(own), *sorted(carried)]:
            if batch not in seen:
                seen.add(batch)
                stored = [r for _, r in own[batch]] if batch in own else list(carried[batch].values())
                failures += [(batch, _stored_failure(r)) for r in stored]
    return failures


def writer_of(iceberg, snapshot_id, batch: str, month_of):
    """The latest snapshot in ``snapshot_id``'s ancestry whose commit wrote ``batch`` (``month_of(snapshot)``:
    the batch a commit wrote, from its summary); None when none did."""
    return next((s for s in _ancestry(iceberg, snapshot_id) if month_of(s) == batch), None)


def unjudged(iceberg, snapshot_id, batch: str, month_of) -> bool:
    """Whether the latest commit in ``snapshot_id``'s ancestry that wrote ``batch`` (``month_of(snapshot)``:
    the batch a commit wrote, from its summary) was never judged: a merge killed between its commit and its
    check, or whose record failed, and whose retry then commits nothing. Such a retry judges the month as
    raw holds it now."""
    judged = _judgements(iceberg)
    for snapshot in _ancestry(iceberg, snapshot_id):
        entries = judged.get(snapshot.snapshot_id, [])
        if any(e["batch"] == batch or any(b == batch for b, _ in e["failed"]) for e in entries):
            return False
        if month_of(snapshot) == batch:
            return True
    return False


def _stored_failure(data: dict) -> CheckResult:
    """A failed result as a table's metadata keeps it, read by this code's CheckResult: fields it does not
    know dropped, those it lacks defaulted, and a failure whatever its status field says, so a change of
    the class never makes a stored failure unreadable, or a pass."""
    import dataclasses

    known = {f.name: f for f in dataclasses.fields(CheckResult)}
    kept = {k: v for k, v in data.items() if k in known}
    for name, field in known.items():
        if name not in kept and field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            kept[name] = None
    return CheckResult.from_dict({**kept, "status": "fail", "here": False})


def recorded_results(table, snapshot_id) -> list[CheckResult]:
    """The results its writer recorded for ``snapshot_id`` of ``table`` (pyiceberg), as a run that reads
    that version reports them; none when the table's record is of another snapshot."""
    from nyc_taxi.core.statistics import recorded

    return [CheckResult.from_dict({**r, "here": False}) for r in recorded(table, snapshot_id).get("results", [])]
