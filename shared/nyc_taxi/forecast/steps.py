"""The forecasting flow's data work, one function per step; each returns what it read and wrote."""

from __future__ import annotations

import datetime as dt
import logging

from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

from nyc_taxi import registry, sql
from nyc_taxi.catalog import load_catalog
from nyc_taxi.commits import retry_on_conflict
from nyc_taxi.ingest.common import current_snapshot_id, upsert_changes
from nyc_taxi.lineage.report import DatasetUse, StepReport
from nyc_taxi.settings import Settings, get_settings
from nyc_taxi.spark import get_spark
from nyc_taxi.tables import ensure_tables

log = logging.getLogger(__name__)
RAW, WEATHER, ACTUALS, FORECAST = (registry.YELLOW_TAXI_RAW, registry.WEATHER_RAW,
                                   registry.YELLOW_RIDES_HOURLY_ACTUALS, registry.YELLOW_RIDES_HOURLY_FORECAST)


class NoDataInWindow(ValueError):
    """The requested window holds no trips: nothing to train on."""


def parse_as_of(text: str) -> dt.datetime:
    """`YYYY-MM-DDTHH[:MM]` New York local wall-clock time, truncated to the hour."""
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"as_of_datetime {text!r} is not an ISO date-time such as 2024-02-15T00:00") from None
    if value.tzinfo is not None:
        raise ValueError(f"as_of_datetime {text!r} must be New York local wall-clock time, without a UTC offset")
    return value.replace(minute=0, second=0, microsecond=0)


def windows(as_of: dt.datetime, lookback_days: int, horizon_hours: int) -> dict[str, dt.datetime]:
    return {"train_start": as_of - dt.timedelta(days=lookback_days), "as_of": as_of,
            "horizon_end": as_of + dt.timedelta(hours=horizon_hours)}


def horizon_hours(as_of: dt.datetime, horizon_hours: int) -> list[dt.datetime]:
    return [as_of + dt.timedelta(hours=h) for h in range(horizon_hours)]


def _scan(table: registry.Table, column: str, start: dt.datetime, end: dt.datetime, settings: Settings):
    iceberg = load_catalog(settings).load_table(table.identifier(settings))
    snapshot = iceberg.current_snapshot()
    rows = iceberg.scan(row_filter=And(GreaterThanOrEqual(column, start.isoformat()), LessThan(column, end.isoformat()))).to_arrow()
    return rows, snapshot.snapshot_id if snapshot else None


def compute_actuals(as_of: dt.datetime, lookback_days: int, horizon_hours: int, settings: Settings | None = None) -> StepReport:
    """Hourly counts for the training window and the horizon (so a backtest can be evaluated)."""
    settings = settings or get_settings()
    spark = get_spark(settings)
    ensure_tables(spark, [ACTUALS], settings)
    w = windows(as_of, lookback_days, horizon_hours)
    computed = sql.run(spark, "hourly_actuals", raw=RAW.spark_name(settings), window_start=w["train_start"],
                       window_end=w["horizon_end"], last_hour=w["horizon_end"] - dt.timedelta(hours=1)).persist()
    try:
        rows = computed.count()
        if rows == 0:
            raise NoDataInWindow(
                f"no yellow taxi trips in {RAW.name} between {w['train_start']} and {w['horizon_end']} "
                f"(as_of_datetime {as_of.isoformat()}, lookback_days {lookback_days}): load those months with the "
                "ingest_yellow_taxi_data DAG first, or choose an as_of_datetime inside the loaded data")
        computed.createOrReplaceTempView("computed_actuals")
        changed = upsert_changes(spark, "actuals_changes", "merge_actuals", staging="computed_actuals",
                                 raw=ACTUALS.spark_name(settings))
    finally:
        computed.unpersist()
    log.info("%d zone-hours computed, %d new or changed in %s", rows, changed, ACTUALS.name)
    return StepReport(
        inputs=[DatasetUse(RAW, snapshot_id=current_snapshot_id(spark, RAW.spark_name(settings)))],
        outputs=[DatasetUse(ACTUALS, snapshot_id=current_snapshot_id(spark, ACTUALS.spark_name(settings)), row_count=changed)],
        summary={"zone_hours": rows, "changed": changed, **{k: v.isoformat() for k, v in w.items()}})


def training_data(as_of: dt.datetime, lookback_days: int, settings: Settings | None = None):
    settings = settings or get_settings()
    w = windows(as_of, lookback_days, 0)
    rows, snapshot = _scan(ACTUALS, "pickup_hour", w["train_start"], as_of, settings)
    training = rows.select(["pickup_location_id", "pickup_hour", "ride_count"]).to_pylist()
    return training, StepReport(inputs=[DatasetUse(ACTUALS, snapshot_id=snapshot, row_count=len(training))],
                                summary={"training_rows": len(training)})


def daily_precipitation(start: dt.datetime, end: dt.datetime, settings: Settings | None = None):
    """Mean precipitation over New York City's counties per day, and what was read."""
    settings = settings or get_settings()
    rows, snapshot = _scan(WEATHER, "date", start.date(), end.date() + dt.timedelta(days=1), settings)
    per_day: dict[dt.date, list[float]] = {}
    for r in rows.select(["date", "prcp_mm"]).to_pylist():
        if r["prcp_mm"] is not None:
            per_day.setdefault(r["date"], []).append(r["prcp_mm"])
    return {d: sum(v) / len(v) for d, v in per_day.items()}, DatasetUse(WEATHER, snapshot_id=snapshot, row_count=rows.num_rows)


def observed(as_of: dt.datetime, horizon_hours: int, settings: Settings | None = None):
    """Actual counts for the forecast hours (a backtest), and what was read."""
    settings = settings or get_settings()
    w = windows(as_of, 0, horizon_hours)
    rows, snapshot = _scan(ACTUALS, "pickup_hour", as_of, w["horizon_end"], settings)
    actual = {(r["pickup_location_id"], r["pickup_hour"]): r["ride_count"] for r in rows.to_pylist()}
    return actual, DatasetUse(ACTUALS, snapshot_id=snapshot, row_count=len(actual))


def write_forecasts(forecasts: dict, model_name: str, model_version: str, as_of: dt.datetime,
                    settings: Settings | None = None) -> StepReport:
    settings = settings or get_settings()
    spark = get_spark(settings)
    ensure_tables(spark, [FORECAST], settings)
    now = dt.datetime.now(dt.timezone.utc)
    rows = [(zone, hour, value, model_name, model_version, as_of, now) for (zone, hour), value in sorted(forecasts.items())]
    schema = ", ".join(f"{c.name} {c.type}" for c in FORECAST.columns)
    spark.createDataFrame(rows, schema).createOrReplaceTempView("new_forecasts")
    retry_on_conflict(f"MERGE into {FORECAST.name}", lambda: sql.run(
        spark, "merge_forecasts", forecast=FORECAST.spark_name(settings), forecasts="new_forecasts"))
    return StepReport(
        outputs=[DatasetUse(FORECAST, snapshot_id=current_snapshot_id(spark, FORECAST.spark_name(settings)), row_count=len(rows))],
        summary={"forecast_rows": len(rows)})
