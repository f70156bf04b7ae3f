"""What a load must leave in the tables, computed from the fixture files independently of the
product's code: pyarrow for the TLC parquet files, plain Python for NOAA's CSV files; and what raw
holds of a file, read through pyiceberg, to compare with it. The forecasts' scores, by DuckDB over the
Parquet files of the forecast and actuals tables."""

from __future__ import annotations

import calendar
import datetime as dt
import hashlib
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tlc_columns import TLC_TO_TARGET

TLC_TO_TARGET_TYPES = dict(TLC_TO_TARGET.values())  # raw's column name -> its type

# New York City's five counties in NOAA's numbering (state 30), written out from NOAA's county list
NYC_COUNTY_CODES = {"30005", "30047", "30061", "30081", "30085"}


# What identifies a trip (the row key's hash); the TLC publishes no trip id.
TRIP_IDENTITY = ["vendor_id", "pickup_datetime", "dropoff_datetime", "pickup_location_id", "dropoff_location_id"]
TRIP_IDENTITY_SOURCE = ["VendorID", "tpep_pickup_datetime", "tpep_dropoff_datetime", "PULocationID", "DOLocationID"]


def expected_taxi_rows(path: Path) -> pa.Table:
    """What raw must hold for one TLC file: every trip, renamed case-insensitively and cast, from that file."""
    source = pq.read_table(path)
    columns = {
        TLC_TO_TARGET[name.lower()][0]: source[name].cast(TLC_TO_TARGET[name.lower()][1])
        for name in source.column_names
    }
    if "cbd_congestion_fee" not in columns:
        columns["cbd_congestion_fee"] = pa.nulls(source.num_rows, pa.float64())
    return pa.table({"source_file": pa.array([path.name] * source.num_rows), **columns})


def raw_rows_of(path: Path) -> pa.Table:
    """The rows raw holds of one TLC file, as pyiceberg reads them."""
    from nyc_taxi.core import datasets as registry
    from nyc_taxi.core.catalog import load_table

    arrow = load_table(registry.YELLOW_TAXI_RAW).scan().to_arrow()
    return arrow.filter(pc.equal(arrow["source_file"], path.name))


def hourly_rides(
    pickups: list[dt.datetime], zones: list[int], start: dt.datetime, end: dt.datetime
) -> dict[tuple[int, dt.datetime], int]:
    """Rides per zone and hour in [start, end) of trips given as pickup times and pickup zones: pickups
    floored to the hour, TLC's zones 1-265 only, and every zone with a ride in the window gets every
    hour of the window's days that have a ride (zero where it had none; a day without a single ride gets
    no hour) — what compute_actuals must write."""
    counts: dict[tuple[int, dt.datetime], int] = {}
    for pickup, zone in zip(pickups, zones, strict=True):
        if pickup is not None and start <= pickup < end and zone is not None and 1 <= zone <= 265:
            key = (zone, pickup.replace(minute=0, second=0, microsecond=0))
            counts[key] = counts.get(key, 0) + 1
    active = {z for z, _ in counts}
    days = {h.date() for _, h in counts}
    hours = [start + dt.timedelta(hours=h) for h in range(int((end - start).total_seconds() // 3600))]
    return {(z, h): counts.get((z, h), 0) for z in active for h in hours if h.date() in days}


def expected_actuals(files: list[Path], start: dt.datetime, end: dt.datetime) -> dict[tuple[int, dt.datetime], int]:
    """``hourly_rides`` of the trips in the published TLC files."""
    tables = [pq.read_table(path, columns=["tpep_pickup_datetime", "PULocationID"]) for path in files]
    pickups = [pickup for t in tables for pickup in t["tpep_pickup_datetime"].to_pylist()]
    return hourly_rides(pickups, [zone for t in tables for zone in t["PULocationID"].to_pylist()], start, end)


def seasonal_naive(
    counts: dict[tuple[int, dt.datetime], int], as_of: dt.datetime, horizon_hours: int
) -> dict[tuple[int, dt.datetime], int]:
    """The seasonal-naive forecast of ``counts`` (``hourly_rides`` of a window ending at or after as_of):
    every zone of the window, every hour of the horizon, the zone's count a week earlier."""
    week = dt.timedelta(hours=168)
    horizon = [as_of + dt.timedelta(hours=h) for h in range(horizon_hours)]
    return {(zone, hour): counts[(zone, hour - week)] for zone in {z for z, _ in counts} for hour in horizon}


def actuals_rows(counts: dict[tuple[int, dt.datetime], int]) -> list[tuple[int, dt.datetime, int]]:
    """Expected actuals as ``table_actuals`` gives the table's: (zone, hour, rides), sorted."""
    return sorted((zone, hour, rides) for (zone, hour), rides in counts.items())


def table_actuals(rows: list[dict]) -> list[tuple[int, dt.datetime, int]]:
    """The actuals table's rows as (zone, hour, rides), sorted: whole rows, so a doubled zone-hour shows."""
    return sorted((r["pickup_location_id"], r["pickup_hour"], r["ride_count"]) for r in rows)


def comparable(table: pa.Table) -> pa.Table:
    """The source file and the TLC columns of every row, in one order: a load and its expectation compare
    equal row for row (the same trips, each as often as the file has it). The keys are checked apart
    (``check_trip_keys``)."""
    names = ["source_file"] + [name for name, _ in TLC_TO_TARGET.values()]
    schema = pa.schema([(n, pa.string() if n == "source_file" else TLC_TO_TARGET_TYPES[n]) for n in names])
    return table.select(names).cast(schema).sort_by([(n, "ascending") for n in names])


def check_trip_keys(table: pa.Table) -> None:
    """Raw's row keys follow the trips: unique; ``<file>:<trip>:<n>`` where the trip part is the same for
    trips that share the identity columns and differs otherwise, and n counts those trips 1, 2, ..."""
    rows = table.select(["row_key", "source_file", *TRIP_IDENTITY]).to_pylist()
    keys = [r["row_key"] for r in rows]
    assert len(set(keys)) == len(keys), "row keys are not unique"
    trips: dict[tuple, set[str]] = {}
    occurrences: dict[tuple, list[int]] = {}
    for row in rows:
        file, trip, n = row["row_key"].split(":")
        assert file == row["source_file"]
        identity = (file, *(row[c] for c in TRIP_IDENTITY))
        trips.setdefault(identity, set()).add(trip)
        occurrences.setdefault(identity, []).append(int(n))
    assert all(len(parts) == 1 for parts in trips.values()), "one trip, several hashes"
    assert len({(i[0], *p) for i, p in trips.items()}) == len(trips), "two trips, one hash"
    assert all(sorted(ns) == list(range(1, len(ns) + 1)) for ns in occurrences.values())


def expected_weather(site: Path, year: int, month: int, status: str) -> dict[tuple[str, dt.date], dict]:
    """Parse the four county files independently: NYC counties, real days, -999.99 dropped."""
    days = calendar.monthrange(year, month)[1]
    out: dict[tuple[str, dt.date], dict] = {}
    for var, column in (("tmax", "tmax_c"), ("tmin", "tmin_c"), ("tavg", "tavg_c"), ("prcp", "prcp_mm")):
        path = site / f"pub/data/daily-grids/v1-0-0/averages/{year}/{var}-{year}{month:02d}-cty-{status}.csv"
        for line in path.read_text().split("\n"):
            fields = line.split(",")
            if fields[1] not in NYC_COUNTY_CODES:
                continue
            for day, value in enumerate(fields[6 : 6 + days], start=1):
                if value.strip() != "-999.99":
                    out.setdefault((fields[1], dt.date(year, month, day)), {})[column] = float(value)
    return out


def quality_counts(path: Path, year: int, month: int) -> dict[str, int]:
    """Independent: the rows of the published file each row-by-row check of the staging table fails
    (core/datasets.py's TAXI_MONTH_CHECKS, by name), counted over the file with pyarrow."""
    trips = pq.read_table(path)
    pickup, dropoff = trips["tpep_pickup_datetime"], trips["tpep_dropoff_datetime"]
    start = pa.scalar(dt.datetime(year, month, 1), pa.timestamp("us"))
    end = pa.scalar(dt.datetime(year + month // 12, month % 12 + 1, 1), pa.timestamp("us"))
    three_hours = pa.scalar(dt.timedelta(hours=3), pa.duration("us"))

    def count(mask) -> int:
        return pc.sum(pc.fill_null(mask, False).cast(pa.int64())).as_py() or 0

    identities = zip(*(trips[c].to_pylist() for c in TRIP_IDENTITY_SOURCE), strict=True)
    return {
        "pickup_present": count(pc.is_null(pickup)),
        "dropoff_present": count(pc.is_null(dropoff)),
        "pickup_zone_present": count(pc.is_null(trips["PULocationID"])),
        # a trip repeating an earlier row's vendor, times and zones (the row key's n-th is 2 or more)
        "trip_not_repeated": trips.num_rows - len(set(identities)),
        "pickup_in_month": count(pc.or_(pc.less(pickup, start), pc.greater_equal(pickup, end))),
        "dropoff_after_pickup": count(pc.less_equal(dropoff, pickup)),
        "trip_within_3_hours": count(pc.greater(dropoff, pc.add(pickup, three_hours))),
        "total_positive": count(pc.less_equal(trips["total_amount"], 0)),
        "fare_and_distance_plausible": count(
            pc.or_(pc.greater(trips["fare_amount"], 10_000), pc.greater(trips["trip_distance"], 1_000))
        ),
        "not_flex_fare": count(pc.equal(trips["payment_type"], 0)),
        "pickup_zone_known": count(pc.or_(pc.less(trips["PULocationID"], 1), pc.greater(trips["PULocationID"], 265))),
        "vendor_known": count(pc.invert(pc.is_in(trips["VendorID"], pa.array([1, 2, 6, 7], trips["VendorID"].type)))),
    }


def row_checks(results) -> dict[str, int]:
    """The failing rows of each row-by-row check among a report's check results (not the row counts)."""
    return {r.check: r.failing for r in results if r.kind != "row_count"}


def expected_daily_prcp(site, months: Iterable[tuple[int, int]]) -> dict[dt.date, float]:
    """Independent: NYC's mean precipitation per day of the months loaded, read straight from the fixture
    CSV files (only those: other tests of the session put broken files beside them)."""
    per_day: dict[dt.date, list[float]] = {}
    for year, month in months:
        path = site / f"pub/data/daily-grids/v1-0-0/averages/{year}/prcp-{year}{month:02d}-cty-scaled.csv"
        for line in path.read_text().splitlines():
            fields = [f.strip() for f in line.split(",")]
            if fields[1] not in NYC_COUNTY_CODES:
                continue
            for day, value in enumerate(fields[6:], start=1):
                if float(value) != -999.99:
                    per_day.setdefault(dt.date(int(fields[3]), int(fields[4]), day), []).append(float(value))
    return {day: sum(values) / len(values) for day, values in per_day.items()}


def expected_weather_adjusted(
    actuals: dict, prcp: dict[dt.date, float], as_of: dt.datetime, horizon: int
) -> tuple[float, dict]:
    """Independent: a week earlier's count, times (actual / a week earlier on wet training days) over
    (the same on dry days) when the forecast day is wet (1 mm or more)."""
    week = dt.timedelta(hours=168)
    training = {key: count for key, count in actuals.items() if key[1] < as_of}
    sums = {True: [0, 0], False: [0, 0]}
    for (zone, hour), count in training.items():
        if (zone, hour - week) in training and hour.date() in prcp:
            wet = prcp[hour.date()] >= 1.0
            sums[wet][0] += count
            sums[wet][1] += training[(zone, hour - week)]
    factor = (sums[True][0] / sums[True][1]) / (sums[False][0] / sums[False][1])
    zones = {zone for zone, _ in training}
    return factor, {
        (zone, as_of + dt.timedelta(hours=h)): training.get((zone, as_of + dt.timedelta(hours=h) - week), 0)
        * (factor if prcp.get((as_of + dt.timedelta(hours=h)).date(), 0.0) >= 1.0 else 1.0)
        for zone in zones
        for h in range(horizon)
    }


def duckdb_scores(forecast_snapshot: int | None = None, actuals_snapshot: int | None = None, settings=None) -> dict:
    """Each (model, origin)'s score — MAE, WAPE, bias, coverage, the rides, its hours and version — by DuckDB over the Parquet files of the
    forecast and actuals tables at those snapshots (default: their current ones; copy-on-write tables: a
    snapshot's data files are its rows). A zone-hour counts when the actuals hold its hour, a zone without a
    row there as 0 rides; a forecast none of whose hours is held has no score."""
    import duckdb

    from nyc_taxi.core import datasets as registry
    from nyc_taxi.core.catalog import load_table

    def files(table, snapshot) -> list[str]:
        scan = load_table(table, settings).scan(snapshot_id=snapshot)
        return [task.file.file_path.removeprefix("file:") for task in scan.plan_files()]

    con = duckdb.connect()
    con.execute(
        f"CREATE VIEW f AS SELECT * FROM read_parquet({files(registry.YELLOW_RIDES_HOURLY_FORECAST, forecast_snapshot)})"
    )
    con.execute(
        f"CREATE VIEW a AS SELECT * FROM read_parquet({files(registry.YELLOW_RIDES_HOURLY_ACTUALS, actuals_snapshot)})"
    )
    rows = con.execute(
        """
        WITH loaded AS (SELECT DISTINCT pickup_hour FROM a),
        pairs AS (
          SELECT f.model_name, f.as_of_datetime, f.model_version, f.lookback_days, f.pickup_location_id,
                 f.forecast_hour, f.predicted_ride_count AS p,
                 CASE WHEN f.forecast_hour IN (SELECT pickup_hour FROM loaded)
                      THEN coalesce((SELECT ride_count FROM a WHERE a.pickup_location_id = f.pickup_location_id
                                     AND a.pickup_hour = f.forecast_hour), 0) END AS y
          FROM f)
        SELECT model_name, as_of_datetime, count(y)::DOUBLE / count(*), avg(abs(p - y)),
               sum(abs(p - y)) / sum(y), avg(p - y), sum(y), sum(CASE WHEN y IS NOT NULL THEN p END),
               count(*), count(y), min(forecast_hour), max(forecast_hour), max(lookback_days),
               list(DISTINCT pickup_location_id), min(model_version), max(model_version)
        FROM pairs GROUP BY ALL HAVING count(y) > 0
        """
    ).fetchall()
    names = [
        "coverage",
        "mae",
        "wape",
        "bias",
        "actual_rides",
        "predicted_rides",
        "forecast_zone_hours",
        "scored_zone_hours",
        "first_hour",
        "last_hour",
        "lookback_days",
        "zone_set",
        "model_version",
    ]
    scores = {}
    for model, origin, *figures, zones, lowest_version, highest_version in rows:
        assert lowest_version == highest_version, f"{model} as of {origin}: forecasts of two model versions"
        digest = hashlib.sha256(",".join(sorted(str(z) for z in zones)).encode()).hexdigest()  # the zones' ids
        scores[(model, origin)] = dict(zip(names, [*figures, digest, lowest_version], strict=True))
    return scores
