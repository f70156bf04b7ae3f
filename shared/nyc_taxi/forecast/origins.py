"""Forecast origins: the latest one the lakehouse can train at, and weekly ones before it (a backtest's)."""

from __future__ import annotations

import datetime as dt

from nyc_taxi.core.datasets import YELLOW_TAXI_RAW
from nyc_taxi.core.settings import Settings

WEEK = dt.timedelta(days=7)


def latest_origin(horizon_hours: int, settings: Settings) -> tuple[dt.datetime, str] | None:
    """The latest midnight whose horizon ends by the end of the latest month raw holds (its commits' own
    record of the month they loaded), with that month; None when raw holds none."""
    from pyiceberg.exceptions import NoSuchTableError

    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.core.snapshots import MONTH, ancestors

    try:
        table = load_table(YELLOW_TAXI_RAW, settings)
    except NoSuchTableError:
        return None
    months = {s.summary.get(MONTH) for s in ancestors(table) if s.summary is not None and s.summary.get(MONTH)}
    if not months:
        return None
    year, month = map(int, max(months).split("-"))
    end = dt.datetime(year + month // 12, month % 12 + 1, 1)
    last = end - dt.timedelta(hours=horizon_hours)
    return last.replace(hour=0), max(months)


def weekly_origins(last: dt.datetime, count: int) -> list[dt.datetime]:
    """``count`` origins a week apart, the last one ``last``; oldest first."""
    return [last - WEEK * n for n in reversed(range(count))]
