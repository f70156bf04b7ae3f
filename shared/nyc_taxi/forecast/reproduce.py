"""A flow run's outputs computed again from the input versions its lineage recorded, and compared with what
the run wrote (`bash run lineage --reproduce`).

The window's actuals are counted whole from ``yellow_taxi_raw`` as of the snapshot the run read (Iceberg
time travel, the same SQL files as the flow); the model is fitted again on them (and, for the weather
model, on ``weather_raw`` as of the snapshot the run read) with the run's parameters; its forecasts are
compared with the forecast table as of the snapshot the run wrote, the actuals with the actuals table as
of its. Scratch space only: Spark's temporary views and Python; no table is written. The model is checked
through its forecasts (it lives in Metaflow's datastore, as the run's artifact).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from nyc_taxi.core.catalog import load_table
from nyc_taxi.core.intervals import Intervals
from nyc_taxi.core.reproduction import Comparison, Unreproducible
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.core.tables import pinned
from nyc_taxi.forecast import model as models
from nyc_taxi.forecast.actuals import window_actuals
from nyc_taxi.forecast.tables import ACTUALS, FORECAST, RAW, SQL, WEATHER, window_rows
from nyc_taxi.forecast.training import daily_precipitation
from nyc_taxi.forecast.window import Window, window_days


@dataclass
class Recorded:
    """What the lineage recorded of a flow run: its parameters and the versions it read and wrote."""

    as_of: dt.datetime
    lookback_days: int
    horizon_hours: int
    model: str
    raw_snapshot: int
    actuals_snapshot: int
    model_version: str
    forecast_snapshot: int
    weather_snapshot: int | None = None


def _snapshot(table, dataset, snapshot_id: int | None):
    if snapshot_id is None:
        raise Unreproducible(f"the lineage records no version of {dataset.name} for this run")
    snapshot = table.snapshot_by_id(int(snapshot_id))
    if snapshot is None:
        kept = sorted(s.timestamp_ms for s in table.snapshots())
        since = dt.datetime.fromtimestamp(kept[0] / 1000, dt.UTC).isoformat(timespec="seconds") if kept else "nothing"
        raise Unreproducible(
            f"{dataset.name} snapshot {snapshot_id}, which the run read or wrote, has been expired "
            f"(the table keeps snapshots since {since}): what it held can no longer be read"
        )
    return snapshot


def reproduce(run: Recorded, settings: Settings | None = None) -> list[Comparison]:
    """Compare each output of the run with its recomputation; raises Unreproducible when an input is gone."""
    from nyc_taxi.core.spark import get_spark

    settings = settings or get_settings()
    window = Window.of(run.as_of, run.lookback_days, run.horizon_hours)
    raw_table, actuals_table, forecast_table = (load_table(t, settings) for t in (RAW, ACTUALS, FORECAST))
    raw = _snapshot(raw_table, RAW, run.raw_snapshot)
    actuals = _snapshot(actuals_table, ACTUALS, run.actuals_snapshot)
    forecast = _snapshot(forecast_table, FORECAST, run.forecast_snapshot)
    weather = None
    if models.MODELS[run.model].uses_weather:
        weather = _snapshot(load_table(WEATHER, settings), WEATHER, run.weather_snapshot)

    spark = get_spark(settings, small=True)
    counted = Intervals.of([window.hours]).predicate("pickup_datetime")
    counts = SQL.run(spark, "hourly_counts", raw=pinned(RAW, raw, settings), counted=counted)
    counts.createOrReplaceTempView("reproduced_counts")
    days = window_days(counts, window)
    recomputed_actuals = {
        (r.pickup_location_id, r.pickup_hour): r.ride_count
        for r in window_actuals(spark, "reproduced_counts", days).collect()
    }
    written = window_rows(actuals_table, actuals, window.start, window.end)
    comparisons = [
        Comparison.of(
            ACTUALS.name,
            actuals.snapshot_id,
            {(r["pickup_location_id"], r["pickup_hour"]): r["ride_count"] for r in written},
            recomputed_actuals,
        )
    ]

    training = models.training_table({k: n for k, n in recomputed_actuals.items() if k[1] < window.as_of})
    prcp = daily_precipitation(window.start, window.end, settings, snapshot=weather)[0] if weather else {}
    fitted = models.MODELS[run.model].fit(training, daily_prcp_mm=prcp)
    zones = sorted(set(training.column("pickup_location_id").to_pylist()))
    predicted = fitted.predict(zones, window.horizon)
    held = window_rows(forecast_table, forecast, window.as_of, window.end, column="forecast_hour")
    comparisons.append(
        Comparison.of(
            FORECAST.name,
            forecast.snapshot_id,
            {
                (r["pickup_location_id"], r["forecast_hour"]): r["predicted_ride_count"]
                for r in held
                if r["model_version"] == run.model_version
            },
            predicted,
        )
    )
    return comparisons
