"""Sets of half-open time intervals [start, end): the hours a step read or recomputed, the days a commit
changed. Kept sorted and disjoint; written as text ("2024-01-01T00:00/2024-01-08T00:00,...") and as a
SQL predicate Iceberg prunes partitions with."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

Time = dt.datetime


@dataclass(frozen=True)
class Intervals:
    spans: tuple[tuple[Time, Time], ...] = ()

    @classmethod
    def of(cls, spans: Iterable[tuple[Time, Time]]) -> Intervals:
        merged: list[list[Time]] = []
        for start, end in sorted((s, e) for s, e in spans if s < e):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        return cls(tuple((s, e) for s, e in merged))

    @classmethod
    def days(cls, days: Iterable[dt.date]) -> Intervals:
        """Whole days, midnight to midnight."""
        return cls.of(
            (dt.datetime.combine(d, dt.time()), dt.datetime.combine(d, dt.time()) + dt.timedelta(days=1)) for d in days
        )

    @classmethod
    def everything(cls) -> Intervals:
        return cls(((dt.datetime.min, dt.datetime.max),))

    def __bool__(self) -> bool:
        return bool(self.spans)

    def __or__(self, other: Intervals) -> Intervals:
        return Intervals.of(self.spans + other.spans)

    def __and__(self, other: Intervals) -> Intervals:
        return Intervals.of(
            (max(a, c), min(b, d)) for a, b in self.spans for c, d in other.spans if max(a, c) < min(b, d)
        )

    def __sub__(self, other: Intervals) -> Intervals:
        result = list(self.spans)
        for c, d in other.spans:
            result = [piece for a, b in result for piece in ((a, min(b, c)), (max(a, d), b)) if piece[0] < piece[1]]
        return Intervals.of(result)

    def covers(self, other: Intervals) -> bool:
        return not (other - self)

    @property
    def hours(self) -> int:
        return int(sum((e - s).total_seconds() for s, e in self.spans) // 3600)

    def text(self) -> str:
        return ",".join(f"{s.isoformat(timespec='minutes')}/{e.isoformat(timespec='minutes')}" for s, e in self.spans)

    @classmethod
    def parse(cls, text: str | None) -> Intervals:
        if not text:
            return cls()
        return cls.of(tuple(dt.datetime.fromisoformat(t) for t in span.split("/")) for span in text.split(","))

    def predicate(self, column: str, nulls: bool = False) -> str:
        """``column`` within one of the intervals, as timestamp ranges Iceberg can prune partitions with;
        or NULL too, if ``nulls`` (Iceberg prunes that through its null counts and the null partition)."""
        terms = [
            f"({column} >= TIMESTAMP_NTZ'{s:%Y-%m-%d %H:%M:%S}' AND {column} < TIMESTAMP_NTZ'{e:%Y-%m-%d %H:%M:%S}')"
            for s, e in self.spans
        ] + ([f"{column} IS NULL"] if nulls else [])
        return "(" + " OR ".join(terms) + ")" if terms else "FALSE"
