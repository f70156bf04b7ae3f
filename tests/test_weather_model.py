"""The weather-adjusted model (forecast/model.py) learns a wet-day factor only from a window with both wet
and dry days, and says when it cannot (it forecasts as seasonal naive then); it never reads a day without
weather as dry. The refusal of a window without weather, on the real path: test_training_flow.py."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from nyc_taxi.forecast import model as models

AS_OF = dt.datetime(2024, 2, 15)
DAYS = 14


def _training(rides) -> tuple:
    start = AS_OF - dt.timedelta(days=DAYS)
    hours = [start + dt.timedelta(hours=h) for h in range(DAYS * 24)]
    rows = {(zone, hour): rides(zone, hour) for zone in (1, 2) for hour in hours}
    return models.training_table(rows), rows


def _rain(wet) -> dict[dt.date, float]:
    first = (AS_OF - dt.timedelta(days=DAYS)).date()
    return {first + dt.timedelta(days=n): (5.0 if wet(first + dt.timedelta(days=n)) else 0.0) for n in range(DAYS + 2)}


@pytest.mark.parametrize("weather", ["dry", "wet"])
def test_a_window_of_one_kind_of_day_teaches_no_factor_and_forecasts_as_seasonal_naive_saying_so(weather):
    table, _ = _training(lambda zone, hour: 3 + zone + hour.hour % 5)
    rain = _rain(lambda day: weather == "wet")
    fitted = models.WeatherAdjusted.fit(table, daily_prcp_mm=rain)
    assert fitted.wet_factor is None and "no wet day or no dry day" in fitted.fell_back
    summary = fitted.summary()
    assert summary["wet_factor"] is None and summary["fell_back"] == fitted.fell_back
    horizon = [AS_OF + dt.timedelta(hours=h) for h in range(24)]
    naive = models.SeasonalNaive.fit(table).predict([1, 2], horizon)
    assert fitted.predict([1, 2], horizon) == naive


def test_a_window_of_wet_and_dry_days_learns_their_ratio_and_applies_it_to_wet_horizon_days():
    wet = lambda day: day.day % 3 == 0  # noqa: E731
    table, rows = _training(lambda zone, hour: 9 if wet(hour.date()) else 3)
    fitted = models.WeatherAdjusted.fit(table, daily_prcp_mm=_rain(wet))
    # independent: the rides against a week earlier's, on wet days over dry days
    week = dt.timedelta(hours=168)
    sums = {True: [0, 0], False: [0, 0]}
    for (zone, hour), count in rows.items():
        if (zone, hour - week) in rows:
            sums[wet(hour.date())][0] += count
            sums[wet(hour.date())][1] += rows[(zone, hour - week)]
    expected = (sums[True][0] / sums[True][1]) / (sums[False][0] / sums[False][1])
    assert fitted.wet_factor == pytest.approx(expected) and fitted.fell_back is None
    day = AS_OF.date()
    hour = AS_OF
    assert fitted.adjustment(hour) == (fitted.wet_factor if wet(day) else 1.0)


def test_a_horizon_day_without_weather_is_never_read_as_dry():
    wet = lambda day: day.day % 2 == 0  # noqa: E731
    table, _ = _training(lambda zone, hour: 9 if wet(hour.date()) else 3)
    rain = {day: mm for day, mm in _rain(wet).items() if day < AS_OF.date()}  # nothing for the horizon
    fitted = models.WeatherAdjusted.fit(table, daily_prcp_mm=rain)
    assert fitted.wet_factor is not None  # a factor learned: the horizon's day would be read for rain
    with pytest.raises(KeyError, match=re.escape(repr(AS_OF.date()))):  # that day, not a dry default
        fitted.predict([1], [AS_OF])
    # the flow refuses such a day by name before the model is fitted:
    # tests/test_training_flow.py::test_the_weather_model_is_refused_a_day_without_observed_weather_naming_it


def test_a_fit_that_fell_back_says_so_in_its_datahub_model_record(tmp_path):
    """The training step's report of a weather model that learned no factor: the model's DataHub record
    carries what the fit said of itself (no wet factor, the fall back to seasonal naive)."""
    from nyc_taxi.core import datasets as d
    from nyc_taxi.core.jobs import TRAINING_FLOW
    from nyc_taxi.core.settings import Settings
    from nyc_taxi.forecast import steps
    from nyc_taxi.forecast.training import TrainingData
    from nyc_taxi.lineage.write import datahub
    from nyc_taxi.lineage.write.report import DatasetUse, StepReport

    table, _ = _training(lambda zone, hour: 3 + zone + hour.hour % 5)
    start = AS_OF - dt.timedelta(days=DAYS)
    read = DatasetUse(d.YELLOW_RIDES_HOURLY_ACTUALS, version="1")
    data = TrainingData(table, AS_OF, start, _rain(lambda day: False), StepReport(inputs=[read]))
    trained = steps.train(data, "weather_adjusted", "TrainForecastModelFlow/1/train_forecasting_model/2")
    job = next(j for j in TRAINING_FLOW.jobs if d.YELLOW_RIDES_FORECAST_MODEL in j.writes)
    step = datahub.StepRun(TRAINING_FLOW, job, "TrainForecastModelFlow/1/train_forecasting_model/2", 1, "v1")
    settings = Settings(_env_file=None, state_dir=tmp_path)
    [properties] = [
        r.aspect for r in datahub.model_records(step, trained.report, settings) if r.aspectName == "mlModelProperties"
    ]
    said = properties.customProperties
    assert said["fell_back"] == trained.model.fell_back and said["wet_factor"] == "null", said
    assert said["model"] == "weather_adjusted" and said["horizon_weather"] == "observed (an upper bound)"
