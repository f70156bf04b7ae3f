"""What a load must leave in the tables, computed from the fixture files independently of the
product's code: pyarrow for the TLC parquet files, plain Python for NOAA's CSV files."""

from __future__ import annotations

import calendar
import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from tlc_columns import TLC_TO_TARGET

# New York City's five counties in NOAA's numbering (state 30), written out from NOAA's county list
NYC_COUNTY_CODES = {"30005", "30047", "30061", "30081", "30085"}


def expected_taxi_rows(path: Path) -> pa.Table:
    """What raw must hold for one TLC file: renamed case-insensitively, cast, keyed by file and row."""
    source = pq.read_table(path)
    columns = {
        TLC_TO_TARGET[name.lower()][0]: source[name].cast(TLC_TO_TARGET[name.lower()][1])
        for name in source.column_names
    }
    if "cbd_congestion_fee" not in columns:
        columns["cbd_congestion_fee"] = pa.nulls(source.num_rows, pa.float64())
    keys = pa.array([f"{path.name}:{i}" for i in range(source.num_rows)])
    return pa.table({"row_key": keys, **columns}).sort_by("row_key")


def comparable(table: pa.Table) -> pa.Table:
    """The row key and the TLC columns of a table, sorted by row key: a load and its expectation compare equal."""
    names = ["row_key"] + [name for name, _ in TLC_TO_TARGET.values()]
    return table.select(names).cast(pa.schema([(n, table.schema.field(n).type) for n in names])).sort_by("row_key")


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
