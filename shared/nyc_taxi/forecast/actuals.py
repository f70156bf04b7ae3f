"""The flow's first step: a window's hourly rides per zone from raw's trips (Spark SQL), judged day by day
before anything is committed."""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, replace

from nyc_taxi.core import jobs, quality, verdicts
from nyc_taxi.core.catalog import current_snapshot, load_table
from nyc_taxi.core.commits import retry_on_conflict
from nyc_taxi.core.intervals import Intervals
from nyc_taxi.core.naming import iceberg_identifier, spark_table
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.core.snapshots import commit_properties, month_of
from nyc_taxi.core.tables import ensure_tables, pinned
from nyc_taxi.core.upserts import RowChanges, merge_changes
from nyc_taxi.forecast.coverage import COUNTED_HOURS, RAW_SNAPSHOT, Coverage
from nyc_taxi.forecast.errors import MonthNotJudged
from nyc_taxi.forecast.tables import ACTUALS, RAW, SQL, checked_version, holds_rows, recorded_checks, scan, version_of
from nyc_taxi.forecast.window import Window, WindowDays, day_ranges, window_days
from nyc_taxi.lineage.write.columns import Statement, column_lineage
from nyc_taxi.lineage.write.report import DatasetUse, Range, StepReport

log = logging.getLogger(__name__)


def window_actuals(spark, counts: str, days: WindowDays):
    """The window's zero-filled actuals from the counts view ``counts``, for the days raw holds
    (hourly_actuals.sql)."""
    window = days.window
    bounds = {"window_start": window.start, "window_end": window.end, "last_hour": window.end - dt.timedelta(hours=1)}
    return SQL.run(spark, "hourly_actuals", counts=counts, covered=days.with_rides().predicate("h.hour"), **bounds)


def _day_checks(days: WindowDays, raw_snapshot, before, lookback_days: int) -> list[quality.CheckResult]:
    """The actuals' checks of the window's days (DuckDB over one row per day: no JVM); ChecksFailed when a
    day the model would learn from has no rides, or a day's rides are far from its weekday's, naming the
    days and the months to load."""
    rows = days.rows()
    checked = quality.judge(
        ACTUALS.name, ACTUALS.checks, quality.count_arrow(rows, quality.aggregates(ACTUALS.checks, {})), None, {}
    )
    missing = days.missing_training_days()
    months = sorted({f"{day:%Y-%m}" for day in missing})
    load = (
        f"Load {', '.join(months)} with the {jobs.INGEST_YELLOW_TAXI_DATA.name} DAG "
        f"({', '.join(json.dumps({'month': m}) for m in months)}), or choose an as_of_datetime whose "
        f"{lookback_days} days before are loaded."
        if missing
        else "Look at the raw trips of those days: a month loaded in part, or most of its trips without a pickup time or zone."
    )
    quality.refuse(
        checked,
        subject=(
            f"the days of the window {days.window.start} – {days.window.end} in {RAW.name} snapshot {version_of(raw_snapshot)}"
            + (f" (no trips on {day_ranges(missing)})" if missing else "")
        ),
        consequence=f"nothing was committed ({ACTUALS.name} stays at snapshot {version_of(before)}) and no model is trained",
        keep=load,
        examples=lambda check: quality.failing_arrow_examples(rows, check, {}),
        checks=ACTUALS.checks,
        report=lambda results: StepReport(
            inputs=[
                DatasetUse(RAW, version=version_of(raw_snapshot), range=Range.of("pickup_datetime", *days.window.hours))
            ],
            outputs=[DatasetUse(ACTUALS, version=version_of(before), committed=False, checks=results)],
        ),
    )
    return checked


def refuse_raw_that_failed(raw_table, window: Window, read: DatasetUse, output: DatasetUse, settings: Settings) -> None:
    """Refuses the snapshot of raw a step reads when it holds a month of the window whose own check failed
    (ChecksFailed), or whose latest commit no check judged (MonthNotJudged: a merge stopped between its
    commit and its check, whose retry has not run). A merge's check runs after its commit, which stands,
    and the month it judged stays in every later snapshot as it was (``verdicts.failures_of``, through the
    snapshot's ancestry). A month appended twice would be counted twice."""
    months = {f"{window.start:%Y-%m}", f"{window.end - dt.timedelta(hours=1):%Y-%m}"}
    day = window.start
    while day < window.end:
        months.add(f"{day:%Y-%m}")
        day += dt.timedelta(days=1)
    snapshot_id = int(read.version)
    written = lambda month: verdicts.writer_of(raw_table, snapshot_id, month, month_of)  # noqa: E731
    not_judged = [m for m in sorted(months) if verdicts.unjudged(raw_table, snapshot_id, m, month_of)]
    if not_judged:
        raise MonthNotJudged(
            f"{RAW.name} snapshot {read.version} holds "
            + ", ".join(f"{m} (written by snapshot {written(m).snapshot_id})" for m in not_judged)
            + ", which no check has judged: the merge that wrote it stopped between its commit and its check. "
            "Nothing was committed and no model is trained. Run the month's ingestion again (its merge commits "
            "nothing, since the rows are there, and judges the month as raw holds it), then train again."
        )
    failed = [(batch, r) for batch, r in verdicts.failures_of(raw_table, snapshot_id) if batch in months]
    if not failed:
        return
    mends = []
    for batch in sorted({batch for batch, _ in failed}):
        writer = written(batch)  # the commit to undo: the month's own, wherever a check judged it
        if writer is None:  # expired meanwhile: its parent is not known any more
            mends.append(
                f"the commit that wrote {batch} is no longer in {RAW.name}'s history: roll back to one before it"
            )
        elif writer.parent_snapshot_id is None:
            mends.append(
                f"snapshot {writer.snapshot_id} wrote {batch} and was {RAW.name}'s first: drop the table and load the months again"
            )
        else:
            mends.append(
                f"CALL <catalog>.system.rollback_to_snapshot('{iceberg_identifier(RAW, settings)}', "
                f"{writer.parent_snapshot_id}) undoes snapshot {writer.snapshot_id}, which wrote {batch}"
            )
    results = [r for _, r in failed]
    quality.refuse(
        results,
        subject=f"{RAW.name} snapshot {read.version}",
        consequence="nothing was committed"
        + (f" ({output.name} stays at snapshot {output.version})" if output.version else "")
        + " and no model is trained",
        keep=(
            f"The check failed on {RAW.name} snapshot {', '.join(sorted({str(r.version) for r in results}))}, "
            f"whose commit stands. Roll {RAW.name} back to the snapshot before the month's commit "
            f"({'; '.join(mends)}), then load the months merged since then again (loading the failed month "
            "again alone changes nothing: its rows are already there)."
        ),
        examples=lambda check: [],
        checks=RAW.checks,
        report=lambda shown: StepReport(inputs=[replace(read, checks=shown)], outputs=[output]),
    )


def _held(table, snapshot, window: Window) -> tuple[bool, WindowDays]:
    """Whether the table's rows of the window are already its actuals — every zone with a ride in it has a row
    for every hour of the window's days that have rides, and no other zone has any — and its days' rides as
    the table holds them (pyiceberg: no Spark)."""
    rows = None
    if snapshot is not None:
        rows, _ = scan(ACTUALS, "pickup_hour", window.start, window.end, None, iceberg=table, snapshot=snapshot)
    if rows is None or rows.num_rows == 0:
        return False, WindowDays(window, {})
    zones = rows.column("pickup_location_id").to_pylist()
    hours = rows.column("pickup_hour").to_pylist()
    counts = rows.column("ride_count").to_pylist()
    hourly: dict[dt.datetime, int] = {}
    for hour, count in zip(hours, counts, strict=True):
        hourly[hour] = hourly.get(hour, 0) + count
    days = WindowDays(window, hourly)
    active = {z for z, n in zip(zones, counts, strict=True) if n > 0}
    per_zone: dict[int, int] = {}
    for zone in zones:
        per_zone[zone] = per_zone.get(zone, 0) + 1
    expected = days.with_rides().hours
    return set(per_zone) == active and set(hours) and all(n == expected for n in per_zone.values()), days


def compute_actuals(
    as_of: dt.datetime, lookback_days: int, horizon_hours: int, settings: Settings | None = None
) -> StepReport:
    """The window's hourly rides per zone, from raw's trips into the actuals table: the window (the lookback
    days and the horizon, so that a backtest can be scored) becomes exactly its zero-filled counts, for the
    days that have rides. It is the flow's GROUP BY (``hourly_counts.sql``, ``hourly_actuals.sql``), with
    three things around it, each named below:

    - refusals before anything is committed (``_refuse_unusable_raw``, ``_day_checks``): a month of the
      window whose check failed or that no check judged; a training day without rides, or far from its
      weekday's (ChecksFailed names the days and the months to load);
    - the incremental path (``Coverage``): only the hours whose trips raw changed since they were counted
      are counted again, reading only those days of raw, the other hours kept from the table; when raw
      changed nothing in the window, ``_already_counted`` answers without Spark and commits nothing;
    - a lost race with another writer: the whole count is recomputed on the new snapshots
      (``retry_on_conflict``)."""
    settings = settings or get_settings()
    ensure_tables([ACTUALS], settings)
    window = Window.of(as_of, lookback_days, horizon_hours)
    before = current_snapshot(ACTUALS, settings)
    result = retry_on_conflict(f"computing {ACTUALS.name}", lambda: _count_window(window, lookback_days, settings))
    after = current_snapshot(ACTUALS, settings)
    checked, profiled = checked_version(ACTUALS, after, result.checked, settings)
    result.log()
    return _report(window, result, before, after, checked, profiled, settings)


@dataclass
class _Counted:
    """One count of a window: the raw snapshot it read, the hours it counted, what it wrote."""

    raw_snapshot: object
    counted: Intervals
    rows: int | None  # None: raw changed nothing in the window, nothing was counted or committed
    changes: RowChanges
    checked: list

    def log(self) -> None:
        if self.rows is None:
            log.info(
                "%s already holds the window as %s snapshot %s has it: nothing counted, nothing committed",
                ACTUALS.name,
                RAW.name,
                version_of(self.raw_snapshot),
            )
            return
        changes = self.changes
        log.info(
            "%d zone-hours, %d hours counted from %s: %d added, %d changed, %d removed in %s",
            self.rows,
            self.counted.hours,
            RAW.name,
            changes.added,
            changes.changed,
            changes.removed,
            ACTUALS.name,
        )


def _count_window(window: Window, lookback_days: int, settings: Settings) -> _Counted:
    """One try: refuse what must be refused, count the hours raw changed, write the window, record what is
    counted for which raw snapshot."""
    actuals_table = load_table(ACTUALS, settings)
    before = actuals_table.current_snapshot()
    raw_table, raw_snapshot = _refuse_unusable_raw(window, before, lookback_days, settings)
    hours = Intervals.of([(window.start, window.end)])
    coverage = Coverage.of(actuals_table)
    valid = coverage.still_counted(raw_table, raw_snapshot) if coverage else Intervals()
    counted, kept = hours - valid, hours & valid
    if not counted:
        held = _already_counted(actuals_table, before, window, raw_snapshot, lookback_days)
        if held is not None:
            return held
    if raw_snapshot is None:  # raw holds nothing yet: every day is missing
        _day_checks(WindowDays(window, {}), raw_snapshot, before, lookback_days)
    from nyc_taxi.core.spark import get_spark

    spark = get_spark(settings, small=True)  # zone-hours: small data (a window's trips at most)
    counts = _hourly_counts(spark, raw_snapshot, counted, before, kept, settings)
    try:
        # the window's days first: a window without every training day is refused before anything else
        days = window_days(counts, window)
        checked = _day_checks(days, raw_snapshot, before, lookback_days)
        summary = {RAW_SNAPSHOT: version_of(raw_snapshot) or "", COUNTED_HOURS: counted.text()}
        rows, changes = _write_window(spark, counts, days, actuals_table, before, summary, settings)
    finally:
        counts.unpersist()
    now = load_table(ACTUALS, settings).current_snapshot()
    # counted for raw's snapshot: every hour of the window but those this window judged not loaded (their
    # rows it removed, even when an earlier window had counted them), which the next window counts again;
    # a day without any trip stays so while raw does
    covered = (valid | hours) - days.judged_not_loaded()
    Coverage(now.snapshot_id if now else None, raw_snapshot.snapshot_id, covered).record(settings)
    return _Counted(raw_snapshot, counted, rows, changes, checked)


def _refuse_unusable_raw(window: Window, before, lookback_days: int, settings: Settings):
    """Raw's table and snapshot, unless the window cannot be counted from them: no raw table (every training
    day is missing), or a month of the window whose check failed or that no check judged."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        raw_table = load_table(RAW, settings)
    except NoSuchTableError:  # nothing was ever loaded: every training day is missing, refused as such
        _day_checks(WindowDays(window, {}), None, before, lookback_days)
        raise
    raw_snapshot = raw_table.current_snapshot()
    if raw_snapshot is not None:  # a month of the window whose own check failed is not counted
        refuse_raw_that_failed(
            raw_table,
            window,
            DatasetUse(RAW, version=version_of(raw_snapshot), range=Range.of("pickup_datetime", *window.hours)),
            DatasetUse(ACTUALS, version=version_of(before), committed=False),
            settings,
        )
    return raw_table, raw_snapshot


def _already_counted(actuals_table, before, window: Window, raw_snapshot, lookback_days: int) -> _Counted | None:
    """Raw changed nothing in the window since it was counted: the window's days as the table has them,
    judged, and nothing committed; None when the table does not hold the window whole (it is counted)."""
    held, days = _held(actuals_table, before, window)
    checked = _day_checks(days, raw_snapshot, before, lookback_days)
    return _Counted(raw_snapshot, Intervals(), None, RowChanges(), checked) if held else None


def _hourly_counts(spark, raw_snapshot, counted: Intervals, before, kept: Intervals, settings: Settings):
    """The window's counts per zone and hour: the hours to count, from raw's pinned snapshot, and the hours
    kept, from the table as it was; persisted, since they are read three times (the days, the active
    zones, the join), so that raw is read once."""
    raw = pinned(RAW, raw_snapshot, settings)
    counts = SQL.run(spark, "hourly_counts", raw=raw, counted=counted.predicate("pickup_datetime"))
    if kept:
        actuals = pinned(ACTUALS, before, settings)
        counts = counts.unionByName(SQL.run(spark, "kept_actuals", actuals=actuals, kept=kept.predicate("pickup_hour")))
    return counts.persist()


def _write_window(spark, counts, days: WindowDays, actuals_table, before, summary: dict, settings: Settings):
    """The window's zero-filled actuals written: appended when the table holds no row of the window, else
    MERGEd so that only what changed is written. Returns (its zone-hours, the rows it changed)."""
    window = days.window
    bounds = {"window_start": window.start, "window_end": window.end, "last_hour": window.end - dt.timedelta(hours=1)}
    counts.createOrReplaceTempView("counts")
    computed = window_actuals(spark, "counts", days).persist()
    rows = computed.count()
    computed.createOrReplaceTempView("computed_actuals")
    target = spark_table(ACTUALS, settings)
    if not holds_rows(actuals_table, before, "pickup_hour", *window.hours):
        changes = RowChanges(added=rows)  # a new window: appended, no comparison needed
        with commit_properties(spark, {**summary, **changes.as_summary()}):
            SQL.run(spark, "insert_actuals", staging="computed_actuals", raw=target, **bounds)
    else:
        changes = merge_changes(
            spark,
            SQL,
            "actuals_changes",
            "merge_actuals",
            summary=summary,
            insert_sql="insert_actuals",
            staging="computed_actuals",
            raw=target,
            **bounds,
        )
    computed.unpersist()
    return rows, changes


def _columns(settings: Settings):
    """The actuals' column lineage, from the SQL files the window's count runs."""
    any_window = {
        "window_start": "2000-01-01 00:00:00",
        "window_end": "2000-01-02 00:00:00",
        "last_hour": "2000-01-01 23:00:00",
    }  # the dates change nothing about which column feeds which
    return column_lineage(
        ACTUALS,
        [
            Statement(SQL, "hourly_counts", reads={"raw": "raw"}, makes="counts", values={"counted": "TRUE"}),
            # the counts kept from the table were counted from raw the same way: the lineage is raw's
            Statement(
                SQL,
                "hourly_actuals",
                reads={"counts": "counts"},
                makes="computed",
                values={**any_window, "covered": "TRUE"},
            ),
            Statement(
                SQL,
                "actuals_changes",
                reads={"staging": "computed", "raw": "target"},
                makes="changes",
                values=any_window,
            ),
            Statement(SQL, "merge_actuals", reads={"raw": "target", "changes": "changes"}, values=any_window),
        ],
        {"raw": RAW},
        settings,
    )


def _report(window: Window, result: _Counted, before, after, checked, profiled, settings: Settings) -> StepReport:
    """What the step read (raw's snapshot, the window's range, its checks) and wrote."""
    columns = _columns(settings)
    committed = version_of(after) != version_of(before)
    changes = result.changes
    return StepReport(
        inputs=[
            DatasetUse(
                RAW,
                version=version_of(result.raw_snapshot),
                range=Range.of("pickup_datetime", *window.hours),
                checks=recorded_checks(RAW, result.raw_snapshot, settings),
            )
        ],
        outputs=[
            DatasetUse(
                ACTUALS,
                version=version_of(after),
                range=Range.of("pickup_hour", *window.hours),
                row_count=changes.written,
                committed=committed,
                columns=columns,
                changes=changes if committed else None,
                checks=checked,
                profile=profiled if committed else None,
            )
        ],
        summary={
            "zone_hours": result.rows if result.rows is not None else 0,
            "counted_hours": result.counted.hours,
            "changed": changes.written,
            "removed": changes.removed,
            **window.as_dict(),
        },
    )
