"""The forecasting flow's data work, one function per step. Each returns what it computed and a
report of what it read and wrote (``.report``), so the flow only calls functions."""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
from dataclasses import dataclass, field, replace

import pyarrow as pa

from nyc_taxi.core import comparison, jobs, quality
from nyc_taxi.core import datasets as d
from nyc_taxi.core.catalog import current_snapshot, load_table
from nyc_taxi.core.commits import retry_on_conflict
from nyc_taxi.core.datasets import AT_MOST, BUSY, HOLE, HOLE_HOURS, HOLE_RIDES, USUAL_HOUR, USUAL_HOURS, WHOLE
from nyc_taxi.core.intervals import Intervals
from nyc_taxi.core.naming import iceberg_identifier, spark_table
from nyc_taxi.core.profiles import profile
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.core.snapshots import commit_properties, data_changes, month_of
from nyc_taxi.core.sql import SqlFolder
from nyc_taxi.core.tables import ensure_tables, iceberg_schema, pinned, set_property
from nyc_taxi.core.upserts import RowChanges, merge_changes
from nyc_taxi.forecast import model as models
from nyc_taxi.forecast.errors import MonthNotJudged, NoDataInWindow
from nyc_taxi.lineage.write.columns import Statement, column_lineage
from nyc_taxi.lineage.write.report import DatasetUse, Range, StepReport

log = logging.getLogger(__name__)
SQL = SqlFolder(__file__)
RAW, WEATHER, ACTUALS, FORECAST, MODEL, SCORES = (
    d.YELLOW_TAXI_RAW,
    d.WEATHER_RAW,
    d.YELLOW_RIDES_HOURLY_ACTUALS,
    d.YELLOW_RIDES_HOURLY_FORECAST,
    d.YELLOW_RIDES_FORECAST_MODEL,
    d.YELLOW_RIDES_FORECAST_SCORES,
)


def check_configuration(model_name: str, lookback_days: int, horizon_hours: int) -> None:
    """The run's parameters as the declarations accept them (the DAG's form and the command line check
    them first; a run started another way is checked here)."""
    for declared, value in (
        (jobs.MODEL, model_name),
        (jobs.LOOKBACK_DAYS, lookback_days),
        (jobs.PREDICT_HORIZON_HOURS, horizon_hours),
    ):
        declared.check(value)


@dataclass(frozen=True)
class Window:
    """Training hours [start, as_of), forecast hours [as_of, end)."""

    start: dt.datetime
    as_of: dt.datetime
    end: dt.datetime

    @classmethod
    def of(cls, as_of: dt.datetime, lookback_days: int, horizon_hours: int) -> Window:
        return cls(as_of - dt.timedelta(days=lookback_days), as_of, as_of + dt.timedelta(hours=horizon_hours))

    @property
    def hours(self) -> tuple[dt.datetime, dt.datetime]:
        """The window's hours, [start, end)."""
        return self.start, self.end

    @property
    def horizon(self) -> list[dt.datetime]:
        return [self.as_of + dt.timedelta(hours=h) for h in range(int((self.end - self.as_of).total_seconds() // 3600))]

    def as_dict(self) -> dict[str, str]:
        return {
            "train_start": self.start.isoformat(),
            "as_of": self.as_of.isoformat(),
            "horizon_end": self.end.isoformat(),
        }


@dataclass(frozen=True)
class WindowDays:
    """The window's days as its actuals' checks see them (the grain "day" of core/datasets.py): each day's
    rides in every zone within the window, hour by hour; whether the model learns from it (its midnight is
    before the forecast origin); whether the whole day is in the window; and its reference, hour by hour:
    the median rides of that hour on the window's other complete training days that have rides — those of
    its weekday when there are two or more (a median of two or more is not moved by one odd day), else all
    of them. Never the day itself: a day would pass against its own count, and of two days of a weekday
    each would fail against the other."""

    window: Window
    hourly: dict[dt.datetime, int]  # rides in every zone, per New York local hour of the window

    @functools.cached_property
    def rides(self) -> dict[dt.date, int]:
        per_day: dict[dt.date, int] = {}
        for hour, count in self.hourly.items():
            per_day[hour.date()] = per_day.get(hour.date(), 0) + count
        return {day: n for day, n in per_day.items() if n}

    @property
    def days(self) -> list[dt.date]:
        last = (self.window.end - dt.timedelta(microseconds=1)).date()
        return [
            self.window.start.date() + dt.timedelta(days=n) for n in range((last - self.window.start.date()).days + 1)
        ]

    def _training(self, day: dt.date) -> bool:
        return dt.datetime.combine(day, dt.time()) < self.window.as_of

    def _hours(self, day: dt.date) -> list[dt.datetime]:
        """The day's hours inside the window."""
        midnight = dt.datetime.combine(day, dt.time())
        hours = (midnight + dt.timedelta(hours=h) for h in range(24))
        return [h for h in hours if self.window.start <= h < self.window.end]

    def _in_window(self, day: dt.date) -> float:
        """The share of the day inside the window (1.0 for a complete day)."""
        return len(self._hours(day)) / 24

    def _alike(self, day: dt.date) -> list[dt.date]:
        others = [
            d for d in self.days if d != day and self._training(d) and self._in_window(d) == 1.0 and self.rides.get(d)
        ]
        alike = [d for d in others if d.weekday() == day.weekday()]
        return alike if len(alike) >= 2 else others

    def hour_references(self, day: dt.date) -> dict[dt.time, float]:
        """Per hour of the day (every hour, in the window or not): the median of that hour's rides on its
        alike days; empty when it has none."""
        import statistics

        alike = self._alike(day)
        if not alike:
            return {}
        slots = [dt.time(h) for h in range(24)]
        return {
            t: float(statistics.median(self.hourly.get(dt.datetime.combine(d, t), 0) for d in alike)) for t in slots
        }

    def _reference(self, day: dt.date) -> float | None:
        """The rides of the day's hours in the window on its alike days (the median per hour, summed)."""
        references = self.hour_references(day)
        return sum(references[h.time()] for h in self._hours(day)) if references else None

    def _usual_hours(self, day: dt.date) -> float | None:
        """Of the day's busy hours in the window, the share that rode as usual (USUAL_HOUR of theirs)."""
        references = self.hour_references(day)
        if not references:
            return None
        busy = [h for h in self._hours(day) if references[h.time()] >= BUSY * sum(references.values())]
        usual = [h for h in busy if self.hourly.get(h, 0) >= USUAL_HOUR * references[h.time()]]
        return len(usual) / len(busy) if busy else None

    def _hole_hours(self, day: dt.date) -> int | None:
        """The most busy hours of the day in a row (in the window) each holding under HOLE of theirs (an hour
        whose weekday's holds fewer than HOLE_RIDES is no hole: at a few rides an hour, none is chance)."""
        references = self.hour_references(day)
        if not references:
            return None
        longest = run = 0
        for hour in self._hours(day):
            reference = references[hour.time()]
            busy = reference >= max(BUSY * sum(references.values()), HOLE_RIDES)  # else an empty hour can be chance
            empty = busy and self.hourly.get(hour, 0) < HOLE * reference
            run = run + 1 if empty else 0
            longest = max(longest, run)
        return longest

    def whole(self, day: dt.date) -> bool:
        """Whether the day is whole against its weekday (the rule of the actuals' day check, core/datasets.py;
        a day with nothing to compare with is taken as it is)."""
        reference, rides = self._reference(day), self.rides.get(day, 0)
        if reference is None:
            return rides > 0
        if rides > AT_MOST * reference or (self._hole_hours(day) or 0) >= HOLE_HOURS:
            return False
        return rides >= WHOLE * reference or (self._usual_hours(day) or 0.0) >= USUAL_HOURS

    def rows(self) -> pa.Table:
        days = self.days
        return pa.table(
            {
                "day": pa.array(days, pa.date32()),
                "rides": pa.array([self.rides.get(d, 0) for d in days], pa.int64()),
                "training": pa.array([self._training(d) for d in days]),
                "complete": pa.array([self._in_window(d) == 1.0 for d in days]),
                "reference": pa.array([self._reference(d) for d in days], pa.float64()),
                "usual_hours": pa.array([self._usual_hours(d) for d in days], pa.float64()),
                "hole_hours": pa.array([self._hole_hours(d) for d in days], pa.int64()),
            }
        )

    def loaded(self, day: dt.date) -> bool:
        """Whether raw holds the day: a training day with rides (the checks judge whether it is whole); a
        horizon day whole against its weekday for the part of it in the window — a day with most of its
        trips missing, or a few stray trips of a month not loaded yet (a file carries pickups of the days
        around its month), is not a day whose forecast can be scored."""
        if self._training(day):
            return self.rides.get(day, 0) > 0
        return self.rides.get(day, 0) > 0 and self.whole(day)

    def with_rides(self) -> Intervals:
        """The window's hours of the days raw holds: those the actuals hold a count for."""
        return Intervals.days(d for d in self.days if self.loaded(d)) & Intervals.of([self.window.hours])

    def judged_not_loaded(self) -> Intervals:
        """The window's hours of the days that have trips and were judged not loaded (most of their trips
        missing): the judgement is this window's, against its reference; another window may judge them loaded."""
        thin = (d for d in self.days if self.rides.get(d) and not self.loaded(d))
        return Intervals.days(thin) & Intervals.of([self.window.hours])

    def missing_training_days(self) -> list[dt.date]:
        return [d for d in self.days if self._training(d) and not self.rides.get(d)]


def window_days(counts, window: Window) -> WindowDays:
    """The window's days from its hourly counts (a Spark frame of zone, hour, ride_count)."""
    per_hour = counts.groupBy("hour").agg({"ride_count": "sum"}).collect()
    return WindowDays(window, {r[0]: int(r[1]) for r in per_hour if r[1]})


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
            f"the days of the window {days.window.start} – {days.window.end} in {RAW.name} snapshot {_version(raw_snapshot)}"
            + (f" (no trips on {_day_ranges(missing)})" if missing else "")
        ),
        consequence=f"nothing was committed ({ACTUALS.name} stays at snapshot {_version(before)}) and no model is trained",
        keep=load,
        examples=lambda check: quality.failing_arrow_examples(rows, check, {}),
        checks=ACTUALS.checks,
        report=lambda results: StepReport(
            inputs=[
                DatasetUse(RAW, version=_version(raw_snapshot), range=Range.of("pickup_datetime", *days.window.hours))
            ],
            outputs=[DatasetUse(ACTUALS, version=_version(before), committed=False, checks=results)],
        ),
    )
    return checked


def _day_ranges(days: list[dt.date]) -> str:
    """2024-03-01 – 2024-03-09, 2024-03-12"""
    spans: list[list[dt.date]] = []
    for day in sorted(days):
        if spans and day - spans[-1][1] == dt.timedelta(days=1):
            spans[-1][1] = day
        else:
            spans.append([day, day])
    return ", ".join(f"{a}" if a == b else f"{a} – {b}" for a, b in spans)


def _version(snapshot) -> str | None:
    return str(snapshot.snapshot_id) if snapshot else None


def _checked_version(table: d.Table, snapshot, checked: list[quality.CheckResult], settings: Settings):
    """The checks a step made of the rows it was about to commit, now bound to the snapshot that holds
    them, kept for the runs that read it; and that snapshot's profile."""
    if not checked or snapshot is None:
        return checked, None
    checked = [replace(r, version=str(snapshot.snapshot_id)) for r in checked]
    quality.record(table, snapshot.snapshot_id, checked, settings)
    return checked, profile(table, load_table(table, settings), snapshot.snapshot_id)


def _recorded_checks(table: d.Table, snapshot, settings: Settings) -> list[quality.CheckResult]:
    """The check results the writer of ``snapshot`` recorded: what a run that reads it reports of it."""
    return quality.recorded_results(load_table(table, settings), snapshot.snapshot_id) if snapshot else []


def _refuse_raw_that_failed(
    raw_table, window: Window, read: DatasetUse, output: DatasetUse, settings: Settings
) -> None:
    """Refuses the snapshot of raw a step reads when it holds a month of the window whose own check failed
    (ChecksFailed), or whose latest commit no check judged (MonthNotJudged: a merge stopped between its
    commit and its check, whose retry has not run). A merge's check runs after its commit, which stands,
    and the month it judged stays in every later snapshot as it was (``quality.failures_of``, through the
    snapshot's ancestry). A month appended twice would be counted twice."""
    months = {f"{window.start:%Y-%m}", f"{window.end - dt.timedelta(hours=1):%Y-%m}"}
    day = window.start
    while day < window.end:
        months.add(f"{day:%Y-%m}")
        day += dt.timedelta(days=1)
    snapshot_id = int(read.version)
    written = lambda month: quality.writer_of(raw_table, snapshot_id, month, month_of)  # noqa: E731
    not_judged = [m for m in sorted(months) if quality.unjudged(raw_table, snapshot_id, m, month_of)]
    if not_judged:
        raise MonthNotJudged(
            f"{RAW.name} snapshot {read.version} holds "
            + ", ".join(f"{m} (written by snapshot {written(m).snapshot_id})" for m in not_judged)
            + ", which no check has judged: the merge that wrote it stopped between its commit and its check. "
            "Nothing was committed and no model is trained. Run the month's ingestion again (its merge commits "
            "nothing, since the rows are there, and judges the month as raw holds it), then train again."
        )
    failed = [(batch, r) for batch, r in quality.failures_of(raw_table, snapshot_id) if batch in months]
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


def _scan(table: d.Table, column: str, start, end, settings: Settings, iceberg=None, snapshot=None):
    """Rows of ``table`` with ``start <= column < end`` at ``snapshot`` (default: its current one), and that
    snapshot."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    iceberg = iceberg or load_table(table, settings)
    snapshot = snapshot or iceberg.current_snapshot()
    if snapshot is None:
        return None, None
    rows = iceberg.scan(
        row_filter=And(GreaterThanOrEqual(column, start.isoformat()), LessThan(column, end.isoformat())),
        snapshot_id=snapshot.snapshot_id,
    ).to_arrow()
    return rows, snapshot


COMPUTED_FROM = "nyc-taxi.computed-from"  # the actuals table's property: what its rows were counted from
RAW_SNAPSHOT = "nyc-taxi.raw-snapshot"  # an actuals commit's summary: the raw snapshot it counted from
COUNTED_HOURS = "nyc-taxi.counted-hours"  # and the hours it counted there


@dataclass(frozen=True)
class Coverage:
    """The hours the actuals table holds as raw's trips counted at one raw snapshot. Every run that counts
    records it as a table property naming the actuals snapshot it describes: a commit to the table by
    anything else voids it, and the next run counts its whole window again."""

    actuals_snapshot: int | None
    raw_snapshot: int
    hours: Intervals

    @classmethod
    def of(cls, table) -> Coverage | None:
        try:
            record = json.loads(table.properties.get(COMPUTED_FROM) or "null")
        except ValueError:
            return None
        current = table.current_snapshot()
        if not record or record.get("actuals-snapshot") != (current.snapshot_id if current else None):
            return None
        return cls(record["actuals-snapshot"], record["raw-snapshot"], Intervals.parse(record["hours"]))

    def record(self, settings: Settings) -> None:
        """A metadata-only commit (no snapshot)."""
        value = {
            "actuals-snapshot": self.actuals_snapshot,
            "raw-snapshot": self.raw_snapshot,
            "hours": self.hours.text(),
        }
        set_property(ACTUALS, COMPUTED_FROM, json.dumps(value), settings)

    def still_counted(self, raw_table, raw_snapshot) -> Intervals:
        """Its hours that raw has not changed since: less the days of every data file raw's later commits
        added or deleted (Iceberg's manifests; no data read). None of them once the recorded snapshot
        has been expired."""
        if raw_snapshot is None:
            return Intervals()
        if self.raw_snapshot == raw_snapshot.snapshot_id:
            return self.hours
        changes = data_changes(raw_table, self.raw_snapshot, "pickup_datetime", raw_snapshot.snapshot_id)
        if changes is None or not all(c.bounded for c in changes):
            return Intervals()
        return self.hours - Intervals.days(day for c in changes if c.low is not None for day in _days(c.low, c.high))


def _days(low: dt.datetime, high: dt.datetime) -> list[dt.date]:
    return [low.date() + dt.timedelta(days=n) for n in range((high.date() - low.date()).days + 1)]


def window_rows(table, snapshot, start, end, column: str = "pickup_hour") -> list[dict]:
    """A table's rows with ``start <= column < end`` as of ``snapshot`` (pyiceberg table and snapshot)."""
    rows, _ = _scan(None, column, start, end, None, iceberg=table, snapshot=snapshot)
    return rows.to_pylist() if rows is not None else []


def _holds_rows(table, snapshot, column: str, start, end) -> bool:
    """Whether the table may hold rows with ``start <= column < end`` (its files' bounds, from the manifests)."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    if snapshot is None:
        return False
    condition = And(GreaterThanOrEqual(column, start.isoformat()), LessThan(column, end.isoformat()))
    return any(True for _ in table.scan(row_filter=condition, snapshot_id=snapshot.snapshot_id).plan_files())


def _held(table, snapshot, window: Window) -> tuple[bool, WindowDays]:
    """Whether the table's rows of the window are already its actuals — every zone with a ride in it has a row
    for every hour of the window's days that have rides, and no other zone has any — and its days' rides as
    the table holds them (pyiceberg: no Spark)."""
    rows = None
    if snapshot is not None:
        rows, _ = _scan(ACTUALS, "pickup_hour", window.start, window.end, None, iceberg=table, snapshot=snapshot)
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
    """Hourly counts for the training window and the horizon (so a backtest can be evaluated): the window's
    rows of the actuals table become exactly its zero-filled counts, for the days that have rides. Every day
    the model learns from must have rides, and every day's rides must be near its weekday's: a window that is
    not covered is refused (ChecksFailed), naming the days and the months to load. Only the hours whose trips
    raw changed since they were counted are counted again, reading only those days of raw; when raw changed
    nothing in the window, no Spark starts and nothing is committed."""
    settings = settings or get_settings()
    ensure_tables([ACTUALS], settings)
    window = Window.of(as_of, lookback_days, horizon_hours)
    hours = Intervals.of([(window.start, window.end)])
    bounds = {"window_start": window.start, "window_end": window.end, "last_hour": window.end - dt.timedelta(hours=1)}

    def attempt() -> tuple:
        from pyiceberg.exceptions import NoSuchTableError

        actuals_table = load_table(ACTUALS, settings)
        before = actuals_table.current_snapshot()
        try:
            raw_table = load_table(RAW, settings)
        except NoSuchTableError:  # nothing was ever loaded: every training day is missing, refused as such
            _day_checks(WindowDays(window, {}), None, before, lookback_days)
            raise
        raw_snapshot = raw_table.current_snapshot()
        if raw_snapshot is not None:  # a month of the window whose own check failed is not counted
            _refuse_raw_that_failed(
                raw_table,
                window,
                DatasetUse(RAW, version=_version(raw_snapshot), range=Range.of("pickup_datetime", *window.hours)),
                DatasetUse(ACTUALS, version=_version(before), committed=False),
                settings,
            )
        coverage = Coverage.of(actuals_table)
        valid = coverage.still_counted(raw_table, raw_snapshot) if coverage else Intervals()
        counted, kept = hours - valid, hours & valid
        if not counted:  # raw changed nothing in the window since it was counted: its days as the table has them
            held, days = _held(actuals_table, before, window)
            checked = _day_checks(days, raw_snapshot, before, lookback_days)
            if held:
                return raw_snapshot, counted, None, RowChanges(), checked
        if raw_snapshot is None:  # raw holds nothing yet: every day is missing
            _day_checks(WindowDays(window, {}), raw_snapshot, before, lookback_days)
        from nyc_taxi.core.spark import get_spark

        spark = get_spark(settings, small=True)  # zone-hours: small data (a window's trips at most)
        raw = pinned(RAW, raw_snapshot, settings)
        counts = SQL.run(spark, "hourly_counts", raw=raw, counted=counted.predicate("pickup_datetime"))
        if kept:
            actuals = pinned(ACTUALS, before, settings)
            counts = counts.unionByName(
                SQL.run(spark, "kept_actuals", actuals=actuals, kept=kept.predicate("pickup_hour"))
            )
        counts = counts.persist()  # read three times (the days, the active zones, the join): raw is read once
        try:
            # the window's days first: a window without every training day is refused before anything else
            days = window_days(counts, window)
            checked = _day_checks(days, raw_snapshot, before, lookback_days)
            counts.createOrReplaceTempView("counts")
            computed = window_actuals(spark, "counts", days).persist()
            rows = computed.count()
            computed.createOrReplaceTempView("computed_actuals")
            summary = {RAW_SNAPSHOT: _version(raw_snapshot) or "", COUNTED_HOURS: counted.text()}
            if not _holds_rows(actuals_table, before, "pickup_hour", *window.hours):
                changes = RowChanges(added=rows)  # a new window: appended, no comparison needed
                with commit_properties(spark, {**summary, **changes.as_summary()}):
                    SQL.run(
                        spark,
                        "insert_actuals",
                        staging="computed_actuals",
                        raw=spark_table(ACTUALS, settings),
                        **bounds,
                    )
            else:
                changes = merge_changes(
                    spark,
                    SQL,
                    "actuals_changes",
                    "merge_actuals",
                    summary=summary,
                    insert_sql="insert_actuals",
                    staging="computed_actuals",
                    raw=spark_table(ACTUALS, settings),
                    **bounds,
                )
            computed.unpersist()
        finally:
            counts.unpersist()
        now = load_table(ACTUALS, settings).current_snapshot()
        # counted for raw's snapshot: every hour of the window but those this window judged not loaded (their
        # rows it removed, even when an earlier window had counted them), which the next window counts again;
        # a day without any trip stays so while raw does
        covered = (valid | hours) - days.judged_not_loaded()
        Coverage(now.snapshot_id if now else None, raw_snapshot.snapshot_id, covered).record(settings)
        return raw_snapshot, counted, rows, changes, checked

    before = current_snapshot(ACTUALS, settings)
    raw_snapshot, counted, rows, changes, checked = retry_on_conflict(f"computing {ACTUALS.name}", attempt)
    after = current_snapshot(ACTUALS, settings)
    checked, profiled = _checked_version(ACTUALS, after, checked, settings)
    if rows is None:
        log.info(
            "%s already holds the window as %s snapshot %s has it: nothing counted, nothing committed",
            ACTUALS.name,
            RAW.name,
            _version(raw_snapshot),
        )
    else:
        log.info(
            "%d zone-hours, %d hours counted from %s: %d added, %d changed, %d removed in %s",
            rows,
            counted.hours,
            RAW.name,
            changes.added,
            changes.changed,
            changes.removed,
            ACTUALS.name,
        )
    any_window = {
        "window_start": "2000-01-01 00:00:00",
        "window_end": "2000-01-02 00:00:00",
        "last_hour": "2000-01-01 23:00:00",
    }  # the dates change nothing about which column feeds which
    columns = column_lineage(
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
    committed = _version(after) != _version(before)
    return StepReport(
        inputs=[
            DatasetUse(
                RAW,
                version=_version(raw_snapshot),
                range=Range.of("pickup_datetime", *window.hours),
                checks=_recorded_checks(RAW, raw_snapshot, settings),
            )
        ],
        outputs=[
            DatasetUse(
                ACTUALS,
                version=_version(after),
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
            "zone_hours": rows if rows is not None else 0,
            "counted_hours": counted.hours,
            "changed": changes.written,
            "removed": changes.removed,
            **window.as_dict(),
        },
    )


@dataclass
class TrainingData:
    rows: pa.Table  # the window's actuals before the forecast origin: zone, hour, count
    as_of: dt.datetime  # the forecast origin: the training window ends there
    start: dt.datetime  # and starts here (the model's checks judge the window by them, never by its rows)
    daily_prcp_mm: dict[dt.date, float] = field(default_factory=dict)
    report: StepReport = field(default_factory=StepReport)


def training_data(
    as_of: dt.datetime, lookback_days: int, horizon_hours: int, model_name: str, settings: Settings | None = None
) -> TrainingData:
    """The lookback window of actuals; for a model that uses weather, also the rain per day."""
    settings = settings or get_settings()
    window = Window.of(as_of, lookback_days, horizon_hours)
    rows, snapshot = _scan(ACTUALS, "pickup_hour", window.start, as_of, settings)
    # columns, not Python rows: a Metaflow artifact, pickled once and read by the next steps
    training = rows.select(list(models.TRAINING_COLUMNS)) if rows is not None else models.training_table({})
    report = StepReport(
        inputs=[
            DatasetUse(
                ACTUALS,
                version=_version(snapshot),
                row_count=training.num_rows,
                range=Range.of("pickup_hour", window.start, as_of),
                checks=_recorded_checks(ACTUALS, snapshot, settings),
            )
        ],
        summary={"training_rows": training.num_rows},
    )
    prcp: dict[dt.date, float] = {}
    if models.MODELS[model_name].uses_weather:
        prcp, weather = daily_precipitation(window.start, window.end, settings)
        _refuse_days_without_weather(model_name, window, prcp)
        report.inputs.append(weather)
    return TrainingData(training, as_of, window.start, prcp, report)


def _refuse_days_without_weather(model_name: str, window: Window, prcp: dict[dt.date, float]) -> None:
    """The weather model learns from the rain of every training day and forecasts with the rain observed on
    every horizon day (docs/quality.md: a backtest's upper bound, never a guess): a day of either without
    weather is refused by name, never read as dry. A horizon that has not happened has no observed weather."""
    days = WindowDays(window, {}).days
    missing = [day for day in days if day not in prcp]
    if not missing:
        return
    training = [d for d in missing if dt.datetime.combine(d, dt.time()) < window.as_of]
    horizon = [d for d in missing if d not in training]
    months = sorted({f"{day:%Y-%m}" for day in missing})
    said = [f"the training days {_day_ranges(training)}"] if training else []
    said += [f"the horizon days {_day_ranges(horizon)}"] if horizon else []
    raise NoDataInWindow(
        f"{model_name} needs the weather observed on every day of its window, and {WEATHER.name} holds none for "
        f"{' and '.join(said)}: load {', '.join(months)} with the {jobs.INGEST_WEATHER_DATA.name} DAG first "
        f"({', '.join(json.dumps({'month': m}) for m in months)}), or train seasonal_naive"
        + (
            ". It forecasts with the rain observed on the horizon's days, so it scores a backtest, an upper "
            "bound; a horizon that has not happened yet has no observed weather"
            if horizon
            else ""
        )
    )


def daily_precipitation(start: dt.datetime, end: dt.datetime, settings: Settings, snapshot=None):
    """Mean precipitation over New York City's counties per day, and what was read (``snapshot``: as of
    that snapshot of weather_raw, default its current one)."""
    first, after = start.date(), end.date() + dt.timedelta(days=1)
    rows, snapshot = _scan(WEATHER, "date", first, after, settings, snapshot=snapshot)
    per_day: dict[dt.date, list[float]] = {}
    for r in rows.select(["date", "prcp_mm"]).to_pylist() if rows is not None else []:
        if r["prcp_mm"] is not None:
            per_day.setdefault(r["date"], []).append(r["prcp_mm"])
    read = DatasetUse(
        WEATHER,
        version=_version(snapshot),
        row_count=rows.num_rows if rows is not None else 0,
        range=Range.of("date", first, after),
        checks=_recorded_checks(WEATHER, snapshot, settings),
    )
    return {day: sum(v) / len(v) for day, v in per_day.items()}, read


@dataclass
class Trained:
    model: models.SeasonalNaive
    version: str
    report: StepReport


def train(data: TrainingData, model_name: str, version: str) -> Trained:
    """Fit the model on the training data and check it before any forecast uses it; ``version`` names this
    fit (the training step's pathspec)."""
    kind = models.MODELS[model_name]
    fitted = kind.fit(data.rows, daily_prcp_mm=data.daily_prcp_mm)
    if fell_back := getattr(fitted, "fell_back", None):  # said in the run's output and the model's DataHub record
        log.warning("%s %s: %s", model_name, version, fell_back)
    read = data.report.inputs[0]
    uses = [
        DatasetUse(ACTUALS, version=read.version, row_count=data.rows.num_rows, range=read.range, checks=read.checks)
    ]
    uses += [u for u in data.report.inputs if u.dataset == WEATHER]
    checked = _check_model(fitted, data, version, uses)
    report = StepReport(
        inputs=uses,
        outputs=[
            DatasetUse(
                MODEL,
                version=version,
                operation="CREATE",
                committed=True,
                columns=kind.trained_from(ACTUALS, WEATHER),
                checks=checked,
            )
        ],
        summary={"model": model_name, **fitted.summary()},
    )
    return Trained(fitted, version, report)


def _check_model(fitted: models.SeasonalNaive, data: TrainingData, version: str, read: list[DatasetUse]):
    """The model's checks on what it learned (one row per zone and hour, and its wet-day factor), counted
    by DuckDB over the training rows: no JVM. Every hour of the training window is expected of every zone
    it learned (the window's hours, from its bounds, not from the rows). An error stops the step before the
    model is used."""
    rows = data.rows
    learned = pa.table(
        {
            "pickup_location_id": rows.column("pickup_location_id"),
            "history_hour": rows.column("pickup_hour").cast(pa.timestamp("us")),
            "history_ride_count": rows.column("ride_count"),
            "wet_factor": pa.array([getattr(fitted, "wet_factor", None)] * rows.num_rows, pa.float64()),
        }
    )
    values = {
        # a model that learned no zone fails too: it would forecast nothing
        "zones": max(len(set(learned.column("pickup_location_id").to_pylist())), 1),
        "training_hours": int((data.as_of - data.start).total_seconds() // 3600),
    }
    counts = quality.count_arrow(learned, quality.aggregates(MODEL.checks, values))
    checked = quality.judge(MODEL.name, MODEL.checks, counts, version, values)
    quality.refuse(
        checked,
        subject=f"the {fitted.name} model {version}",
        consequence="no forecast is made from it",
        keep="Its training rows are the actuals the step read: load the months of the window, or choose another as_of_datetime.",
        examples=lambda check: [],
        checks=MODEL.checks,
        report=lambda results: StepReport(inputs=read, outputs=[DatasetUse(MODEL, version=version, checks=results)]),
    )
    return checked


@dataclass
class Forecasts:
    values: dict[tuple[int, dt.datetime], float]
    model_name: str
    model_version: str
    as_of: dt.datetime
    report: StepReport
    model_checks: list[quality.CheckResult] = field(default_factory=list)  # the model's, as its training recorded them
    lookback_days: int | None = None  # the days of actuals the model was trained on


def _model_read(trained: Trained) -> DatasetUse:
    """The model as a step that uses it read it: its version, and the results of its checks."""
    checks = [replace(r, here=False, examples=()) for u in trained.report.outputs for r in u.checks]
    return DatasetUse(MODEL, version=trained.version, checks=checks)


def predict(trained: Trained, data: TrainingData, as_of: dt.datetime, horizon_hours: int) -> Forecasts:
    """A forecast for every zone seen in training and every hour of the horizon."""
    zones = sorted(set(data.rows.column("pickup_location_id").to_pylist()))
    values = trained.model.predict(zones, Window.of(as_of, 0, horizon_hours).horizon)
    read = _model_read(trained)
    report = StepReport(inputs=[read], summary={"forecasts": len(values)})
    lookback = (data.as_of - data.start).days
    return Forecasts(values, trained.model.name, trained.version, as_of, report, read.checks, lookback)


def write_forecasts(forecasts: Forecasts, settings: Settings | None = None) -> StepReport:
    """MERGE the forecasts into the forecast table, keyed by model, origin, zone and hour: the table's rows of
    this model and origin become the run's forecasts, and no other model's or origin's rows are read or
    rewritten; only what differs is written (a run that forecasts what the table holds commits nothing)."""
    from nyc_taxi.core.spark import get_spark, start_spark

    settings = settings or get_settings()
    start_spark(settings, small=True)  # a few thousand forecasts: small data
    ensure_tables([FORECAST], settings)
    before = current_snapshot(FORECAST, settings)
    spark = get_spark(settings, small=True)
    now = dt.datetime.now(dt.UTC)
    rows = [
        (
            zone,
            hour,
            value,
            forecasts.model_name,
            forecasts.model_version,
            forecasts.as_of,
            now,
            forecasts.lookback_days,
        )
        for (zone, hour), value in sorted(forecasts.values.items())
    ]
    hours = [hour for _, hour in forecasts.values] or [forecasts.as_of]
    schema = ", ".join(f"{c.name} {c.type}" for c in FORECAST.columns)
    new = spark.createDataFrame(rows, schema)
    new.createOrReplaceTempView("new_forecasts")
    origin = {"model_name": forecasts.model_name, "as_of": forecasts.as_of}
    target = spark_table(FORECAST, settings)
    compared = _forecast_against_the_week_before(forecasts, settings)
    checked = quality.judge(
        FORECAST.name,
        FORECAST.checks,
        quality.count_arrow(compared, quality.aggregates(FORECAST.checks, {})),
        None,
        {},
    )
    quality.refuse(
        checked,
        subject=f"the forecasts of {forecasts.model_version} (as of {forecasts.as_of})",
        consequence=f"nothing was committed ({FORECAST.name} stays at snapshot {_version(before)})",
        keep="The model's checks passed: look at how it forecasts (forecast/model.py).",
        examples=lambda check: quality.failing_arrow_examples(compared, check, {}),
        checks=FORECAST.checks,
        report=lambda results: StepReport(
            inputs=[DatasetUse(MODEL, version=forecasts.model_version, checks=forecasts.model_checks)],
            outputs=[DatasetUse(FORECAST, version=_version(before), committed=False, checks=results)],
        ),
    )

    def write() -> RowChanges:
        as_of = forecasts.as_of
        if not _holds_rows(
            load_table(FORECAST, settings),
            current_snapshot(FORECAST, settings),
            "as_of_datetime",
            as_of,
            as_of + dt.timedelta(hours=1),
        ):
            added = RowChanges(added=len(rows))  # a new origin: appended, no comparison needed
            with commit_properties(spark, added.as_summary()):
                SQL.run(spark, "insert_forecasts", staging="new_forecasts", raw=target, **origin)
            return added
        return merge_changes(
            spark,
            SQL,
            "forecast_changes",
            "merge_forecasts",
            insert_sql="insert_forecasts",
            staging="new_forecasts",
            raw=target,
            **origin,
        )

    changes = retry_on_conflict(f"MERGE into {FORECAST.name}", write)
    after = current_snapshot(FORECAST, settings)
    kind = models.MODELS[forecasts.model_name]
    committed = _version(after) != _version(before)
    checked, profiled = _checked_version(FORECAST, after, checked, settings)
    return StepReport(
        inputs=[DatasetUse(MODEL, version=forecasts.model_version, checks=forecasts.model_checks)],
        outputs=[
            DatasetUse(
                FORECAST,
                version=_version(after),
                row_count=changes.written,
                committed=committed,
                columns=kind.forecast_from(MODEL),
                changes=changes if committed else None,
                range=Range.of("forecast_hour", min(hours), max(hours) + dt.timedelta(hours=1)),
                checks=checked,
                profile=profiled if committed else None,
            )
        ],
        summary={"forecast_rows": len(rows), "written": changes.written},
    )


def _forecast_against_the_week_before(forecasts: Forecasts, settings: Settings) -> pa.Table:
    """The forecast as a whole (the grain "forecast" of core/datasets.py): its rides over the horizon's first
    week at most, and the rides the actuals table holds for the same hours a week earlier (pyiceberg)."""
    start = forecasts.as_of
    end = start + dt.timedelta(hours=min(len({hour for _, hour in forecasts.values}), 168))
    predicted = sum(v for (_, hour), v in forecasts.values.items() if start <= hour < end)
    rows, _ = _scan(ACTUALS, "pickup_hour", start - models.SEASON, end - models.SEASON, settings)
    week_before = sum(rows.column("ride_count").to_pylist()) if rows is not None else 0
    return pa.table({"predicted": [float(predicted)], "week_before": [int(week_before)]})


@dataclass
class Evaluation:
    metrics: dict  # overall: the run's forecast's score (None: none of its hours has happened); per_zone
    actual: dict[tuple[int, dt.datetime], int]

    @property
    def mae(self) -> float | None:
        return self.metrics["overall"]["mae"] if self.metrics["overall"] else None

    @property
    def wape(self) -> float | None:
        return self.metrics["overall"]["wape"] if self.metrics["overall"] else None


def evaluate(forecasts: Forecasts, horizon_hours: int, scores: Scores, settings: Settings | None = None) -> Evaluation:
    """The run's forecast as its evaluation card shows it: its score (``scores``, computed by this step) and
    MAE and WAPE per zone, against the actuals the scores were computed from."""
    settings = settings or get_settings()
    window = Window.of(forecasts.as_of, 0, horizon_hours)
    read = next((u for u in scores.report.inputs if u.dataset == ACTUALS), None)
    rows = None
    if read is not None:
        snapshot = load_table(ACTUALS, settings).snapshot_by_id(int(read.version))
        rows, _ = _scan(ACTUALS, "pickup_hour", window.as_of, window.end, settings, snapshot=snapshot)
    actual = {
        (r["pickup_location_id"], r["pickup_hour"]): r["ride_count"]
        for r in (rows.to_pylist() if rows is not None else [])
    }
    score = scores.of(forecasts.model_name, forecasts.as_of)
    overall = (
        {k: score[k] for k in ("mae", "wape", "bias", "coverage")} | {"hours": score["scored_zone_hours"]}
        if score
        else None
    )
    return Evaluation({"overall": overall, "per_zone": models.evaluate(forecasts.values, actual)}, actual)


@dataclass
class Scores:
    rows: list[dict]  # the score of every kept forecast some of whose hours the actuals hold, as computed
    report: StepReport

    def of(self, model_name: str, as_of: dt.datetime) -> dict | None:
        return next((r for r in self.rows if (r["model_name"], r["as_of_datetime"]) == (model_name, as_of)), None)


def _forecast_hours(table, snapshot) -> Intervals:
    """The hours the forecast table holds forecasts of at ``snapshot``: each data file's forecast hours, from
    their bounds (Iceberg's manifests: no data read). A run's horizon is a file of its own until a MERGE
    rewrites it, so the actuals read for them are the horizons' hours, not everything between the first and
    the last."""
    files = table.inspect.files(snapshot_id=snapshot.snapshot_id).select(["readable_metrics"]).to_pylist()
    bounds = [f["readable_metrics"]["forecast_hour"] for f in files]
    return Intervals.of(
        (b["lower_bound"], b["upper_bound"] + dt.timedelta(hours=1))
        for b in bounds
        if b["lower_bound"] is not None and b["upper_bound"] is not None
    )


def score_forecasts(settings: Settings | None = None) -> Scores:
    """Score every forecast the forecast table keeps (each model and origin) against the actual rides of its
    hours that the actuals table holds (score_forecasts.sql), as the two tables are now, and MERGE the scores
    that changed into the scores table: a forecast is scored once its hours have happened, and again whenever
    its actuals change. Each score names the forecast and actuals snapshots it was computed from."""
    from nyc_taxi.core.spark import get_spark, start_spark

    settings = settings or get_settings()
    start_spark(settings, small=True)  # one row per model and origin: small data
    ensure_tables([SCORES], settings)
    before = current_snapshot(SCORES, settings)

    def attempt():
        read_at = dt.datetime.now(dt.UTC)  # before the versions are read: a score read later replaces it
        forecast_table = load_table(FORECAST, settings)
        forecast, actuals = forecast_table.current_snapshot(), current_snapshot(ACTUALS, settings)
        hours = _forecast_hours(forecast_table, forecast) if forecast and actuals else Intervals()
        if not hours:
            return forecast, actuals, hours, [], [], RowChanges()
        spark = get_spark(settings, small=True)
        scored = SQL.run(
            spark,
            "score_forecasts",
            forecast=pinned(FORECAST, forecast, settings),
            actuals=pinned(ACTUALS, actuals, settings),
            forecast_hours=hours.predicate("pickup_hour"),
            forecast_snapshot=forecast.snapshot_id,
            actuals_snapshot=actuals.snapshot_id,
            read_at_us=int(read_at.timestamp() * 1_000_000),
        ).collect()
        rows = [r.asDict() for r in scored]
        kept = [r for r in rows if r["scored_zone_hours"]]
        judged = pa.Table.from_pylist(kept, schema=iceberg_schema(SCORES).as_arrow())
        checked = quality.judge(
            SCORES.name, SCORES.checks, quality.count_arrow(judged, quality.aggregates(SCORES.checks, {})), None, {}
        )
        schema = ", ".join(f"{c.name} {c.type}" for c in SCORES.columns)
        spark.createDataFrame([tuple(r[c] for c in SCORES.column_names) for r in rows], schema).createOrReplaceTempView(
            "new_scores"
        )
        changes = merge_changes(
            spark,
            SQL,
            "score_changes",
            "merge_scores",
            insert_sql="insert_scores",
            staging="new_scores",
            raw=spark_table(SCORES, settings),
            read_at_us=int(read_at.timestamp() * 1_000_000),
        )
        return forecast, actuals, hours, kept, checked, changes

    forecast, actuals, hours, kept, checked, changes = retry_on_conflict(f"MERGE into {SCORES.name}", attempt)
    after = current_snapshot(SCORES, settings)
    committed = _version(after) != _version(before)
    checked, profiled = _checked_version(SCORES, after, checked, settings)
    inputs = []
    if forecast is not None:
        inputs.append(
            DatasetUse(
                FORECAST,
                version=_version(forecast),
                row_count=sum(r["forecast_zone_hours"] for r in kept),
                checks=_recorded_checks(FORECAST, forecast, settings),
            )
        )
    if actuals is not None and hours:
        inputs.append(
            DatasetUse(
                ACTUALS,
                version=_version(actuals),
                range=Range.of("pickup_hour", hours.spans[0][0], hours.spans[-1][1]),
                checks=_recorded_checks(ACTUALS, actuals, settings),
            )
        )
    any_hours = {"forecast_hours": "TRUE"}  # the hours change nothing about which column feeds which
    columns = column_lineage(
        SCORES,
        [
            Statement(
                SQL,
                "score_forecasts",
                reads={"forecast": "forecast", "actuals": "actuals"},
                makes="scored",
                values={**any_hours, "forecast_snapshot": 1, "actuals_snapshot": 1, "read_at_us": 0},
            ),
            Statement(
                SQL,
                "score_changes",
                reads={"staging": "scored", "raw": "target"},
                makes="changes",
                values={"read_at_us": 0},
            ),
            Statement(SQL, "merge_scores", reads={"raw": "target", "changes": "changes"}, values={"read_at_us": 0}),
        ],
        {"forecast": FORECAST, "actuals": ACTUALS},
        settings,
    )
    log.info(
        "%d forecasts scored: %d added, %d changed, %d removed in %s",
        len(kept),
        changes.added,
        changes.changed,
        changes.removed,
        SCORES.name,
    )
    return Scores(
        kept,
        StepReport(
            inputs=inputs,
            outputs=[
                DatasetUse(
                    SCORES,
                    version=_version(after),
                    row_count=changes.written,
                    committed=committed,
                    columns=columns,
                    changes=changes if committed else None,
                    checks=checked,
                    profile=profiled if committed else None,
                )
            ],
            summary={"scored": len(kept), "changed": changes.written, "removed": changes.removed},
            model_metrics={MODEL.name: comparison.featured(comparison.of_rows(kept))} if kept else {},
        ),
    )
