"""A forecast's window (its training days and its horizon) and its days as the actuals' checks judge them:
whole against their weekday, hour by hour (the rule of ``day_rides_near_their_weekday``, core/datasets.py)."""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass

import pyarrow as pa

from nyc_taxi.core.datasets import AT_MOST, BUSY, HOLE, HOLE_HOURS, HOLE_RIDES, USUAL_HOUR, USUAL_HOURS, WHOLE
from nyc_taxi.core.intervals import Intervals


@dataclass(frozen=True)
class Window:
    """Training hours [start, as_of), forecast hours [as_of, end)."""

    start: dt.datetime
    as_of: dt.datetime
    end: dt.datetime

    @classmethod
    def of(cls, as_of: dt.datetime, lookback_days: int, horizon_hours: int) -> Window:
        return cls(as_of - dt.timedelta(days=lookback_days), as_of, as_of + dt.timedelta(hours=horizon_hours))

    @property
    def hours(self) -> tuple[dt.datetime, dt.datetime]:
        """The window's hours, [start, end)."""
        return self.start, self.end

    @property
    def horizon(self) -> list[dt.datetime]:
        return [self.as_of + dt.timedelta(hours=h) for h in range(int((self.end - self.as_of).total_seconds() // 3600))]

    def as_dict(self) -> dict[str, str]:
        return {
            "train_start": self.start.isoformat(),
            "as_of": self.as_of.isoformat(),
            "horizon_end": self.end.isoformat(),
        }


@dataclass(frozen=True)
class WindowDays:
    """The window's days as its actuals' checks see them (the grain "day" of core/datasets.py): each day's
    rides in every zone within the window, hour by hour; whether the model learns from it (its midnight is
    before the forecast origin); whether the whole day is in the window; and its reference, hour by hour:
    the median rides of that hour on the window's other complete training days that have rides — those of
    its weekday when there are two or more (a median of two or more is not moved by one odd day), else all
    of them. Never the day itself: a day would pass against its own count, and of two days of a weekday
    each would fail against the other."""

    window: Window
    hourly: dict[dt.datetime, int]  # rides in every zone, per New York local hour of the window

    @functools.cached_property
    def rides(self) -> dict[dt.date, int]:
        per_day: dict[dt.date, int] = {}
        for hour, count in self.hourly.items():
            per_day[hour.date()] = per_day.get(hour.date(), 0) + count
        return {day: n for day, n in per_day.items() if n}

    @property
    def days(self) -> list[dt.date]:
        last = (self.window.end - dt.timedelta(microseconds=1)).date()
        return [
            self.window.start.date() + dt.timedelta(days=n) for n in range((last - self.window.start.date()).days + 1)
        ]

    def _training(self, day: dt.date) -> bool:
        return dt.datetime.combine(day, dt.time()) < self.window.as_of

    def _hours(self, day: dt.date) -> list[dt.datetime]:
        """The day's hours inside the window."""
        midnight = dt.datetime.combine(day, dt.time())
        hours = (midnight + dt.timedelta(hours=h) for h in range(24))
        return [h for h in hours if self.window.start <= h < self.window.end]

    def _in_window(self, day: dt.date) -> float:
        """The share of the day inside the window (1.0 for a complete day)."""
        return len(self._hours(day)) / 24

    def _alike(self, day: dt.date) -> list[dt.date]:
        others = [
            d for d in self.days if d != day and self._training(d) and self._in_window(d) == 1.0 and self.rides.get(d)
        ]
        alike = [d for d in others if d.weekday() == day.weekday()]
        return alike if len(alike) >= 2 else others

    def hour_references(self, day: dt.date) -> dict[dt.time, float]:
        """Per hour of the day (every hour, in the window or not): the median of that hour's rides on its
        alike days; empty when it has none."""
        import statistics

        alike = self._alike(day)
        if not alike:
            return {}
        slots = [dt.time(h) for h in range(24)]
        return {
            t: float(statistics.median(self.hourly.get(dt.datetime.combine(d, t), 0) for d in alike)) for t in slots
        }

    def _reference(self, day: dt.date) -> float | None:
        """The rides of the day's hours in the window on its alike days (the median per hour, summed)."""
        references = self.hour_references(day)
        return sum(references[h.time()] for h in self._hours(day)) if references else None

    def _usual_hours(self, day: dt.date) -> float | None:
        """Of the day's busy hours in the window, the share that rode as usual (USUAL_HOUR of theirs)."""
        references = self.hour_references(day)
        if not references:
            return None
        busy = [h for h in self._hours(day) if references[h.time()] >= BUSY * sum(references.values())]
        usual = [h for h in busy if self.hourly.get(h, 0) >= USUAL_HOUR * references[h.time()]]
        return len(usual) / len(busy) if busy else None

    def _hole_hours(self, day: dt.date) -> int | None:
        """The most busy hours of the day in a row (in the window) each holding under HOLE of theirs (an hour
        whose weekday's holds fewer than HOLE_RIDES is no hole: at a few rides an hour, none is chance)."""
        references = self.hour_references(day)
        if not references:
            return None
        longest = run = 0
        for hour in self._hours(day):
            reference = references[hour.time()]
            busy = reference >= max(BUSY * sum(references.values()), HOLE_RIDES)  # else an empty hour can be chance
            empty = busy and self.hourly.get(hour, 0) < HOLE * reference
            run = run + 1 if empty else 0
            longest = max(longest, run)
        return longest

    def whole(self, day: dt.date) -> bool:
        """Whether the day is whole against its weekday (the rule of the actuals' day check, core/datasets.py;
        a day with nothing to compare with is taken as it is)."""
        reference, rides = self._reference(day), self.rides.get(day, 0)
        if reference is None:
            return rides > 0
        if rides > AT_MOST * reference or (self._hole_hours(day) or 0) >= HOLE_HOURS:
            return False
        return rides >= WHOLE * reference or (self._usual_hours(day) or 0.0) >= USUAL_HOURS

    def rows(self) -> pa.Table:
        days = self.days
        return pa.table(
            {
                "day": pa.array(days, pa.date32()),
                "rides": pa.array([self.rides.get(d, 0) for d in days], pa.int64()),
                "training": pa.array([self._training(d) for d in days]),
                "complete": pa.array([self._in_window(d) == 1.0 for d in days]),
                "reference": pa.array([self._reference(d) for d in days], pa.float64()),
                "usual_hours": pa.array([self._usual_hours(d) for d in days], pa.float64()),
                "hole_hours": pa.array([self._hole_hours(d) for d in days], pa.int64()),
            }
        )

    def loaded(self, day: dt.date) -> bool:
        """Whether raw holds the day: a training day with rides (the checks judge whether it is whole); a
        horizon day whole against its weekday for the part of it in the window — a day with most of its
        trips missing, or a few stray trips of a month not loaded yet (a file carries pickups of the days
        around its month), is not a day whose forecast can be scored."""
        if self._training(day):
            return self.rides.get(day, 0) > 0
        return self.rides.get(day, 0) > 0 and self.whole(day)

    def with_rides(self) -> Intervals:
        """The window's hours of the days raw holds: those the actuals hold a count for."""
        return Intervals.days(d for d in self.days if self.loaded(d)) & Intervals.of([self.window.hours])

    def judged_not_loaded(self) -> Intervals:
        """The window's hours of the days that have trips and were judged not loaded (most of their trips
        missing): the judgement is this window's, against its reference; another window may judge them loaded."""
        thin = (d for d in self.days if self.rides.get(d) and not self.loaded(d))
        return Intervals.days(thin) & Intervals.of([self.window.hours])

    def missing_training_days(self) -> list[dt.date]:
        return [d for d in self.days if self._training(d) and not self.rides.get(d)]


def window_days(counts, window: Window) -> WindowDays:
    """The window's days from its hourly counts (a Spark frame of zone, hour, ride_count)."""
    per_hour = counts.groupBy("hour").agg({"ride_count": "sum"}).collect()
    return WindowDays(window, {r[0]: int(r[1]) for r in per_hour if r[1]})


def day_ranges(days: list[dt.date]) -> str:
    """2024-03-01 – 2024-03-09, 2024-03-12"""
    spans: list[list[dt.date]] = []
    for day in sorted(days):
        if spans and day - spans[-1][1] == dt.timedelta(days=1):
            spans[-1][1] = day
        else:
            spans.append([day, day])
    return ", ".join(f"{a}" if a == b else f"{a} – {b}" for a, b in spans)
