"""The stage counts the staging table's checks in the pass that writes staging, and records them for the
snapshot it wrote (core/statistics.py). The merge judges the counts recorded for the snapshot it
merges without scanning staging again, and counts for itself when the record is another snapshot's or
another definition's. Every count is checked against an independent count over the published file."""

from __future__ import annotations

import json

import pytest
from expected_loads import quality_counts, row_checks

from nyc_taxi.core import datasets as registry
from nyc_taxi.core.catalog import load_table
from nyc_taxi.core.statistics import COUNTS_PROPERTY
from nyc_taxi.core.tables import ensure_tables
from nyc_taxi_proving.fixtures.site import add_taxi_month

# the merge path's variants: the system lane's (every merge of the suite reads the recorded counts)
pytestmark = [pytest.mark.spark, pytest.mark.system]
RAW, STAGING = registry.YELLOW_TAXI_RAW, registry.YELLOW_TAXI_STAGING


def _stage(site, year: int, month: int, rows: int, seed: int) -> tuple[dict[str, int], dict]:
    """Download and stage a month; the independent counts of its file, and staging's record."""
    from nyc_taxi.ingest import taxi

    path = add_taxi_month(site, year, month, rows=rows, seed=seed)
    taxi.download_published_file(year, month)
    taxi.stage_landed_file(year, month)
    table = load_table(STAGING)
    record = json.loads(table.properties[COUNTS_PROPERTY])
    assert record["snapshot-id"] == table.current_snapshot().snapshot_id
    expected = quality_counts(path, year, month)
    counts = record["counts"]
    assert {name: counts[name] for name in expected} == expected
    assert all(counts[f"{name}:rows"] == rows for name in expected)
    assert (counts["rows_as_landed"], counts["rows_as_landed:rows"], counts["rows_as_landed:expected"]) == (
        0,
        rows,
        rows,
    )
    assert {r["check"]: r["failing"] for r in record["results"] if r["kind"] != "row_count"} == expected
    return expected, record


def _rewrite_record(record: dict | str) -> None:
    with load_table(STAGING).transaction() as change:
        change.set_properties({COUNTS_PROPERTY: record if isinstance(record, str) else json.dumps(record)})


def _merged_checks(year: int, month: int) -> dict[str, int]:
    from nyc_taxi.ingest import taxi

    report = taxi.merge_into_raw(year, month)
    return row_checks(report.inputs[0].checks)


def test_the_merge_reports_the_counts_the_stage_recorded_and_counts_itself_when_none_fit(spark, site, settings):
    ensure_tables([STAGING, RAW])
    expected, record = _stage(site, 2021, 3, rows=5_000, seed=31)
    assert expected["pickup_in_month"] > 0 and expected["total_positive"] > 0  # counts worth checking
    assert _merged_checks(2021, 3) == expected

    # The merge takes the record for its snapshot as it is: counts no scan could give show it read them.
    expected, record = _stage(site, 2021, 4, rows=4_000, seed=32)
    recorded = {**record["counts"], **{name: rows + 1 for name, rows in expected.items()}}
    _rewrite_record({**record, "counts": recorded})
    assert _merged_checks(2021, 4) == {name: rows + 1 for name, rows in expected.items()}
    # So does the merge of a month raw holds (a republication): its content hash needs a scan, its counts not.
    expected, record = _stage(site, 2021, 4, rows=3_500, seed=36)
    _rewrite_record({**record, "counts": {**record["counts"], **{name: rows + 1 for name, rows in expected.items()}}})
    assert _merged_checks(2021, 4) == {name: rows + 1 for name, rows in expected.items()}

    # A record of another snapshot, or counted by another definition, is not used: the merge scans.
    previous = record["snapshot-id"]
    expected, record = _stage(site, 2021, 5, rows=3_000, seed=33)
    _rewrite_record({**record, "snapshot-id": previous, "counts": recorded})
    assert _merged_checks(2021, 5) == expected
    expected, record = _stage(site, 2021, 6, rows=2_000, seed=34)
    _rewrite_record({**record, "definition-sha256": "0" * 64, "counts": recorded})
    assert _merged_checks(2021, 6) == expected
    expected, record = _stage(site, 2021, 7, rows=1_000, seed=35)
    _rewrite_record("counted by hand")  # not a record at all
    assert _merged_checks(2021, 7) == expected
