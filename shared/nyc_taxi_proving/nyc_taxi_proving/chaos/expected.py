"""What the mission must leave in the tables, computed from the published fixture files with none of the
project's data work: pyarrow over the TLC parquet files (cast as the registry declares the columns), plain
Python over NOAA's CSV files, and the forecasts counted and repeated by hand (seasonal naive: the same
zone and hour a week earlier; weather-adjusted: scaled on wet days by the ratio fitted on the training
window). Every run of a chaos run, the clean one first, is compared with it: a clean run wrong in the same
way as a faulty one does not pass.

The suite's chaos test compares with its own independent computation (``tests/expected_loads.py``, from
columns written out by hand): two oracles, neither the code under test.
"""

from __future__ import annotations

import calendar
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from nyc_taxi.core import datasets as d

NYC_COUNTIES = ("30005", "30047", "30061", "30081", "30085")  # NOAA state 30 (New York): the five boroughs
WEATHER_VARIABLES = {"tmax": "tmax_c", "tmin": "tmin_c", "tavg": "tavg_c", "prcp": "prcp_mm"}
WEEK = dt.timedelta(hours=168)
WET_MM = 1.0
LOOKBACK, HORIZON = dt.timedelta(days=28), 24  # the training DAG's defaults (core/jobs.py)


def _arrow_type(declared: str):
    import pyarrow as pa

    return {
        "INT": pa.int32(),
        "BIGINT": pa.int64(),
        "DOUBLE": pa.float64(),
        "STRING": pa.string(),
        "TIMESTAMP_NTZ": pa.timestamp("us"),
    }[declared]


def taxi_rows(path: Path) -> list[tuple]:
    """Every trip of a TLC file as raw must hold it (its file, then each trip column), sorted."""
    import pyarrow.parquet as pq

    source = pq.read_table(path)
    by_name = {name.lower(): name for name in source.column_names}
    columns = [[path.name] * source.num_rows]
    for column in d.YELLOW_TRIP_COLUMNS:
        name = by_name.get(column.source.lower())
        values = source[name].cast(_arrow_type(column.type)) if name else None
        columns.append(values.to_pylist() if values is not None else [None] * source.num_rows)
    return sorted(zip(*columns, strict=True), key=row_order)


def row_order(row: tuple) -> tuple:
    return tuple((value is None, value if value is not None else 0) for value in row)


def weather_rows(site: Path, year: int, month: int) -> dict[tuple[str, dt.date], dict[str, float]]:
    """New York City's county-days of a month's four final files: every real day, missing values left out."""
    days = calendar.monthrange(year, month)[1]
    found: dict[tuple[str, dt.date], dict[str, float]] = {}
    for variable, column in WEATHER_VARIABLES.items():
        name = f"pub/data/daily-grids/v1-0-0/averages/{year}/{variable}-{year}{month:02d}-cty-scaled.csv"
        for line in (site / name).read_text().split("\n"):
            fields = line.split(",")
            if len(fields) < 6 or fields[1] not in NYC_COUNTIES:
                continue
            for day, value in enumerate(fields[6 : 6 + days], start=1):
                if value.strip() != "-999.99":
                    found.setdefault((fields[1], dt.date(year, month, day)), {})[column] = float(value)
    return found


def hourly_rides(files: list[Path], start: dt.datetime, end: dt.datetime) -> dict[tuple[int, dt.datetime], int]:
    """Rides per zone (1..265) and hour in [start, end), zero for every hour of a zone with a ride in it, on
    the days of the window that have a ride (a day without one is not loaded: it gets no hour)."""
    import pyarrow.parquet as pq

    counts: dict[tuple[int, dt.datetime], int] = {}
    for path in files:
        trips = pq.read_table(path, columns=["tpep_pickup_datetime", "PULocationID"]).to_pydict()
        for pickup, zone in zip(trips["tpep_pickup_datetime"], trips["PULocationID"], strict=True):
            if pickup is not None and start <= pickup < end and 1 <= zone <= 265:
                key = (zone, pickup.replace(minute=0, second=0, microsecond=0))
                counts[key] = counts.get(key, 0) + 1
    days = {hour.date() for _, hour in counts}
    hours = [start + dt.timedelta(hours=h) for h in range(int((end - start).total_seconds() // 3600))]
    hours = [hour for hour in hours if hour.date() in days]
    return {(zone, hour): counts.get((zone, hour), 0) for zone in {z for z, _ in counts} for hour in hours}


def seasonal_naive(counts: dict, as_of: dt.datetime) -> dict[tuple[int, dt.datetime], float]:
    horizon = [as_of + dt.timedelta(hours=h) for h in range(HORIZON)]
    zones = {zone for zone, hour in counts if hour < as_of}
    return {(zone, hour): float(counts[(zone, hour - WEEK)]) for zone in zones for hour in horizon}


def weather_adjusted(counts: dict, rain: dict[dt.date, float], as_of: dt.datetime) -> dict:
    """A week earlier's count, times (actual / a week earlier on wet training days) over (the same on dry
    days) when the forecast day is wet."""
    training = {key: n for key, n in counts.items() if key[1] < as_of}
    sums = {True: [0, 0], False: [0, 0]}
    for (zone, hour), n in training.items():
        if (zone, hour - WEEK) in training and hour.date() in rain:
            wet = rain[hour.date()] >= WET_MM
            sums[wet][0] += n
            sums[wet][1] += training[(zone, hour - WEEK)]
    ratio = {wet: (a / b if b else 1.0) for wet, (a, b) in sums.items()}
    factor = ratio[True] / ratio[False] if ratio[False] else 1.0
    return {
        key: value * (factor if rain.get(key[1].date(), 0.0) >= WET_MM else 1.0)
        for key, value in seasonal_naive(counts, as_of).items()
    }


def daily_rain(site: Path, months) -> dict[dt.date, float]:
    """New York City's mean precipitation per day, over its counties."""
    per_day: dict[dt.date, list[float]] = {}
    for year, month in months:
        for (_, day), values in weather_rows(site, year, month).items():
            if "prcp_mm" in values:
                per_day.setdefault(day, []).append(values["prcp_mm"])
    return {day: sum(v) / len(v) for day, v in per_day.items()}


@dataclass
class Expected:
    """The mission's tables, from the published files alone."""

    taxi: dict[str, list[tuple]]  # raw's rows of each published file (the last month's: staging's too)
    weather: dict[tuple[str, dt.date], dict[str, float]]
    last_weather: set[tuple[str, dt.date]]  # weather staging: the last month's county-days
    forecasts: dict[dt.datetime, dict[tuple[int, dt.datetime], float]] = field(default_factory=dict)  # by as_of
    actuals: dict[tuple[int, dt.datetime], int] = field(default_factory=dict)  # the table's rows in the end


def expected(
    site: Path, taxi_files: list[Path], months, backtest: dt.datetime | None, lookback_days: int = 28
) -> Expected:
    """The trainings the scheduler starts after each month's merge (seasonal naive, from the first hour of
    the month after) and the mission's weather-adjusted backtest (``lookback_days`` of history; None: a
    mission without one)."""
    weather: dict = {}
    for year, month in months:
        weather |= weather_rows(site, year, month)
    rain = daily_rain(site, months)
    forecasts, actuals = {}, {}

    def counted(files: list[Path], start: dt.datetime, end: dt.datetime) -> dict:
        """A run's window: its counts replace the table's rows of its hours (the files loaded by then)."""
        counts = hourly_rides(files, start, end)
        for key in [k for k in actuals if start <= k[1] < end]:
            del actuals[key]
        actuals.update(counts)
        return counts

    for number, (year, month) in enumerate(months):
        as_of = dt.datetime(year + month // 12, month % 12 + 1, 1)
        counts = counted(taxi_files[: number + 1], as_of - LOOKBACK, as_of + dt.timedelta(hours=HORIZON))
        forecasts[as_of] = seasonal_naive(counts, as_of)
    if backtest is not None:
        counts = counted(
            taxi_files, backtest - dt.timedelta(days=lookback_days), backtest + dt.timedelta(hours=HORIZON)
        )
        forecasts[backtest] = weather_adjusted(counts, rain, backtest)
    last = set(weather_rows(site, *months[-1]))
    return Expected({p.name: taxi_rows(p) for p in taxi_files}, weather, last, forecasts, actuals)


# The mission's lineage, written out by hand from the DAGs and the flow (not from the registry or the naming
# rules): (job, read | write, the dataset's name as an OpenLineage event carries it, its last part; a table
# without its database, which is configuration). A run
# of the weather-adjusted model also reads weather_raw.
TAXI, WEATHER, FLOW = "ingest_yellow_taxi_data", "ingest_weather_data", "TrainForecastModelFlow"
MISSION_EDGES = {
    (f"{TAXI}.download_published_files", "read", "yellow_tripdata_*.parquet"),
    (f"{TAXI}.download_published_files", "write", "tlc_yellow_tripdata_landed"),
    (f"{TAXI}.stage_landed_files", "read", "tlc_yellow_tripdata_landed"),
    (f"{TAXI}.stage_landed_files", "write", "yellow_taxi_staging"),
    (f"{TAXI}.merge_upsert_staging_into_raw_yellow", "read", "yellow_taxi_staging"),
    (f"{TAXI}.merge_upsert_staging_into_raw_yellow", "write", "yellow_taxi_raw"),
    (f"{WEATHER}.download_published_files", "read", "*-cty-*.csv"),
    (f"{WEATHER}.download_published_files", "write", "noaa_nclimgrid_daily_county_landed"),
    (f"{WEATHER}.stage_landed_files", "read", "noaa_nclimgrid_daily_county_landed"),
    (f"{WEATHER}.stage_landed_files", "write", "weather_staging"),
    (f"{WEATHER}.merge_upsert_staging_into_raw_weather", "read", "weather_staging"),
    (f"{WEATHER}.merge_upsert_staging_into_raw_weather", "write", "weather_raw"),
    (f"{FLOW}.compute_actuals", "read", "yellow_taxi_raw"),
    (f"{FLOW}.compute_actuals", "write", "yellow_rides_hourly_actuals"),
    (f"{FLOW}.prepare_training_data", "read", "yellow_rides_hourly_actuals"),
    (f"{FLOW}.train_forecasting_model", "read", "yellow_rides_hourly_actuals"),
    (f"{FLOW}.train_forecasting_model", "write", "yellow_rides_forecast_model"),
    (f"{FLOW}.predict", "read", "yellow_rides_forecast_model"),
    (f"{FLOW}.write_forecasts_to_table", "read", "yellow_rides_forecast_model"),
    (f"{FLOW}.write_forecasts_to_table", "write", "yellow_rides_hourly_forecast"),
    (f"{FLOW}.evaluate", "read", "yellow_rides_hourly_forecast"),
    (f"{FLOW}.evaluate", "read", "yellow_rides_hourly_actuals"),
    (f"{FLOW}.evaluate", "write", "yellow_rides_forecast_scores"),
}
WEATHER_ADJUSTED_EDGES = {
    (f"{FLOW}.prepare_training_data", "read", "weather_raw"),
    (f"{FLOW}.train_forecasting_model", "read", "weather_raw"),
}


def mission_edges(weather_adjusted: bool) -> set[tuple[str, str, str]]:
    return MISSION_EDGES | (WEATHER_ADJUSTED_EDGES if weather_adjusted else set())
