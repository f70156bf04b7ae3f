"""What the ingestion steps share: a month's bounds and label."""

from __future__ import annotations

import datetime as dt


def month_bounds(year: int, month: int) -> tuple[dt.date, dt.date]:
    start = dt.date(year, month, 1)
    return start, dt.date(year + month // 12, month % 12 + 1, 1)


def month_label(year: int, month: int) -> str:
    return f"{year:04d}-{month:02d}"
