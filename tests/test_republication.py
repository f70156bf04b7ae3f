"""A republished month replaces its month: after any load, raw holds exactly the file the source
publishes now, in one commit, without touching other months (ingest/taxi.py, ingest/weather.py).

Each case publishes a month, loads it, republishes it in another shape and loads it again, through the
ingestion steps the DAG tasks run (download from the fixture server, stage, merge). Raw is compared
with an independent pyarrow reading of the published file, row for row; the other month's data files
must be the very same objects; one commit must carry what changed, by kind, and which version it
replaced. The Airflow path of the same steps is in test_airflow_dags.py.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from expected_loads import check_trip_keys, comparable, expected_taxi_rows, expected_weather, raw_rows_of

from nyc_taxi.core import datasets as registry
from nyc_taxi.core.catalog import load_table
from nyc_taxi.core.tables import ensure_tables
from nyc_taxi_proving.fixtures import tlc
from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month, weather_path

# the merge path's variants: the system lane's (the demo and test_airflow_dags.py republish a month in the suite)
pytestmark = [pytest.mark.spark, pytest.mark.system]
RAW = registry.YELLOW_TAXI_RAW
ROWS = 3_000
OTHER = (2021, 4)  # a month loaded beside the republished one: never read or rewritten by its loads


def _load(year: int, month: int):
    """The DAG's three steps for a month; the merge's report."""
    from nyc_taxi.ingest import taxi

    taxi.download_published_file(year, month)
    taxi.stage_landed_file(year, month)
    return taxi.merge_into_raw(year, month)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files_of(file_name: str) -> set[str]:
    """raw's data files holding rows of one source file (by the exact bounds Iceberg keeps of source_file)."""
    files = load_table(RAW).inspect.files().select(["file_path", "readable_metrics"]).to_pylist()
    return {
        f["file_path"]
        for f in files
        if f["readable_metrics"]["source_file"]["lower_bound"]
        <= file_name
        <= f["readable_metrics"]["source_file"]["upper_bound"]
    }


def _snapshots() -> list:
    return sorted(load_table(RAW).snapshots(), key=lambda s: s.timestamp_ms)


@pytest.fixture(scope="module")
def other_month(spark, site, settings):
    """Another month in raw, loaded once for the module."""
    ensure_tables([registry.YELLOW_TAXI_STAGING, RAW])
    path = add_taxi_month(site, *OTHER, rows=ROWS, seed=4)
    _load(*OTHER)
    return path


def _rewrite(path: Path, trips: pa.Table) -> None:
    tlc.write_yellow_month(trips, path)


def _with_fares(trips: pa.Table, rows: list[int], delta: float) -> pa.Table:
    fares = trips["fare_amount"].to_numpy().copy()
    fares[rows] += delta
    return trips.set_column(trips.schema.get_field_index("fare_amount"), "fare_amount", pa.array(fares))


def _fewer(trips, rng):
    """1,000 trips fewer, others than the last ones (the reproduction: 19,000 of 20,000)."""
    keep = np.sort(rng.choice(trips.num_rows, size=trips.num_rows - 1_000, replace=False))
    return trips.take(pa.array(keep)), {"added": 0, "changed": 0, "removed": 1_000}


def _more(trips, rng):
    """500 more trips, at the end: a late batch of the month."""
    extra = tlc.generate_yellow_month(2021, 3, rows=500, seed=99)
    return pa.concat_tables([trips, extra.cast(trips.schema)]), {"added": 500, "changed": 0, "removed": 0}


def _inserted_near_the_start_and_some_changed(trips, rng):
    """One trip inserted at row 3 (every later trip moves down a place) and 20 fares corrected."""
    changed = sorted(rng.choice(np.arange(100, trips.num_rows), size=20, replace=False).tolist())
    corrected = _with_fares(trips, changed, 1.25)
    inserted = tlc.generate_yellow_month(2021, 3, rows=100, seed=98).cast(trips.schema).slice(50, 1)
    return pa.concat_tables([corrected.slice(0, 3), inserted, corrected.slice(3)]), {
        "added": 1,
        "changed": 20,
        "removed": 0,
    }


def _one_removed_in_the_middle(trips, rng):
    middle = trips.num_rows // 2
    return pa.concat_tables([trips.slice(0, middle), trips.slice(middle + 1)]), {"added": 0, "changed": 0, "removed": 1}


@pytest.mark.parametrize(
    "republish", [_fewer, _more, _inserted_near_the_start_and_some_changed, _one_removed_in_the_middle]
)
def test_a_republished_month_leaves_raw_equal_to_the_new_file_in_one_commit(other_month, site, republish):
    year, month = 2021, 3
    path = add_taxi_month(site, year, month, rows=ROWS, seed=len(republish.__name__))
    first = _load(year, month)
    first_version = f"{path.name}@sha256:{_sha256(path)}"
    assert first.outputs[0].source_version == first_version
    before_other = _files_of(other_month.name)
    before_keys = dict(zip(*[raw_rows_of(path)[c].to_pylist() for c in ("row_key", "fare_amount")], strict=True))
    before_files = _files_of(path.name)
    snapshots = len(_snapshots())

    trips, expected_changes = republish(pq.read_table(path), np.random.default_rng(7))
    _rewrite(path, trips)
    report = _load(year, month)

    got = raw_rows_of(path)
    assert comparable(got).equals(comparable(expected_taxi_rows(path)))  # the new file, row for row
    check_trip_keys(got)
    assert _files_of(other_month.name) == before_other  # the other month: the same data files, untouched
    assert comparable(raw_rows_of(other_month)).equals(comparable(expected_taxi_rows(other_month)))
    after = _snapshots()
    assert len(after) == snapshots + 1  # one commit
    summary = after[-1].summary
    counts = {kind: int(summary[f"nyc-taxi.rows-{kind}"]) for kind in ("added", "changed", "removed")}
    assert counts == expected_changes
    assert summary["nyc-taxi.landed-version"] == f"{path.name}@sha256:{_sha256(path)}"
    assert summary["nyc-taxi.replaced-version"] == first_version
    written = report.outputs[0]
    assert (written.changes.added, written.changes.changed, written.changes.removed) == tuple(expected_changes.values())
    assert (written.source_version, written.replaced_version) == (summary["nyc-taxi.landed-version"], first_version)
    # trips the republication did not change kept their keys and were not rewritten one by one
    unchanged = {k: v for k, v in zip(got["row_key"].to_pylist(), got["fare_amount"].to_pylist(), strict=True)}
    kept = sum(1 for k, v in unchanged.items() if before_keys.get(k) == v)
    assert kept == ROWS - expected_changes["changed"] - expected_changes["removed"]
    if expected_changes["removed"] == 0 and expected_changes["changed"] == 0:
        assert before_files <= _files_of(path.name)  # only added: no data file of the month rewritten

    # loading the same version again commits nothing
    _load(year, month)
    assert len(_snapshots()) == snapshots + 1


def test_only_the_days_a_republication_changes_are_rewritten(other_month, site):
    """A corrected fare on one day rewrites that day's data files, not the month's."""
    year, month = 2021, 2
    path = add_taxi_month(site, year, month, rows=ROWS, seed=21)
    _load(year, month)
    trips = pq.read_table(path)
    pickups = trips["tpep_pickup_datetime"].to_pylist()
    day = pickups[ROWS // 2].date()
    on_day = [i for i, p in enumerate(pickups) if p is not None and p.date() == day][:5]
    days = {f["file_path"]: f["partition"]["pickup_datetime_day"] for f in load_table(RAW).inspect.files().to_pylist()}
    _rewrite(path, _with_fares(trips, on_day, 2.0))
    assert _load(year, month).outputs[0].changes.changed == 5
    now = {f["file_path"] for f in load_table(RAW).inspect.files().to_pylist()}
    assert {days[p] for p in days if p not in now} == {day}  # only that day's data files were rewritten
    assert comparable(raw_rows_of(path)).equals(comparable(expected_taxi_rows(path)))


def test_a_concurrent_load_of_another_month_during_the_republication_leaves_both_months_exact(
    other_month, site, settings, monkeypatch
):
    """Another process loads a new month between the republication's decision and its commit (the MERGE
    then commits on top of it): both months exact, the new one's files untouched by the MERGE."""
    from nyc_taxi.core import upserts

    year, month = 2021, 5
    path = add_taxi_month(site, year, month, rows=ROWS, seed=51)
    _load(year, month)
    trips = pq.read_table(path)
    _rewrite(path, trips.slice(0, ROWS - 300))
    newcomer = add_taxi_month(site, 2021, 6, rows=ROWS, seed=61)
    from nyc_taxi.ingest import taxi

    taxi.download_published_file(year, month)
    taxi.stage_landed_file(year, month)  # staging holds the republication; the other process restages it

    real = upserts.commit_properties
    loaded = []

    def another_writer_first(spark, properties):
        if not loaded:  # once: the other month's whole load, in a process of its own, commits first
            probe = (
                "from nyc_taxi.ingest import taxi\n"
                "taxi.download_published_file(2021, 6); taxi.stage_landed_file(2021, 6); taxi.merge_into_raw(2021, 6)\n"
            )
            env = {**os.environ, "SPARK_SERVER": "false"}
            subprocess.run([sys.executable, "-c", probe], env=env, check=True, capture_output=True, timeout=600)
            loaded.append(_snapshots()[-1].snapshot_id)
        return real(spark, properties)

    monkeypatch.setattr(upserts, "commit_properties", another_writer_first)
    report = taxi.merge_into_raw(year, month)

    assert loaded, "the other month did not load during the republication"
    assert report.outputs[0].changes.removed == 300
    assert _snapshots()[-2].snapshot_id == loaded[0]  # the republication committed on top of the other load
    for published in (path, newcomer, other_month):
        assert comparable(raw_rows_of(published)).equals(comparable(expected_taxi_rows(published)))
    check_trip_keys(raw_rows_of(newcomer))


def test_a_weather_month_republished_with_a_gap_is_refused_and_one_through_fewer_days_leaves_raw_equal_to_it(
    spark, site
):
    """The current month's preliminary files through day 20, loaded. NOAA republishes them with day 12
    and Queens gone: the merge refuses (every_county_day, an error check) and raw keeps its version. Then
    republished through day 15 only, every county and day present: raw holds exactly those files, the five
    days after them removed in one commit that names the version it replaced."""
    from nyc_taxi.core.quality import ChecksFailed
    from nyc_taxi.ingest import weather

    def load():
        weather.download_published_files(2021, 7)
        weather.stage_landed_files(2021, 7)
        return weather.merge_into_raw(2021, 7)

    def month_in_raw():
        rows = load_table(registry.WEATHER_RAW).scan().to_arrow()
        return {
            (r["county_code"], r["date"]): {c: r[c] for c in ("tmax_c", "tmin_c", "tavg_c", "prcp_mm")}
            for r in rows.filter(pc.equal(pc.month(rows["date"]), 7)).to_pylist()
        }

    ensure_tables([registry.WEATHER_STAGING, registry.WEATHER_RAW])
    add_weather_month(site, 2021, 7, seed=3, through_day=20)  # the current month: -prelim, 20 days so far
    first = load()
    assert first.outputs[0].changes.added == 5 * 20
    loaded = month_in_raw()
    assert loaded == expected_weather(site, 2021, 7, "prelim")
    # republished: day 12 is gone (-999.99 for every variable), and Queens too
    for var in ("prcp", "tavg", "tmax", "tmin"):
        path = weather_path(site, 2021, 7, var, "prelim")
        lines = []
        for line in path.read_text().split("\n"):
            fields = line.split(",")
            fields[6 + 11] = f"{-999.99:9.2f}"
            if fields[1] != "30081":
                lines.append(",".join(fields))
        path.write_bytes("\n".join(lines).encode())
    snapshot = load_table(registry.WEATHER_RAW).current_snapshot().snapshot_id
    with pytest.raises(ChecksFailed, match="every_county_day") as refused:
        load()
    assert [(r.check, r.status) for r in refused.value.results if r.status != "pass"] == [("every_county_day", "fail")]
    assert load_table(registry.WEATHER_RAW).current_snapshot().snapshot_id == snapshot
    assert month_in_raw() == loaded

    add_weather_month(site, 2021, 7, seed=3, through_day=15)  # republished through day 15, nothing missing
    report = load()
    expected = expected_weather(site, 2021, 7, "prelim")
    assert month_in_raw() == expected and len(expected) == 5 * 15
    changes = report.outputs[0].changes
    assert (changes.added, changes.changed, changes.removed) == (0, 0, 5 * 5)  # days 16 to 20 of each county
    after = load_table(registry.WEATHER_RAW)
    assert after.current_snapshot().parent_snapshot_id == snapshot
    assert after.current_snapshot().summary["nyc-taxi.rows-removed"] == "25"
    assert report.outputs[0].replaced_version == first.outputs[0].source_version != report.outputs[0].source_version


def test_a_preliminary_file_never_removes_a_final_value(spark, site, monkeypatch):
    """The month's preliminary files (20 days), then its final ones (every day); then the preliminary
    ones staged again (they are still in the landing area): raw keeps every final county-day as it was."""
    from nyc_taxi.ingest import weather

    ensure_tables([registry.WEATHER_STAGING, registry.WEATHER_RAW])
    add_weather_month(site, 2021, 8, seed=5, through_day=20)
    for step in (weather.download_published_files, weather.stage_landed_files, weather.merge_into_raw):
        step(2021, 8)
    add_weather_month(site, 2021, 8, seed=6)  # NOAA publishes the final files
    for step in (weather.download_published_files, weather.stage_landed_files, weather.merge_into_raw):
        step(2021, 8)
    final = load_table(registry.WEATHER_RAW)
    snapshot = final.current_snapshot().snapshot_id
    monkeypatch.setattr(weather, "STATUSES", ("prelim", "scaled"))  # the landed preliminary files staged again
    weather.stage_landed_files(2021, 8)
    report = weather.merge_into_raw(2021, 8)
    assert report.outputs[0].committed is False
    assert load_table(registry.WEATHER_RAW).current_snapshot().snapshot_id == snapshot


def test_a_source_that_publishes_a_then_b_then_a_then_b_lands_each_and_keeps_each_version_once(site):
    """A version the lake kept before is recognised by its content: the TLC publishes A, B, A, B (or the
    demo runs twice on one state) and every download lands what is published now, keeping each replaced
    version once, under its SHA-256, with its bytes."""
    from nyc_taxi.core.lakehouse import lakehouse
    from nyc_taxi.ingest import taxi
    from nyc_taxi.ingest.download import retained_location

    year, month = 2021, 9
    published = add_taxi_month(site, year, month, rows=500, seed=1)
    a = published.read_bytes()
    b = add_taxi_month(site, year, month, rows=400, seed=2).read_bytes()
    landed = None
    for content in (a, b, a, b):
        published.write_bytes(content)
        report = taxi.download_published_file(year, month)
        (landed,) = report.outputs[0].locations
        assert Path(landed).read_bytes() == content and report.summary["fetched"]
    for content in (a, b):
        digest = hashlib.sha256(content).hexdigest()
        kept = Path(retained_location(landed, digest))
        assert kept.read_bytes() == content
    versions = [p for p in Path(landed).parent.glob("versions/*/*") if p.name == published.name]
    assert len(versions) == 2 and lakehouse().profile == "local"
