"""Trips without a pickup time: kept in raw and counted, and a re-run of their month neither inserts them
again nor commits anything; a republished month updates them in place. Their rows are on no pickup day:
raw's reads of a file's rows must find them all the same (they are limited by source file, not by day)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from expected_loads import check_trip_keys, quality_counts, raw_rows_of, row_checks

from nyc_taxi.core import datasets as registry
from nyc_taxi.core.catalog import current_snapshot_id
from nyc_taxi.core.tables import ensure_tables, pinned_rows
from nyc_taxi_proving.fixtures import tlc
from nyc_taxi_proving.fixtures.site import taxi_path

pytestmark = pytest.mark.spark
RAW, STAGING = registry.YELLOW_TAXI_RAW, registry.YELLOW_TAXI_STAGING
YEAR, MONTH, ROWS = 2020, 2, 3_000


def _publish(site, trips: pa.Table):
    return tlc.write_yellow_month(trips, taxi_path(site, YEAR, MONTH))


def _load() -> dict[str, int]:
    """The DAG's three steps; the merge's quality counts."""
    from nyc_taxi.ingest import taxi

    taxi.download_published_file(YEAR, MONTH)
    taxi.stage_landed_file(YEAR, MONTH)
    report = taxi.merge_into_raw(YEAR, MONTH)
    return row_checks(report.inputs[0].checks)


def test_trips_without_a_pickup_time_are_loaded_once_and_updated_in_place(spark, site, settings, monkeypatch):
    from nyc_taxi.ingest import staging

    ensure_tables([STAGING, RAW])
    read = []  # the stage's reads of what it wrote
    monkeypatch.setattr(staging, "pinned_rows", lambda *args: read.append(args) or pinned_rows(*args))
    trips = tlc.generate_yellow_month(YEAR, MONTH, rows=ROWS, seed=61)
    missing = np.zeros(ROWS, dtype=bool)
    missing[np.random.default_rng(61).choice(ROWS, size=20, replace=False)] = True  # under the 1 % that stops a month
    pickup = trips.column("tpep_pickup_datetime")
    trips = trips.set_column(
        trips.schema.get_field_index("tpep_pickup_datetime"),
        "tpep_pickup_datetime",
        pc.if_else(pa.array(missing), pa.nulls(ROWS, pickup.type), pickup),
    )
    path = _publish(site, trips)
    expected = quality_counts(path, YEAR, MONTH)
    assert expected["pickup_present"] == 20

    assert _load() == expected
    assert not read  # the month's checks were counted in the stage's pass and from its manifests: no row read again
    raw = raw_rows_of(path)
    assert (raw.num_rows, raw["pickup_datetime"].null_count) == (ROWS, 20)
    check_trip_keys(raw)
    keys = set(raw["row_key"].to_pylist())

    # The same file again: raw already holds every row, those on no day included.
    before = current_snapshot_id(RAW, settings)
    assert _load() == expected
    assert current_snapshot_id(RAW, settings) == before
    assert raw_rows_of(path).num_rows == ROWS

    # Republished with other fares, for a trip without a pickup time and one with: updated, not added.
    changed = [int(np.flatnonzero(missing)[0]), int(np.flatnonzero(~missing)[0])]
    fares = trips["fare_amount"].to_numpy().copy()
    fares[changed] = [1234.5, 2345.6]
    trips = trips.set_column(trips.schema.get_field_index("fare_amount"), "fare_amount", pa.array(fares))
    _publish(site, trips)
    assert _load() == expected
    assert current_snapshot_id(RAW, settings) != before
    raw = raw_rows_of(path)
    assert (raw.num_rows, raw["pickup_datetime"].null_count) == (ROWS, 20)
    assert set(raw["row_key"].to_pylist()) == keys  # the same trips: updated in place, under their keys
    updated = raw.filter(pc.is_in(raw["fare_amount"], pa.array([1234.5, 2345.6])))
    assert sorted(updated["pickup_datetime"].is_null().to_pylist()) == [False, True]
