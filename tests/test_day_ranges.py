"""The predicate every read of raw is limited by (ingest/common.py, day_ranges_predicate): evaluated by
DuckDB over timestamps every 7 hours for three months and a NULL, it selects exactly the rows on the
given days, and the NULL one only when asked."""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest
import sqlglot

from nyc_taxi.ingest.common import day_ranges_predicate

START = dt.datetime(2023, 12, 1)
TIMES = [START + dt.timedelta(hours=7 * n) for n in range(13 * 24)] + [None]  # 2023-12-01 … 2024-03-01
DAY_SETS = {
    "none": [],
    "one day": [dt.date(2024, 1, 15)],
    "runs and gaps across a month and a year": [
        *(dt.date(2023, 12, d) for d in (30, 31)),
        *(dt.date(2024, 1, d) for d in (1, 2, 5, 7, 8, 31)),
        dt.date(2024, 2, 1),
        dt.date(2024, 2, 29),
    ],
    "unsorted, repeated": [dt.date(2024, 1, 9), dt.date(2024, 1, 3), dt.date(2024, 1, 9), dt.date(2024, 1, 4)],
}


@pytest.mark.parametrize("nulls", [False, True])
@pytest.mark.parametrize("days", DAY_SETS.values(), ids=DAY_SETS.keys())
def test_the_predicate_selects_exactly_the_rows_of_the_days_and_nulls_only_when_asked(days, nulls):
    predicate = day_ranges_predicate("t.pickup_datetime", days, nulls=nulls)
    condition = sqlglot.transpile(predicate, read="spark", write="duckdb")[0]
    db = duckdb.connect()
    db.execute("CREATE TABLE t (pickup_datetime TIMESTAMP)")
    db.executemany("INSERT INTO t VALUES (?)", [(time,) for time in TIMES])
    selected = [row[0] for row in db.execute(f"SELECT t.pickup_datetime FROM t WHERE {condition}").fetchall()]
    expected = [time for time in TIMES if (time is None and nulls) or (time is not None and time.date() in days)]
    assert sorted(selected, key=str) == sorted(expected, key=str)
    assert (None in selected) == nulls
