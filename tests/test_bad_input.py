"""Bad input: each case gets a clear error (file, problem, fix) or a clean skip, and no table changes.

The real download code fetches each bad file from the 127.0.0.1 fixture site; the Iceberg tables
are checked by snapshot id before and after.
"""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nyc_taxi.core import datasets as registry
from nyc_taxi.core import registry as lookup
from nyc_taxi.core.catalog import current_snapshot_id
from nyc_taxi.core.naming import landed_location
from nyc_taxi.core.tables import ensure_tables
from nyc_taxi.ingest import taxi, weather
from nyc_taxi.ingest.errors import BadSourceFile, NotPublishedYet
from nyc_taxi_proving.fixtures import noaa, tlc
from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month, taxi_path, weather_path

pytestmark = pytest.mark.spark
TAXI_TABLES = (registry.YELLOW_TAXI_STAGING, registry.YELLOW_TAXI_RAW)
WEATHER_TABLES = (registry.WEATHER_STAGING, registry.WEATHER_RAW)


def _snapshots(settings, tables) -> dict[str, int | None]:
    return {table.name: current_snapshot_id(table, settings) for table in tables}


@pytest.fixture(scope="module")
def loaded(site, settings, spark):
    """A good taxi month and a good weather month in staging and raw: what a bad file must leave alone
    (so the tables' snapshots exist before each case, whatever ran before)."""
    ensure_tables([*TAXI_TABLES, *WEATHER_TABLES], settings)
    add_taxi_month(site, 2017, 12, rows=2_000, seed=12)
    add_weather_month(site, 2017, 12, seed=12, n_counties=60)
    _load_month(taxi, 2017, 12, settings)
    _load_month(weather, 2017, 12, settings)
    before = _snapshots(settings, TAXI_TABLES + WEATHER_TABLES)
    assert all(before.values()), before
    return before


def _load_month(module, year, month, settings):
    """The DAG's three steps, as its tasks run them."""
    for step in (
        module.download_published_file if module is taxi else module.download_published_files,
        module.stage_landed_file if module is taxi else module.stage_landed_files,
        module.merge_into_raw,
    ):
        step(year, month, settings)


def _good_month(year, month) -> pa.Table:
    return tlc.generate_yellow_month(year, month, rows=2_000, seed=month)


def _parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def _wrong_type(year, month) -> bytes:
    table = _good_month(year, month)
    position = table.schema.get_field_index("tpep_pickup_datetime")
    as_text = pa.array([f"{v}" for v in table.column(position).to_pylist()])
    return _parquet_bytes(table.set_column(position, "tpep_pickup_datetime", as_text))


TAXI_CASES = {
    # case: (file bytes for the month, words the message must contain)
    "truncated parquet": (lambda y, m: _parquet_bytes(_good_month(y, m))[:-2000], ["truncated", "re-run"]),
    "wrong column type": (_wrong_type, ["tpep_pickup_datetime is string", "data dictionary"]),
    "empty file": (lambda y, m: b"", ["not a parquet file", "TLC_BASE_URL"]),
    "html error page with status 200": (
        lambda y, m: b"<!DOCTYPE html><html><body><h1>Service Unavailable</h1></body></html>",
        ["not a parquet file", "Service Unavailable", "TLC_BASE_URL"],
    ),
    "parquet with no rows": (lambda y, m: _parquet_bytes(_good_month(y, m).slice(0, 0)), ["no rows"]),
}


@pytest.mark.parametrize("case", sorted(TAXI_CASES))
def test_bad_taxi_file_fails_clearly_and_changes_nothing(case, site, settings, loaded):
    year, month = 2019, 1 + sorted(TAXI_CASES).index(case)  # a month of its own per case
    content, words = TAXI_CASES[case]
    path = taxi_path(site, year, month)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content(year, month))
    before = _snapshots(settings, TAXI_TABLES)
    with pytest.raises(BadSourceFile) as raised:
        _load_month(taxi, year, month, settings)
    message = str(raised.value)
    assert f"yellow_tripdata_{year}-{month:02d}.parquet" in message  # names the file
    for word in words:
        assert word in message, message
    assert _snapshots(settings, TAXI_TABLES) == before
    assert not Path(
        landed_location(registry.TLC_YELLOW_TRIPDATA_LANDED, year, month, settings)
    ).exists()  # nothing landed


def _noaa_files(site, year, month, edit) -> None:
    for var, text in noaa.generate_county_month(year, month, seed=1, n_counties=60).items():
        path = weather_path(site, year, month, var, "scaled")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(edit(text).encode())


WEATHER_CASES = {
    "missing column": (
        lambda text: "\n".join(",".join(line.split(",")[:-1]) for line in text.split("\n")),
        ["has 36 fields, expected 37"],
    ),
    "header row": (
        lambda text: (
            ",".join(
                ["region_type", "region_code", "region_name", "year", "month", "variable"]
                + [f"day{d}" for d in range(1, 32)]
            )
            + "\n"
            + text
        ),
        ["line 1 is not a data row", "no header row"],
    ),
    "html error page with status 200": (
        lambda text: "<html><body>Temporarily unavailable</body></html>",
        ["HTML page", "NOAA_BASE_URL"],
    ),
}


@pytest.mark.parametrize("case", sorted(WEATHER_CASES))
def test_bad_noaa_file_fails_clearly_and_changes_nothing(case, site, settings, loaded):
    year, month = 2018, 1 + sorted(WEATHER_CASES).index(case)
    edit, words = WEATHER_CASES[case]
    _noaa_files(site, year, month, edit)
    before = _snapshots(settings, WEATHER_TABLES)
    with pytest.raises(BadSourceFile) as raised:
        _load_month(weather, year, month, settings)
    message = str(raised.value)
    assert f"{year}{month:02d}" in message and ".csv" in message  # names the file
    for word in words:
        assert word in message, message
    assert _snapshots(settings, WEATHER_TABLES) == before
    landed = [
        landed_location(registry.NOAA_NCLIMGRID_DAILY_COUNTY_LANDED, year, month, settings, var=var, status="scaled")
        for var in ("prcp", "tavg", "tmax", "tmin")
    ]
    assert [location for location in landed if Path(location).exists()] == []  # nothing landed


def test_month_far_in_the_future_is_a_clean_skip(settings, loaded):
    before = _snapshots(settings, TAXI_TABLES)
    with pytest.raises(NotPublishedYet, match="2031-07"):
        taxi.download_published_file(2031, 7, settings)
    assert _snapshots(settings, TAXI_TABLES) == before


def test_unknown_table_and_unknown_profile_are_named_with_the_valid_choices():
    from pydantic import ValidationError

    from nyc_taxi.core.settings import Settings

    with pytest.raises(KeyError, match="unknown dataset 'yellow_taxi_rwa'.*yellow_taxi_raw"):
        lookup.get("yellow_taxi_rwa")
    with pytest.raises(ValidationError, match="local.*aws|aws.*local"):
        Settings(profile="gcp")
