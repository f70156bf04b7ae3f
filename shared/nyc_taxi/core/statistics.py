"""Counts measured while a snapshot was written, kept in the table's metadata for a later step.

A write that measures its rows in the same pass (Spark's ``observe``) records the counts in a table
property naming the snapshot they describe; a later step reads them from the table's metadata instead
of scanning the rows again. The record also holds a digest of the expressions that counted, so counts
taken by another definition (a changed check, another month's bounds) or of another snapshot are
never reused: the reader then counts for itself. It also keeps the snapshot's check results, for the
runs that read that snapshot (``core/quality.py``).

Why a property and not a statistics file attached to the snapshot (Iceberg's Puffin blobs): pyiceberg
0.12 refuses to load a table whose statistics name a blob type it does not know, and every reader of
the table would fail.
"""

from __future__ import annotations

import hashlib
import json
import uuid

from nyc_taxi.core.datasets import Table
from nyc_taxi.core.settings import Settings
from nyc_taxi.core.tables import set_property

COUNTS_PROPERTY = "nyc-taxi.counts"  # {"snapshot-id", "definition-sha256", "counts": {...}, "results": [...]}


def definition_digest(aggregates: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(aggregates, sort_keys=True).encode()).hexdigest()


def observing(frame, aggregates: dict[str, str]):
    """``frame`` with ``aggregates`` (name: Spark SQL aggregate expression) computed in the same pass
    as whatever action runs it, and the Observation that holds them after that action."""
    from pyspark.sql import Observation
    from pyspark.sql.functions import expr

    observation = Observation(f"counts-{uuid.uuid4().hex[:8]}")
    return frame.observe(observation, *(expr(sql).alias(name) for name, sql in aggregates.items())), observation


def record_counts(
    table: Table, snapshot_id: int, aggregates: dict[str, str], counts: dict, settings: Settings, results=()
):
    """Record ``counts`` (measured by ``aggregates`` on the rows of ``snapshot_id``) and the check results
    judged from them in ``table``'s metadata: a metadata-only commit (no snapshot)."""
    record = {
        "snapshot-id": snapshot_id,
        "definition-sha256": definition_digest(aggregates),
        "counts": {name: int(value or 0) for name, value in counts.items()},
        "results": [r.as_dict() for r in results],
    }
    set_property(table, COUNTS_PROPERTY, json.dumps(record, sort_keys=True, default=str), settings)


def recorded(table, snapshot_id) -> dict:
    """The record kept for ``snapshot_id`` of ``table`` (a pyiceberg table); empty when it is of another."""
    try:
        record = json.loads(table.properties.get(COUNTS_PROPERTY) or "{}")
    except ValueError:  # not written by record_counts
        return {}
    return record if snapshot_id is not None and str(record.get("snapshot-id")) == str(snapshot_id) else {}


def recorded_counts(table, snapshot_id: int, aggregates: dict[str, str]) -> dict[str, int] | None:
    """The counts ``aggregates`` measured on ``snapshot_id``'s rows as recorded in ``table`` (a
    pyiceberg table); None when none were recorded for that snapshot by that definition."""
    record = recorded(table, snapshot_id)
    if record.get("definition-sha256") != definition_digest(aggregates):
        return None
    counts = record.get("counts", {})
    return {name: int(counts[name]) for name in aggregates} if set(aggregates) <= set(counts) else None
