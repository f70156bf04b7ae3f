"""The fixture files reproduce the documented source formats (docs/sources.md)."""

from __future__ import annotations

import datetime as dt
import urllib.error
import urllib.request

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from tlc_columns import COLUMNS_2024

from nyc_taxi.core.zones import zones
from nyc_taxi_proving.fixtures import noaa, tlc
from nyc_taxi_proving.fixtures.server import FixtureServer
from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month


@pytest.fixture(scope="module")
def month_2024_11():
    return tlc.generate_yellow_month(2024, 11, rows=200_000, seed=7)


def test_yearly_schemas_match_the_published_files():
    s2025 = tlc.yellow_schema(tlc.schema_style(2025, 9))
    assert s2025.names == COLUMNS_2024 + ["cbd_congestion_fee"]
    assert [
        s2025.field(n).type for n in ("VendorID", "passenger_count", "RatecodeID", "store_and_fwd_flag", "PULocationID")
    ] == [pa.int32(), pa.int64(), pa.int64(), pa.large_string(), pa.int32()]
    assert s2025.field("tpep_pickup_datetime").type == pa.timestamp("us")
    assert tlc.yellow_schema(tlc.schema_style(2024, 1)).names == COLUMNS_2024
    legacy = tlc.yellow_schema(tlc.schema_style(2023, 1))
    assert legacy.names == COLUMNS_2024[:-1] + ["airport_fee"]
    assert [legacy.field(n).type for n in ("VendorID", "passenger_count", "RatecodeID", "store_and_fwd_flag")] == [
        pa.int64(),
        pa.float64(),
        pa.float64(),
        pa.string(),
    ]
    assert tlc.yellow_schema("2024", timestamp_unit="ms").field("tpep_dropoff_datetime").type == pa.timestamp("ms")


def test_generated_month_has_the_schema_and_size_asked_for():
    table = tlc.generate_yellow_month(2025, 2, rows=10_000, seed=1)
    assert table.num_rows == 10_000
    assert table.schema == tlc.yellow_schema("2025")
    assert set(pc.unique(table["VendorID"]).to_pylist()) <= {1, 2, 6, 7}
    assert tlc.generate_yellow_month(2025, 2, rows=10_000, seed=1).equals(table)  # seeded: reproducible


def test_zone_skew_and_active_zones(month_2024_11):
    counts = pc.value_counts(month_2024_11["PULocationID"]).to_pylist()
    shares = {c["values"]: c["counts"] / month_2024_11.num_rows for c in counts}
    assert 240 <= len(shares) <= 262  # about 259 of 265 zones see pickups
    top = sorted(shares, key=shares.get, reverse=True)[:5]
    assert {132, 161, 237} <= set(top)
    assert all(0.02 < shares[z] < 0.08 for z in (132, 161, 237, 236, 138))
    assert {z.location_id for z in zones()} >= set(shares)


def _hour_count(table: pa.Table, start: dt.datetime) -> int:
    pickup = table["tpep_pickup_datetime"]
    lo, hi = pa.scalar(start, pa.timestamp("us")), pa.scalar(start + dt.timedelta(hours=1), pa.timestamp("us"))
    return pc.sum(pc.and_(pc.greater_equal(pickup, lo), pc.less(pickup, hi))).as_py() or 0


def test_daylight_saving_days_in_local_wall_clock_time(month_2024_11):
    march = tlc.generate_yellow_month(2024, 3, rows=200_000, seed=7)
    assert _hour_count(march, dt.datetime(2024, 3, 10, 2)) == 0  # the skipped hour
    assert _hour_count(march, dt.datetime(2024, 3, 10, 3)) > 0
    doubled = _hour_count(month_2024_11, dt.datetime(2024, 11, 3, 1))
    normal = _hour_count(month_2024_11, dt.datetime(2024, 11, 10, 1))  # same weekday and hour, a week later
    assert 1.5 < doubled / normal < 2.7


def test_daily_and_weekly_seasonality(month_2024_11):
    seconds = pc.divide(month_2024_11["tpep_pickup_datetime"].cast(pa.int64()), 1_000_000).to_numpy()
    hours = np.bincount((seconds // 3600) % 24, minlength=24)
    assert hours[18] > 4 * hours[4]  # evening peak vs small hours


def test_quirks_are_present(month_2024_11):
    t = month_2024_11
    pickup, dropoff = t["tpep_pickup_datetime"], t["tpep_dropoff_datetime"]
    month_start, month_end = (
        pa.scalar(dt.datetime(2024, 11, 1), pa.timestamp("us")),
        pa.scalar(dt.datetime(2024, 12, 1), pa.timestamp("us")),
    )
    outside = pc.or_(pc.less(pickup, month_start), pc.greater_equal(pickup, month_end))
    assert 4 <= pc.sum(outside).as_py() <= 60
    assert pc.min(pickup).as_py().year < 2010  # some years off
    backwards = pc.sum(pc.less_equal(dropoff, pickup)).as_py() / t.num_rows
    assert 0.0002 < backwards < 0.002
    long_trips = pc.sum(pc.greater(pc.subtract(dropoff, pickup), pa.scalar(dt.timedelta(hours=3)))).as_py()
    assert long_trips > 0
    assert 0.03 < pc.sum(pc.less_equal(t["total_amount"], 0)).as_py() / t.num_rows < 0.06
    assert pc.max(t["fare_amount"]).as_py() == 323_800.0 and pc.max(t["trip_distance"]).as_py() == 318_608.0
    # Flex fares: payment_type 0 and exactly those rows null in the documented columns.
    flex = pc.equal(t["payment_type"], 0)
    assert 0.05 < pc.sum(flex).as_py() / t.num_rows < 0.12
    for column in ("passenger_count", "RatecodeID", "store_and_fwd_flag", "congestion_surcharge", "Airport_fee"):
        assert pc.is_null(t[column]).to_pylist() == flex.to_pylist(), column
    # Whole seconds and roughly in pickup order, as published.
    assert (
        pc.sum(
            pc.not_equal(
                pc.divide(pickup.cast(pa.int64()), 1_000_000),
                pc.divide(pickup.cast(pa.int64()).cast(pa.float64()), 1_000_000),
            )
        ).as_py()
        == 0
    )
    in_month = pc.filter(pickup, pc.invert(outside)).cast(pa.int64()).to_numpy()
    assert (np.diff(in_month) >= 0).all()


def test_2025_flex_block_is_larger():
    t = tlc.generate_yellow_month(2025, 9, rows=20_000, seed=3)
    assert 0.10 <= pc.sum(pc.equal(t["payment_type"], 0)).as_py() / t.num_rows <= 0.29


def test_parquet_row_groups_of_1048576(tmp_path):
    path = tlc.write_yellow_month(tlc.generate_yellow_month(2024, 1, rows=1_100_000, seed=0), tmp_path / "m.parquet")
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1_048_576, 51_424]


def _rows(text: str) -> list[list[str]]:
    return [line.split(",") for line in text.split("\n")]


def test_noaa_layout():
    files = noaa.generate_county_month(2024, 2, seed=1)
    assert set(files) == {"prcp", "tavg", "tmax", "tmin"}
    rows = _rows(files["tmax"])
    assert 3000 <= len(rows) <= 3200 and 1.0e6 < len(files["tmax"]) < 1.25e6
    assert all(len(r) == 37 for r in rows)
    assert not files["tmax"].endswith("\n") and "\r" not in files["tmax"]
    assert rows[0][0] == "cty" and not rows[0][6].strip().lstrip("-").replace(".", "").isalpha()  # no header
    by_code = {r[1]: r for r in rows}
    nyc = {  # NOAA's codes and names for New York City's five counties, written out from NOAA's list
        "30005": "NY: Bronx County",
        "30047": "NY: Kings County",
        "30061": "NY: New York County",
        "30081": "NY: Queens County",
        "30085": "NY: Richmond County",
    }
    assert {code: by_code[code][2] for code in nyc} == nyc
    manhattan = by_code["30061"]
    assert manhattan[:6] == ["cty", "30061", "NY: New York County", "2024", "02", "TMAX"]
    assert all(len(cell) == 9 for cell in manhattan[6:])
    assert [c.strip() for c in manhattan[6 + 29 :]] == ["-999.99", "-999.99"]  # 2024-02 has 29 days
    assert all(float(c) > -999 for c in manhattan[6 : 6 + 29])


def test_noaa_variables_agree():
    files = {
        v: {r[1]: [float(c) for c in r[6:]] for r in _rows(t)}
        for v, t in noaa.generate_county_month(2024, 7, seed=2, n_counties=300).items()
    }
    for code, tavg in files["tavg"].items():
        for day in range(31):
            tmax, tmin = files["tmax"][code][day], files["tmin"][code][day]
            assert abs(tavg[day] - (tmax + tmin) / 2) <= 0.02
            assert tmin <= tmax
            assert files["prcp"][code][day] >= 0


def test_noaa_prelim_file_stops_at_the_day_published():
    rows = _rows(noaa.generate_county_month(2024, 5, seed=1, n_counties=50, through_day=12)["prcp"])
    assert all(float(c) > -999 for c in rows[0][6:18]) and all(c.strip() == "-999.99" for c in rows[0][18:])


def test_server_serves_the_real_paths_on_loopback_and_404s_missing_months(tmp_path):
    parquet = add_taxi_month(tmp_path, 2024, 1, rows=1_000)
    csvs = add_weather_month(tmp_path, 2024, 1, n_counties=20)
    with FixtureServer(tmp_path) as url:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{url}/trip-data/yellow_tripdata_2024-01.parquet") as response:
            assert response.read() == parquet.read_bytes()
        with urllib.request.urlopen(
            f"{url}/pub/data/daily-grids/v1-0-0/averages/2024/tavg-202401-cty-scaled.csv"
        ) as response:
            assert response.read() == next(p for p in csvs if p.name.startswith("tavg")).read_bytes()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{url}/trip-data/yellow_tripdata_2031-01.parquet")
        assert missing.value.code == 404


def test_server_answers_like_the_real_sites_with_etag_and_last_modified(tmp_path):
    """S3 behind CloudFront sends the MD5 of the bytes as ETag; a conditional request for an unchanged
    file gets 304; a republished file has a new ETag."""
    import email.utils
    import hashlib

    parquet = add_taxi_month(tmp_path, 2024, 1, rows=1_000, seed=1)
    address = "/trip-data/yellow_tripdata_2024-01.parquet"
    with FixtureServer(tmp_path) as url:
        with urllib.request.urlopen(f"{url}{address}") as response:
            etag, modified = response.headers["ETag"], response.headers["Last-Modified"]
            assert response.read() == parquet.read_bytes()
        assert etag == f'"{hashlib.md5(parquet.read_bytes()).hexdigest()}"'
        assert email.utils.parsedate_to_datetime(modified).timestamp() == int(parquet.stat().st_mtime)
        with pytest.raises(urllib.error.HTTPError) as unchanged:
            urllib.request.urlopen(urllib.request.Request(f"{url}{address}", headers={"If-None-Match": etag}))
        assert unchanged.value.code == 304 and unchanged.value.headers["ETag"] == etag
        add_taxi_month(tmp_path, 2024, 1, rows=1_000, seed=2)  # republished with other content
        with urllib.request.urlopen(
            urllib.request.Request(f"{url}{address}", headers={"If-None-Match": etag})
        ) as response:
            assert response.status == 200 and response.headers["ETag"] != etag
            assert response.read() == parquet.read_bytes()
