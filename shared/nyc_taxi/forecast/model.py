"""Forecasting models: seasonal naive (same hour one week earlier) and a weather-adjusted variant.

Each model declares, next to the code that computes them, where its columns come from: what fitting
learns from the actuals (``trained_from``) and how a forecast is computed from what it learned
(``forecast_from``). That is the column lineage through the model.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from nyc_taxi.core.datasets import Model, Table
from nyc_taxi.core.jobs import MODEL
from nyc_taxi.lineage.write.report import ColumnLineage, ColumnSource

SEASON = dt.timedelta(hours=168)
TRAINING_COLUMNS = ("pickup_location_id", "pickup_hour", "ride_count")


def history_of(training: pa.Table) -> dict[tuple[int, dt.datetime], int]:
    """The training rows (the actuals' zone, hour and count columns) as zone-hour -> count. Through
    NumPy: Python objects from its arrays come a twentieth of the time Arrow's own conversion takes."""
    types = (pa.int64(), pa.timestamp("us"), pa.int64())
    zones, hours, counts = (
        training.column(c).cast(t).to_numpy().tolist() for c, t in zip(TRAINING_COLUMNS, types, strict=True)
    )
    return dict(zip(zip(zones, hours, strict=True), counts, strict=True))


def training_table(rows: dict[tuple[int, dt.datetime], int]) -> pa.Table:
    """Zone-hour -> count as training rows."""
    keys = list(rows)
    return pa.table(
        {
            "pickup_location_id": pa.array([z for z, _ in keys], pa.int32()),
            "pickup_hour": pa.array([h for _, h in keys], pa.timestamp("us")),
            "ride_count": pa.array(list(rows.values()), pa.int64()),
        }
    )


WET_DAY_MM = 1.0  # a day with at least this much precipitation (NYC average) counts as wet


@dataclass
class SeasonalNaive:
    """Forecast = the count of the same zone and hour 168 hours earlier (zero where there is none)."""

    history: dict[tuple[int, dt.datetime], int] = field(default_factory=dict)
    name: str = "seasonal_naive"
    uses_weather = False

    @classmethod
    def fit(cls, training: pa.Table, **_) -> SeasonalNaive:
        return cls(history=history_of(training))

    # A fitted model is a Metaflow artifact, pickled by the step that trains it and read by the next ones:
    # its history as three arrays pickles in a fraction of the time a dict of 190,000 keyed entries takes.
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        keys = list(self.history)
        state["history"] = (
            np.array([z for z, _ in keys], dtype=np.int32),
            pa.array([h for _, h in keys], pa.timestamp("us")).to_numpy(),  # NumPy's own: 13 times slower
            np.array(list(self.history.values()), dtype=np.int64),
        )
        return state

    def __setstate__(self, state: dict) -> None:
        zones, hours, counts = state["history"]
        state["history"] = dict(zip(zip(zones.tolist(), hours.tolist(), strict=True), counts.tolist(), strict=True))
        self.__dict__.update(state)

    @staticmethod
    def trained_from(actuals: Table, weather: Table) -> ColumnLineage:
        """The model's columns, from the training data: it keeps the actuals as its history."""
        return {
            "pickup_location_id": (ColumnSource(actuals, "pickup_location_id"),),
            "history_hour": (ColumnSource(actuals, "pickup_hour"),),
            "history_ride_count": (ColumnSource(actuals, "ride_count"),),
        }

    @staticmethod
    def forecast_from(model: Model) -> ColumnLineage:
        """A forecast's columns, from the model: the count of the same zone and hour a week earlier."""
        return {
            "pickup_location_id": (ColumnSource(model, "pickup_location_id"),),
            "forecast_hour": (ColumnSource(model, "history_hour", "TRANSFORMATION", description="+ 168 hours"),),
            "predicted_ride_count": (
                ColumnSource(model, "history_ride_count", "TRANSFORMATION", description="the count 168 hours earlier"),
            ),
        }

    def summary(self) -> dict:
        return {"history_hours": len(self.history)}

    def adjustment(self, hour: dt.datetime) -> float:
        return 1.0

    def predict(self, zones: list[int], hours: list[dt.datetime]) -> dict[tuple[int, dt.datetime], float]:
        """Hours beyond one season ahead use the model's own earlier forecasts."""
        known: dict[tuple[int, dt.datetime], float] = dict(self.history)
        out = {}
        for hour in sorted(hours):
            for zone in zones:
                base = known.get((zone, hour - SEASON), 0)
                out[(zone, hour)] = known[(zone, hour)] = float(base) * self.adjustment(hour)
        return out


@dataclass
class WeatherAdjusted(SeasonalNaive):
    """Seasonal naive scaled on wet days by the ratio actual / seasonal-naive fitted on the training
    window's wet days relative to its dry days. A horizon day's rain is the rain observed that day
    (weather_raw): the model knows tomorrow's weather, so its scores are an upper bound of what a
    forecast made at the origin could do (``UPPER_BOUND``); a day without observed weather is refused
    before the model is fitted (``forecast/training.py``). A window without both a wet and a dry day teaches
    no factor: ``wet_factor`` None, and the model forecasts as seasonal naive and says so (``fell_back``)."""

    wet_factor: float | None = None
    daily_prcp_mm: dict[dt.date, float] = field(default_factory=dict)
    name: str = "weather_adjusted"
    uses_weather = True

    @staticmethod
    def trained_from(actuals: Table, weather: Table) -> ColumnLineage:
        """As seasonal naive, plus the wet-day factor fitted from the counts and the rain."""
        return {
            **SeasonalNaive.trained_from(actuals, weather),
            "wet_factor": (
                ColumnSource(actuals, "ride_count", "AGGREGATION", description="ratio on wet vs dry days"),
                ColumnSource(actuals, "pickup_hour", "GROUP_BY", indirect=True),
                ColumnSource(weather, "prcp_mm", "AGGREGATION", description="mean over NYC's counties per day"),
                ColumnSource(weather, "date", "JOIN", indirect=True),
            ),
            "daily_prcp_mm": (
                ColumnSource(weather, "prcp_mm", "AGGREGATION", description="mean over NYC's counties"),
                ColumnSource(weather, "date", "GROUP_BY", indirect=True),
            ),
        }

    @staticmethod
    def forecast_from(model: Model) -> ColumnLineage:
        """As seasonal naive, scaled by the wet-day factor on wet days."""
        columns = SeasonalNaive.forecast_from(model)
        return {
            **columns,
            "predicted_ride_count": (
                *columns["predicted_ride_count"],
                ColumnSource(model, "wet_factor", "TRANSFORMATION", description="x wet_factor on wet days"),
                ColumnSource(model, "daily_prcp_mm", "CONDITIONAL", indirect=True, description="is the day wet"),
            ),
        }

    @property
    def fell_back(self) -> str | None:
        """Why the model forecasts as seasonal naive, when it does."""
        if self.wet_factor is not None:
            return None
        return "the training window has no wet day or no dry day to learn from: no wet factor, seasonal naive"

    def summary(self) -> dict:
        return {
            **super().summary(),
            "wet_factor": self.wet_factor,
            **({"fell_back": self.fell_back} if self.fell_back else {}),
            "horizon_weather": "observed (an upper bound)",
        }

    @classmethod
    def fit(cls, training: pa.Table, daily_prcp_mm: dict[dt.date, float] | None = None, **_) -> WeatherAdjusted:
        daily_prcp_mm = daily_prcp_mm or {}
        history = history_of(training)
        sums = {True: [0.0, 0.0], False: [0.0, 0.0]}  # wet?: [actual, seasonal naive]
        for (zone, hour), actual in history.items():
            base = history.get((zone, hour - SEASON))
            prcp = daily_prcp_mm.get(hour.date())
            if base is None or prcp is None:
                continue
            sums[prcp >= WET_DAY_MM][0] += actual
            sums[prcp >= WET_DAY_MM][1] += base
        # both kinds of day, each with demand a week before: else there is nothing to learn a ratio from
        learned = all(b > 0 for _, b in sums.values())
        wet_factor = (sums[True][0] / sums[True][1]) / (sums[False][0] / sums[False][1]) if learned else None
        return cls(history=history, wet_factor=wet_factor, daily_prcp_mm=daily_prcp_mm)

    def adjustment(self, hour: dt.datetime) -> float:
        if self.wet_factor is None:
            return 1.0
        return self.wet_factor if self.daily_prcp_mm[hour.date()] >= WET_DAY_MM else 1.0


MODELS = {"seasonal_naive": SeasonalNaive, "weather_adjusted": WeatherAdjusted}
assert set(MODELS) == set(MODEL.choices)


def evaluate(forecasts: dict[tuple[int, dt.datetime], float], actuals: dict[tuple[int, dt.datetime], int]) -> dict:
    """MAE and WAPE per zone over the forecast hours the actuals hold, as the scores count them
    (score_forecasts.sql): a zone without a row in such an hour had no pickup, 0 rides."""
    held = {hour for _, hour in actuals}
    per_zone: dict[int, list[tuple[float, int]]] = {}
    for (zone, hour), predicted in forecasts.items():
        if hour in held:
            per_zone.setdefault(zone, []).append((predicted, actuals.get((zone, hour), 0)))

    def scores(pairs):
        errors = sum(abs(p - a) for p, a in pairs)
        total = sum(a for _, a in pairs)
        return {"mae": errors / len(pairs), "wape": errors / total if total else None, "hours": len(pairs)}

    return {zone: scores(pairs) for zone, pairs in sorted(per_zone.items())}
