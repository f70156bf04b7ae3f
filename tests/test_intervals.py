"""Interval sets (core/intervals.py): the predicate reads of raw are limited by, evaluated by DuckDB over
timestamps every 7 hours for three months and a NULL, selects exactly the rows on the given days, and the
NULL one only when asked; and the set arithmetic the incremental actuals rest on, against plain sets of hours."""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest
import sqlglot

from nyc_taxi.core.intervals import Intervals

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
    predicate = Intervals.days(days).predicate("t.pickup_datetime", nulls=nulls)
    condition = sqlglot.transpile(predicate, read="spark", write="duckdb")[0]
    db = duckdb.connect()
    db.execute("CREATE TABLE t (pickup_datetime TIMESTAMP)")
    db.executemany("INSERT INTO t VALUES (?)", [(time,) for time in TIMES])
    selected = [row[0] for row in db.execute(f"SELECT t.pickup_datetime FROM t WHERE {condition}").fetchall()]
    expected = [time for time in TIMES if (time is None and nulls) or (time is not None and time.date() in days)]
    assert sorted(selected, key=str) == sorted(expected, key=str)
    assert (None in selected) == nulls


def _hours(intervals: Intervals) -> set[dt.datetime]:
    return {s + dt.timedelta(hours=h) for s, e in intervals.spans for h in range(int((e - s).total_seconds() // 3600))}


SPANS = [
    Intervals.of([(START, START + dt.timedelta(days=3)), (START + dt.timedelta(days=5), START + dt.timedelta(days=6))]),
    Intervals.of([(START + dt.timedelta(hours=50), START + dt.timedelta(days=5, hours=2))]),
    Intervals.days([dt.date(2023, 12, 2), dt.date(2023, 12, 6), dt.date(2023, 12, 9)]),
    Intervals(),
]


@pytest.mark.parametrize("a", range(len(SPANS)))
@pytest.mark.parametrize("b", range(len(SPANS)))
def test_interval_arithmetic_is_the_arithmetic_of_the_hours_they_hold(a, b):
    x, y = SPANS[a], SPANS[b]
    assert _hours(x | y) == _hours(x) | _hours(y)
    assert _hours(x & y) == _hours(x) & _hours(y)
    assert _hours(x - y) == _hours(x) - _hours(y)
    assert (x | y).covers(x) and x.covers(x & y)
    assert Intervals.parse(x.text()) == x
    assert (x - y).hours == len(_hours(x) - _hours(y))
