"""The profile of a table's snapshot: rows, columns, size, and per column its nulls, minimum and maximum
and, where it is exact and cheap, its distinct values.

Most of it is already in Iceberg's manifests, which record for every data file its rows, size, and per
column the null count and the lower and upper bounds: a profile reads them, as DataHub's own Iceberg
profiler does, and no data. Bounds are exact for numbers, dates and times; a string's bounds are cut to
16 characters, so strings get no minimum or maximum (as in DataHub's profiler). Distinct counts do not
add up across files: a step counts them for the columns declared ``categorical``, in the pass that
already writes the rows, when those rows are the whole snapshot (a staging table's load).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass

from nyc_taxi.core.datasets import Table

BOUNDED_TYPES = {"INT", "BIGINT", "DOUBLE", "DATE", "TIMESTAMP", "TIMESTAMP_NTZ"}
NUMERIC_TYPES = {"INT", "BIGINT", "DOUBLE"}


@dataclass(frozen=True)
class FieldProfile:
    name: str
    nulls: int | None
    null_share: float | None
    min: str | None = None  # as text (numbers, ISO dates and times), as DataHub's profile holds them
    max: str | None = None
    distinct: int | None = None
    numeric: bool = False  # min and max are numbers (OpenLineage's column metrics take only those)


@dataclass(frozen=True)
class Profile:
    dataset: str
    version: str  # the snapshot id
    at_ms: int  # when the snapshot was committed
    rows: int
    columns: int
    size_bytes: int
    files: int
    fields: tuple[FieldProfile, ...]

    def field(self, name: str) -> FieldProfile:
        return next(f for f in self.fields if f.name == name)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Profile:
        return cls(**{**data, "fields": tuple(FieldProfile(**f) for f in data["fields"])})


def distinct_aggregates(table: Table) -> dict[str, str]:
    """The distinct values of the table's categorical columns, as aggregates Spark can observe in a write's
    pass (``observe`` takes no DISTINCT aggregate: the set of values, then its size)."""
    return {f"distinct:{c.name}": f"size(collect_set({c.name}))" for c in table.columns if c.categorical}


def _text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return repr(value) if isinstance(value, float) else str(value)


def profile(table: Table, iceberg, snapshot_id: int, counts: dict | None = None) -> Profile:
    """The profile of ``snapshot_id`` of ``table`` (``iceberg``: the pyiceberg table) from its manifests;
    ``counts``: distinct counts measured on that snapshot's rows (``distinct_aggregates``), if any."""
    snapshot = iceberg.snapshot_by_id(snapshot_id)
    files = iceberg.inspect.data_files(snapshot_id).select(["record_count", "file_size_in_bytes", "readable_metrics"])
    listed = files.to_pylist()
    rows = sum(f["record_count"] for f in listed)
    fields = []
    for column in table.columns:
        metrics = [f["readable_metrics"][column.name] for f in listed]
        nulls = [m["null_value_count"] for m in metrics]
        known = all(n is not None for n in nulls)
        total = sum(nulls) if known else None
        low = high = None
        valued = [m for m in metrics if (m["value_count"] or 0) > (m["null_value_count"] or 0)]  # not all NULL
        if column.type in BOUNDED_TYPES and valued and all(m["lower_bound"] is not None for m in valued):
            low, high = min(m["lower_bound"] for m in valued), max(m["upper_bound"] for m in valued)
        distinct = (counts or {}).get(f"distinct:{column.name}")
        fields.append(
            FieldProfile(
                column.name,
                total,
                total / rows if known and rows else (0.0 if known else None),
                _text(low),
                _text(high),
                int(distinct) if distinct is not None else None,
                column.type in NUMERIC_TYPES,
            )
        )
    return Profile(
        dataset=table.name,
        version=str(snapshot_id),
        at_ms=snapshot.timestamp_ms,
        rows=rows,
        columns=len(table.columns),
        size_bytes=sum(f["file_size_in_bytes"] for f in listed),
        files=len(listed),
        fields=tuple(fields),
    )
