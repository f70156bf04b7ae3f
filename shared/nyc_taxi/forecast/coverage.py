"""What the actuals table holds as counted from which snapshot of raw: the record that lets
``compute_actuals`` count again only the hours whose trips raw changed since (its incremental path)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from nyc_taxi.core.intervals import Intervals
from nyc_taxi.core.settings import Settings
from nyc_taxi.core.snapshots import data_changes
from nyc_taxi.core.tables import set_property
from nyc_taxi.forecast.tables import ACTUALS

COMPUTED_FROM = "nyc-taxi.computed-from"  # the actuals table's property: what its rows were counted from
RAW_SNAPSHOT = "nyc-taxi.raw-snapshot"  # an actuals commit's summary: the raw snapshot it counted from
COUNTED_HOURS = "nyc-taxi.counted-hours"  # and the hours it counted there


@dataclass(frozen=True)
class Coverage:
    """The hours the actuals table holds as raw's trips counted at one raw snapshot. Every run that counts
    records it as a table property naming the actuals snapshot it describes: a commit to the table by
    anything else voids it, and the next run counts its whole window again."""

    actuals_snapshot: int | None
    raw_snapshot: int
    hours: Intervals

    @classmethod
    def of(cls, table) -> Coverage | None:
        try:
            record = json.loads(table.properties.get(COMPUTED_FROM) or "null")
        except ValueError:
            return None
        current = table.current_snapshot()
        if not record or record.get("actuals-snapshot") != (current.snapshot_id if current else None):
            return None
        return cls(record["actuals-snapshot"], record["raw-snapshot"], Intervals.parse(record["hours"]))

    def record(self, settings: Settings) -> None:
        """A metadata-only commit (no snapshot)."""
        value = {
            "actuals-snapshot": self.actuals_snapshot,
            "raw-snapshot": self.raw_snapshot,
            "hours": self.hours.text(),
        }
        set_property(ACTUALS, COMPUTED_FROM, json.dumps(value), settings)

    def still_counted(self, raw_table, raw_snapshot) -> Intervals:
        """Its hours that raw has not changed since: less the days of every data file raw's later commits
        added or deleted (Iceberg's manifests; no data read). None of them once the recorded snapshot
        has been expired."""
        if raw_snapshot is None:
            return Intervals()
        if self.raw_snapshot == raw_snapshot.snapshot_id:
            return self.hours
        changes = data_changes(raw_table, self.raw_snapshot, "pickup_datetime", raw_snapshot.snapshot_id)
        if changes is None or not all(c.bounded for c in changes):
            return Intervals()
        return self.hours - Intervals.days(day for c in changes if c.low is not None for day in _days(c.low, c.high))


def _days(low: dt.datetime, high: dt.datetime) -> list[dt.date]:
    return [low.date() + dt.timedelta(days=n) for n in range((high.date() - low.date()).days + 1)]
