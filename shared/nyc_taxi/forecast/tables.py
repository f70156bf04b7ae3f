"""The flow's tables, as the registry declares them, and how a step reads one at a version: its rows in a
range at a snapshot (pyiceberg: no JVM), what its files' bounds say it may hold, and the checks its writer
recorded of that snapshot."""

from __future__ import annotations

from dataclasses import replace

from nyc_taxi.core import datasets as d
from nyc_taxi.core import quality, verdicts
from nyc_taxi.core.catalog import load_table
from nyc_taxi.core.profiles import profile
from nyc_taxi.core.settings import Settings
from nyc_taxi.core.sql import SqlFolder

SQL = SqlFolder(__file__)  # the SQL files beside this module (forecast/sql/)
RAW, WEATHER, ACTUALS, FORECAST, MODEL, SCORES = (
    d.YELLOW_TAXI_RAW,
    d.WEATHER_RAW,
    d.YELLOW_RIDES_HOURLY_ACTUALS,
    d.YELLOW_RIDES_HOURLY_FORECAST,
    d.YELLOW_RIDES_FORECAST_MODEL,
    d.YELLOW_RIDES_FORECAST_SCORES,
)


def version_of(snapshot) -> str | None:
    return str(snapshot.snapshot_id) if snapshot else None


def checked_version(table: d.Table, snapshot, checked: list[quality.CheckResult], settings: Settings):
    """The checks a step made of the rows it was about to commit, now bound to the snapshot that holds
    them, kept for the runs that read it; and that snapshot's profile."""
    if not checked or snapshot is None:
        return checked, None
    checked = [replace(r, version=str(snapshot.snapshot_id)) for r in checked]
    verdicts.record(table, snapshot.snapshot_id, checked, settings)
    return checked, profile(table, load_table(table, settings), snapshot.snapshot_id)


def recorded_checks(table: d.Table, snapshot, settings: Settings) -> list[quality.CheckResult]:
    """The check results the writer of ``snapshot`` recorded: what a run that reads it reports of it."""
    return verdicts.recorded_results(load_table(table, settings), snapshot.snapshot_id) if snapshot else []


def scan(table: d.Table, column: str, start, end, settings: Settings, iceberg=None, snapshot=None):
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


def window_rows(table, snapshot, start, end, column: str = "pickup_hour") -> list[dict]:
    """A table's rows with ``start <= column < end`` as of ``snapshot`` (pyiceberg table and snapshot)."""
    rows, _ = scan(None, column, start, end, None, iceberg=table, snapshot=snapshot)
    return rows.to_pylist() if rows is not None else []


def holds_rows(table, snapshot, column: str, start, end) -> bool:
    """Whether the table may hold rows with ``start <= column < end`` (its files' bounds, from the manifests)."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    if snapshot is None:
        return False
    condition = And(GreaterThanOrEqual(column, start.isoformat()), LessThan(column, end.isoformat()))
    return any(True for _ in table.scan(row_filter=condition, snapshot_id=snapshot.snapshot_id).plan_files())
