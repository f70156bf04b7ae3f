"""Every kept forecast scored against what happened (MAE, WAPE, bias, coverage) into the scores table, and a
run's own forecast as its evaluation card shows it."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

import pyarrow as pa

from nyc_taxi.core import comparison, quality
from nyc_taxi.core.catalog import current_snapshot, load_table
from nyc_taxi.core.commits import retry_on_conflict
from nyc_taxi.core.intervals import Intervals
from nyc_taxi.core.naming import spark_table
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.core.tables import ensure_tables, iceberg_schema, pinned
from nyc_taxi.core.upserts import RowChanges, merge_changes
from nyc_taxi.forecast import model as models
from nyc_taxi.forecast.forecasts import Forecasts
from nyc_taxi.forecast.tables import (
    ACTUALS,
    FORECAST,
    MODEL,
    SCORES,
    SQL,
    checked_version,
    recorded_checks,
    scan,
    version_of,
)
from nyc_taxi.forecast.window import Window
from nyc_taxi.lineage.write.columns import Statement, column_lineage
from nyc_taxi.lineage.write.report import DatasetUse, Range, StepReport

log = logging.getLogger(__name__)


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
        rows, _ = scan(ACTUALS, "pickup_hour", window.as_of, window.end, settings, snapshot=snapshot)
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
    committed = version_of(after) != version_of(before)
    checked, profiled = checked_version(SCORES, after, checked, settings)
    inputs = []
    if forecast is not None:
        inputs.append(
            DatasetUse(
                FORECAST,
                version=version_of(forecast),
                row_count=sum(r["forecast_zone_hours"] for r in kept),
                checks=recorded_checks(FORECAST, forecast, settings),
            )
        )
    if actuals is not None and hours:
        inputs.append(
            DatasetUse(
                ACTUALS,
                version=version_of(actuals),
                range=Range.of("pickup_hour", hours.spans[0][0], hours.spans[-1][1]),
                checks=recorded_checks(ACTUALS, actuals, settings),
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
                    version=version_of(after),
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
