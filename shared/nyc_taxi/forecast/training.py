"""The training steps: the window's actuals (and its daily rain, for the weather model), and the model fitted
on them and checked before any forecast uses it."""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, field

import pyarrow as pa

from nyc_taxi.core import jobs, quality
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.forecast import model as models
from nyc_taxi.forecast.errors import NoDataInWindow
from nyc_taxi.forecast.tables import ACTUALS, MODEL, WEATHER, recorded_checks, scan, version_of
from nyc_taxi.forecast.window import Window, WindowDays, day_ranges
from nyc_taxi.lineage.write.report import DatasetUse, Range, StepReport

log = logging.getLogger(__name__)


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
    rows, snapshot = scan(ACTUALS, "pickup_hour", window.start, as_of, settings)
    # columns, not Python rows: a Metaflow artifact, pickled once and read by the next steps
    training = rows.select(list(models.TRAINING_COLUMNS)) if rows is not None else models.training_table({})
    report = StepReport(
        inputs=[
            DatasetUse(
                ACTUALS,
                version=version_of(snapshot),
                row_count=training.num_rows,
                range=Range.of("pickup_hour", window.start, as_of),
                checks=recorded_checks(ACTUALS, snapshot, settings),
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
    said = [f"the training days {day_ranges(training)}"] if training else []
    said += [f"the horizon days {day_ranges(horizon)}"] if horizon else []
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
    rows, snapshot = scan(WEATHER, "date", first, after, settings, snapshot=snapshot)
    per_day: dict[dt.date, list[float]] = {}
    for r in rows.select(["date", "prcp_mm"]).to_pylist() if rows is not None else []:
        if r["prcp_mm"] is not None:
            per_day.setdefault(r["date"], []).append(r["prcp_mm"])
    read = DatasetUse(
        WEATHER,
        version=version_of(snapshot),
        row_count=rows.num_rows if rows is not None else 0,
        range=Range.of("date", first, after),
        checks=recorded_checks(WEATHER, snapshot, settings),
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
