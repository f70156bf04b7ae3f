"""The forecast of every zone and hour of the horizon, and its MERGE into the forecast table, kept beside every
other model's and origin's."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

import pyarrow as pa

from nyc_taxi.core import quality
from nyc_taxi.core.catalog import current_snapshot, load_table
from nyc_taxi.core.commits import retry_on_conflict
from nyc_taxi.core.naming import spark_table
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.core.snapshots import commit_properties
from nyc_taxi.core.tables import ensure_tables
from nyc_taxi.core.upserts import RowChanges, merge_changes
from nyc_taxi.forecast import model as models
from nyc_taxi.forecast.tables import ACTUALS, FORECAST, MODEL, SQL, checked_version, holds_rows, scan, version_of
from nyc_taxi.forecast.training import Trained, TrainingData
from nyc_taxi.forecast.window import Window
from nyc_taxi.lineage.write.report import DatasetUse, Range, StepReport


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
        consequence=f"nothing was committed ({FORECAST.name} stays at snapshot {version_of(before)})",
        keep="The model's checks passed: look at how it forecasts (forecast/model.py).",
        examples=lambda check: quality.failing_arrow_examples(compared, check, {}),
        checks=FORECAST.checks,
        report=lambda results: StepReport(
            inputs=[DatasetUse(MODEL, version=forecasts.model_version, checks=forecasts.model_checks)],
            outputs=[DatasetUse(FORECAST, version=version_of(before), committed=False, checks=results)],
        ),
    )

    def write() -> RowChanges:
        as_of = forecasts.as_of
        if not holds_rows(
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
    committed = version_of(after) != version_of(before)
    checked, profiled = checked_version(FORECAST, after, checked, settings)
    return StepReport(
        inputs=[DatasetUse(MODEL, version=forecasts.model_version, checks=forecasts.model_checks)],
        outputs=[
            DatasetUse(
                FORECAST,
                version=version_of(after),
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
    rows, _ = scan(ACTUALS, "pickup_hour", start - models.SEASON, end - models.SEASON, settings)
    week_before = sum(rows.column("ride_count").to_pylist()) if rows is not None else 0
    return pa.table({"predicted": [float(predicted)], "week_before": [int(week_before)]})
