"""What the ingestion steps share: month bounds and partition-pruning predicates."""

from __future__ import annotations

import datetime as dt


def month_bounds(year: int, month: int) -> tuple[dt.date, dt.date]:
    start = dt.date(year, month, 1)
    return start, dt.date(year + month // 12, month % 12 + 1, 1)


def month_label(year: int, month: int) -> str:
    return f"{year:04d}-{month:02d}"


def day_ranges_predicate(column: str, days: list[dt.date], nulls: bool = False) -> str:
    """``column`` within any of ``days``, as timestamp ranges Iceberg can prune partitions with; or NULL
    too, if ``nulls`` (Iceberg prunes that through its null counts and the null partition)."""
    ranges, start, end = [], None, None
    for day in sorted(set(days)):
        if start is not None and day == end + dt.timedelta(days=1):
            end = day
            continue
        if start is not None:
            ranges.append((start, end))
        start = end = day
    if start is not None:
        ranges.append((start, end))
    terms = [
        f"({column} >= TIMESTAMP_NTZ'{a} 00:00:00' AND {column} < TIMESTAMP_NTZ'{b + dt.timedelta(days=1)} 00:00:00')"
        for a, b in ranges
    ] + ([f"{column} IS NULL"] if nulls else [])
    return "(" + " OR ".join(terms) + ")" if terms else "FALSE"
