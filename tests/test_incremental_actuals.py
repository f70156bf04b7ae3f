"""compute_actuals counts only what raw changed (forecast/actuals.py, coverage.py): an unchanged raw commits nothing and
counts nothing; a republished day is counted again, and only it; the result equals a from-scratch run on
a fresh lake and an independent count of the published file."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from expected_loads import actuals_rows, expected_actuals, table_actuals

from nyc_taxi.core import datasets as registry
from nyc_taxi.core.catalog import current_snapshot_id, load_table
from nyc_taxi.core.tables import ensure_tables
from nyc_taxi.core.upserts import RowChanges
from nyc_taxi_proving.fixtures import tlc
from nyc_taxi_proving.fixtures.site import add_taxi_month

# the system lane's: the suite's flows count their windows this way (test_training_flow.py's re-run commits nothing)
pytestmark = [pytest.mark.spark, pytest.mark.system]
YEAR, MONTH, ROWS = 2022, 3, 20_000
AS_OF, LOOKBACK, HORIZON = dt.datetime(2022, 3, 20), 14, 24
WINDOW = (AS_OF - dt.timedelta(days=LOOKBACK), AS_OF + dt.timedelta(hours=HORIZON))
WINDOW_HOURS = LOOKBACK * 24 + HORIZON
REPUBLISHED_DAY, CORRECTED_DAY = dt.date(2022, 3, 10), dt.date(2022, 3, 12)
OWN_MONTH = (2023, 5)  # the append test's: no other test's windows reach it


def _load(year=YEAR, month=MONTH):
    from nyc_taxi.ingest import taxi

    taxi.download_published_file(year, month)
    taxi.stage_landed_file(year, month)
    return taxi.merge_into_raw(year, month)


def _compute():
    from nyc_taxi.forecast import steps

    return steps.compute_actuals(AS_OF, LOOKBACK, HORIZON)


def _window_rows(settings=None) -> list[tuple]:
    rows = load_table(registry.YELLOW_RIDES_HOURLY_ACTUALS, settings).scan().to_arrow().to_pylist()
    return table_actuals([r for r in rows if WINDOW[0] <= r["pickup_hour"] < WINDOW[1]])


def _republish(path):
    """The day's trips: a tenth withdrawn, 200 others added; on another day fares corrected (the counts stay)."""
    trips = pq.read_table(path)
    pickups = trips["tpep_pickup_datetime"].to_pylist()
    on_day = [i for i, p in enumerate(pickups) if p is not None and p.date() == REPUBLISHED_DAY]
    withdrawn = set(on_day[::10])
    corrected = {i for i, p in enumerate(pickups) if p is not None and p.date() == CORRECTED_DAY}
    fares = [f + 1.0 if i in corrected else f for i, f in enumerate(trips["fare_amount"].to_pylist())]
    trips = trips.set_column(trips.schema.get_field_index("fare_amount"), "fare_amount", [fares])
    keep = [i for i in range(trips.num_rows) if i not in withdrawn]
    extra = tlc.generate_yellow_month(YEAR, MONTH, rows=2_000, seed=77).cast(trips.schema)
    extra_pickups = extra["tpep_pickup_datetime"].to_pylist()
    added = [i for i, p in enumerate(extra_pickups) if p is not None and p.date() == REPUBLISHED_DAY][:200]
    tlc.write_yellow_month(pa.concat_tables([trips.take(keep), extra.take(added)]), path)
    return len(withdrawn), len(added)


def test_actuals_count_only_what_raw_changed_and_equal_a_fresh_lake(spark, site, settings, tmp_path):
    ensure_tables([registry.YELLOW_TAXI_STAGING, registry.YELLOW_TAXI_RAW])
    path = add_taxi_month(site, YEAR, MONTH, rows=ROWS, seed=31)
    _load()

    first = _compute()
    assert first.summary["counted_hours"] == WINDOW_HOURS  # nothing counted before: the whole window
    assert _window_rows() == actuals_rows(expected_actuals([path], *WINDOW))

    # raw unchanged: nothing counted, nothing committed, and the report says so
    snapshot = current_snapshot_id(registry.YELLOW_RIDES_HOURLY_ACTUALS)
    again = _compute()
    assert (again.summary["counted_hours"], again.outputs[0].committed) == (0, False)
    assert current_snapshot_id(registry.YELLOW_RIDES_HOURLY_ACTUALS) == snapshot

    # the TLC republishes the month: one day's trips change, another day's fares
    withdrawn, added = _republish(path)
    assert withdrawn and added
    _load()
    incremental = _compute()
    assert incremental.summary["counted_hours"] == 2 * 24  # those two days of the window, no more
    changed = incremental.outputs[0].changes
    assert changed.changed > 0  # (and zones new to the window get their whole window: added rows)
    expected = actuals_rows(expected_actuals([path], *WINDOW))
    assert _window_rows() == expected

    # from scratch on a fresh lake, in a process of its own: the same rows
    fresh = tmp_path / "fresh"
    probe = (
        "import datetime as dt\n"
        "from nyc_taxi.core.lakehouse import lakehouse\nfrom nyc_taxi.core.settings import get_settings\n"
        "from nyc_taxi.core.tables import ensure_tables\nfrom nyc_taxi.ingest import taxi\nfrom nyc_taxi.forecast import steps\n"
        "lakehouse(get_settings()).create(); ensure_tables()\n"
        f"taxi.download_published_file({YEAR}, {MONTH}); taxi.stage_landed_file({YEAR}, {MONTH}); taxi.merge_into_raw({YEAR}, {MONTH})\n"
        f"steps.compute_actuals(dt.datetime.fromisoformat('{AS_OF.isoformat()}'), {LOOKBACK}, {HORIZON})\n"
    )
    env = {**os.environ, "STATE_DIR": str(fresh), "SPARK_SERVER": "false"}
    subprocess.run([sys.executable, "-c", probe], env=env, check=True, capture_output=True, timeout=600)
    fresh_settings = settings.model_copy(update={"state_dir": fresh})
    assert _window_rows(fresh_settings) == _window_rows() == expected

    # the actuals commit names the raw snapshot and the hours it counted; the next run reads them back
    table = load_table(registry.YELLOW_RIDES_HOURLY_ACTUALS)
    summary = table.current_snapshot().summary
    assert summary["nyc-taxi.raw-snapshot"] == str(current_snapshot_id(registry.YELLOW_TAXI_RAW))
    assert summary["nyc-taxi.counted-hours"].count("/") == 2  # two days: two intervals
    assert (
        json.loads(table.properties["nyc-taxi.computed-from"])["actuals-snapshot"]
        == table.current_snapshot().snapshot_id
    )


def test_a_window_that_only_adds_rows_appends_them_and_rewrites_no_file(spark, site, settings):
    """The next window overlaps hours counted before, and every zone it counts is one the table holds for
    those hours: its changes only add rows, and the commit appends them with no file of
    the table rewritten or deleted. The window's rows and the earlier window's equal independent counts."""
    ensure_tables([registry.YELLOW_TAXI_STAGING, registry.YELLOW_TAXI_RAW])
    path = add_taxi_month(site, *OWN_MONTH, rows=ROWS, seed=32)
    trips = pq.read_table(path)
    five_zones = pa.compute.add(pa.compute.divide(trips["PULocationID"], 60), 1).cast(trips["PULocationID"].type)
    tlc.write_yellow_month(
        trips.set_column(trips.schema.get_field_index("PULocationID"), "PULocationID", five_zones), path
    )
    _load(*OWN_MONTH)
    from nyc_taxi.forecast import steps

    first_window = (dt.datetime(2023, 5, 8), dt.datetime(2023, 5, 16))
    steps.compute_actuals(dt.datetime(2023, 5, 15), 7, 24)
    before = current_snapshot_id(registry.YELLOW_RIDES_HOURLY_ACTUALS)
    report = steps.compute_actuals(dt.datetime(2023, 5, 22), 7, 24)

    window = (dt.datetime(2023, 5, 15), dt.datetime(2023, 5, 23))
    zones = {zone for zone, _ in expected_actuals([path], *window)}
    assert zones == {zone for zone, _ in expected_actuals([path], *first_window)} and len(zones) == 5
    assert report.summary["counted_hours"] == 7 * 24  # the day both windows share is kept, not counted
    assert report.outputs[0].changes == RowChanges(added=len(zones) * 7 * 24)
    table = load_table(registry.YELLOW_RIDES_HOURLY_ACTUALS)
    commit = table.current_snapshot()
    assert commit.parent_snapshot_id == before
    assert (
        commit.summary.operation.value == "append" and "deleted-data-files" not in commit.summary.additional_properties
    )
    rows = table.scan().to_arrow().to_pylist()
    for start, end in (first_window, window):
        in_window = [r for r in rows if start <= r["pickup_hour"] < end]
        assert table_actuals(in_window) == actuals_rows(expected_actuals([path], start, end))
