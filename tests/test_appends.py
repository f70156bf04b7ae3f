"""A new taxi month joins raw as the files staging wrote, with no second write (core/appends.py):
raw's snapshot lists them in raw's own location with the metrics they were written with, the rows are
the source file's, a writer that decided on an older raw cannot append the batch again, and each
table owns its copy (expiring staging's snapshots leaves raw whole). A
staging table of another shape (made by an older version) still loads, by writing the rows."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
import re
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.parquet as pq
import pytest
from expected_loads import comparable, expected_taxi_rows, raw_rows_of

from nyc_taxi.core import datasets as registry
from nyc_taxi.core.appends import APPENDED_FROM, append_staged_files
from nyc_taxi.core.catalog import load_table
from nyc_taxi.core.commits import lost_race
from nyc_taxi.core.naming import spark_table, table_location
from nyc_taxi.core.tables import ensure_tables
from nyc_taxi_proving.fixtures.site import add_taxi_month

# the merge path's variants: the system lane's (every new month of the suite joins raw this way)
pytestmark = [pytest.mark.spark, pytest.mark.guards, pytest.mark.system]
RAW, STAGING = registry.YELLOW_TAXI_RAW, registry.YELLOW_TAXI_STAGING
METRICS = ("partition", "record_count", "file_size_in_bytes", "value_counts", "null_value_counts")
BOUNDS = ("lower_bounds", "upper_bounds")


def _load(year: int, month: int, steps: int = 3):
    """Download, stage and merge a month (the first ``steps`` of them); the last step's report."""
    from nyc_taxi.ingest import taxi

    for step in (taxi.download_published_file, taxi.stage_landed_file, taxi.merge_into_raw)[:steps]:
        report = step(year, month)
    return report


def _files(table: registry.Table, snapshot_id: int) -> dict[str, dict]:
    """The table's data files at a snapshot, by path."""
    return {f["file_path"]: f for f in load_table(table).inspect.files(snapshot_id).to_pylist()}


def _path(location: str) -> str:
    return urlparse(location).path if location.startswith("file:") else location


def test_a_new_month_joins_raw_as_the_files_staging_wrote_and_each_table_owns_its_copy(spark, site, settings):
    ensure_tables([STAGING, RAW])
    november = add_taxi_month(site, 2022, 11, rows=6_000, seed=21)
    report = _load(2022, 11)
    staged = load_table(STAGING).current_snapshot().snapshot_id
    raw = load_table(RAW).current_snapshot()
    assert report.summary["merged_rows"] == 6_000
    assert raw.summary.operation.value == "append" and raw.summary[APPENDED_FROM] == f"{STAGING.name}@{staged}"

    staged_files = _files(STAGING, staged)
    before = _files(RAW, raw.parent_snapshot_id) if raw.parent_snapshot_id else {}
    added = {path: f for path, f in _files(RAW, raw.snapshot_id).items() if path not in before}
    assert len(added) == len(staged_files) > 1  # one file per pickup day at least
    raw_data = table_location(RAW, settings).removeprefix("file://") + "/data/"
    by_name = {os.path.basename(p): f for p, f in staged_files.items()}
    for path, file in added.items():
        assert _path(path).startswith(raw_data), path  # raw's own location
        copied = re.fullmatch(r"[0-9a-f]{12}-(.+)", os.path.basename(path))  # <its attempt>-<the staged file's name>
        twin = by_name[copied.group(1)]
        assert os.path.samefile(_path(path), _path(twin["file_path"]))  # the very bytes staging wrote
        for field in METRICS + BOUNDS:  # and the metrics they were written with: raw prunes by them
            assert file[field] == twin[field], field
        assert pq.ParquetFile(_path(path)).metadata.row_group(0).column(0).compression == "ZSTD"  # raw's codec
    assert comparable(raw_rows_of(november)).equals(comparable(expected_taxi_rows(november)))

    # the same month again: raw holds exactly the batch, nothing is committed
    again = _load(2022, 11)
    assert again.summary["merged_rows"] == 0 and load_table(RAW).current_snapshot().snapshot_id == raw.snapshot_id

    # the next month replaces staging; expiring staging's old snapshots deletes the files only it held
    add_taxi_month(site, 2022, 12, rows=3_000, seed=22)
    _load(2022, 12)
    # a writer that decided on raw as it was before December's append cannot append December again
    staged, december = load_table(STAGING).current_snapshot().snapshot_id, load_table(RAW).current_snapshot()
    with pytest.raises(Exception) as lost:
        append_staged_files(spark, STAGING, staged, RAW, december.parent_snapshot_id, settings)
    assert lost_race(lost.value) is not None  # a lost race: retry_on_conflict decides again on raw as it is
    assert load_table(RAW).current_snapshot().snapshot_id == december.snapshot_id
    # nor can one whose batch is not in raw yet, and the copies it made for its commit are removed
    add_taxi_month(site, 2023, 1, rows=2_000, seed=24)
    _load(2023, 1, steps=2)  # downloaded and staged, not merged
    january = load_table(STAGING).current_snapshot().snapshot_id
    with pytest.raises(Exception) as lost:
        append_staged_files(spark, STAGING, january, RAW, december.parent_snapshot_id, settings)
    assert lost_race(lost.value) is not None
    staged_names = {os.path.basename(p) for p in _files(STAGING, january)}
    assert staged_names and not [p for p in Path(raw_data).rglob("*.parquet") if p.name[13:] in staged_names]

    catalog, table = spark_table(STAGING, settings).split(".", 1)
    later = (dt.datetime.now() + dt.timedelta(minutes=1)).isoformat(sep=" ", timespec="seconds")
    deleted = spark.sql(
        f"CALL {catalog}.system.expire_snapshots(table => '{table}', older_than => TIMESTAMP '{later}', retain_last => 1)"
    ).first()
    assert deleted.deleted_data_files_count >= len(staged_files)
    assert not any(os.path.exists(_path(p)) for p in staged_files)
    assert all(os.path.exists(_path(p)) for p in added)
    assert comparable(raw_rows_of(november)).equals(comparable(expected_taxi_rows(november)))


def test_an_attempt_that_loses_the_race_to_another_attempt_of_the_same_batch_removes_none_of_its_files(
    spark, site, settings, monkeypatch
):
    """Two attempts to append one staged batch (a retry beside a try Airflow gave up on): the first makes
    its copies, the second makes its own and commits, the first then loses the race and removes its
    copies. Every file raw's snapshot references is there, and raw holds the batch once."""
    from nyc_taxi.core import appends

    ensure_tables([STAGING, RAW])
    february = add_taxi_month(site, 2023, 2, rows=3_000, seed=25)
    _load(2023, 2, steps=2)  # downloaded and staged, not merged
    staged = load_table(STAGING).current_snapshot().snapshot_id
    base = load_table(RAW).current_snapshot()
    base_id = base.snapshot_id if base else None
    real = appends.lakehouse(settings)

    class FirstAttemptsStore:  # the first attempt's store: once its copies are made, the second runs whole
        def __init__(self):
            self.left = len(_files(STAGING, staged))

        def share(self, location: str, target: str) -> bool:
            made = real.share(location, target)
            self.left -= 1
            if not self.left:
                monkeypatch.setattr(appends, "lakehouse", lambda _settings: real)
                append_staged_files(spark, STAGING, staged, RAW, base_id, settings)
            return made

        def remove(self, location: str) -> None:
            real.remove(location)

    monkeypatch.setattr(appends, "lakehouse", lambda _settings: FirstAttemptsStore())
    with pytest.raises(Exception) as lost:
        append_staged_files(spark, STAGING, staged, RAW, base_id, settings)
    assert lost_race(lost.value) is not None
    current = load_table(RAW).current_snapshot()
    assert current.summary[APPENDED_FROM] == f"{STAGING.name}@{staged}" and current.parent_snapshot_id == base_id
    referenced = _files(RAW, current.snapshot_id)
    assert referenced and all(os.path.exists(_path(p)) for p in referenced)
    assert comparable(raw_rows_of(february)).equals(comparable(expected_taxi_rows(february)))


def test_a_staging_table_of_another_shape_still_loads_by_writing_the_rows(spark, site, settings):
    """As a staging table created before it was given raw's partitioning (unpartitioned, snappy) is."""
    from nyc_taxi.core.catalog import load_catalog
    from nyc_taxi.core.naming import iceberg_identifier

    older = dataclasses.replace(STAGING, partitioned_by=(), properties={"write.parquet.compression-codec": "snappy"})
    catalog = load_catalog(settings)
    catalog.drop_table(iceberg_identifier(STAGING, settings))
    try:
        ensure_tables([older, RAW])
        assert load_table(STAGING).spec().is_unpartitioned()
        october = add_taxi_month(site, 2022, 10, rows=4_000, seed=23)
        report = _load(2022, 10)
        raw = load_table(RAW).current_snapshot()
        assert report.summary["merged_rows"] == 4_000
        assert raw.summary.operation.value == "append" and raw.summary.get(APPENDED_FROM) is None
        assert comparable(raw_rows_of(october)).equals(comparable(expected_taxi_rows(october)))
    finally:  # staging is replaced on every load: the registry's shape again for the tests after this one
        catalog.drop_table(iceberg_identifier(STAGING, settings))
        ensure_tables([STAGING])


def test_a_merge_reports_its_own_commit_not_another_months_committed_meanwhile(spark, site, monkeypatch):
    """A merge's output is the snapshot its own write committed (ingest/common.py: this_merges_snapshot):
    another month's load that commits between this merge's write and its report is not this run's. An
    unchanged month says it committed nothing and names raw as its write found it; a republished month
    names its own snapshot, not the newer one; and a try whose commit landed but was answered as a lost
    race is found by the try after it, which has nothing left to change: the run reports that commit with
    the changes it made. The merges run as an Airflow task run does (its commits name it)."""
    from pyiceberg.exceptions import CommitFailedException

    from nyc_taxi.core.settings import get_settings
    from nyc_taxi.core.snapshots import COMMITTED_BY, MONTH
    from nyc_taxi.ingest import taxi

    task = get_settings().model_copy(update={"task_run": "ingest_yellow_taxi_data/merge/manual__2023-01"})

    ensure_tables([STAGING, RAW])
    add_taxi_month(site, 2023, 1, rows=3_000, seed=41)
    _load(2023, 1)
    for other in (2, 3):
        add_taxi_month(site, 2023, other, rows=2_000, seed=40 + other)
    real_write, others = taxi._write_batch, [2, 3]

    def then_another_month(batch, spark, settings):
        written = real_write(batch, spark, settings)
        if batch.label == "2023-01" and others:
            _load(2023, others.pop(0))  # another writer commits raw right after this write
        return written

    monkeypatch.setattr(taxi, "_write_batch", then_another_month)
    held = load_table(RAW).current_snapshot()  # raw holding January as the file has it
    unchanged = taxi.merge_into_raw(2023, 1, task)
    (raw_use,) = unchanged.outputs
    newest = load_table(RAW).current_snapshot()
    assert newest.summary.get(MONTH) == "2023-02" and newest.parent_snapshot_id == held.snapshot_id  # meanwhile
    assert unchanged.summary["merged_rows"] == 0 and raw_use.committed is False and raw_use.changes is None
    assert raw_use.version == str(held.snapshot_id)  # raw as the merge found it, not February's commit

    republished = add_taxi_month(site, 2023, 1, rows=3_100, seed=49)
    republished_version = f"{republished.name}@sha256:{hashlib.sha256(republished.read_bytes()).hexdigest()}"
    _load(2023, 1, steps=2)
    existed = {s.snapshot_id for s in load_table(RAW).snapshots()}
    changed = taxi.merge_into_raw(2023, 1, task)
    (raw_use,) = changed.outputs
    history = {s.snapshot_id: s for s in load_table(RAW).snapshots()}
    newest = load_table(RAW).current_snapshot()
    assert newest.summary.get(MONTH) == "2023-03" and others == []
    own = history[int(raw_use.version)]
    assert raw_use.committed and own.snapshot_id not in existed and own.snapshot_id != newest.snapshot_id
    assert own.summary.get(MONTH) == "2023-01" and own.summary.get(COMMITTED_BY) == task.task_run
    assert changed.summary["merged_rows"] > 0
    assert comparable(raw_rows_of(republished)).equals(comparable(expected_taxi_rows(republished)))
    assert raw_use.source_version == republished_version  # the file's own bytes, hashed here
    republished_rows = expected_taxi_rows(republished).num_rows

    again, landed = add_taxi_month(site, 2023, 1, rows=3_050, seed=50), []
    _load(2023, 1, steps=2)

    def answered_as_lost(batch, spark, settings):
        written = real_write(batch, spark, settings)
        if not landed:  # the commit is in; the try is told it lost (a catalog that answered too late)
            landed.append(written.changes)
            raise CommitFailedException("the commit's answer was lost")
        return written

    monkeypatch.setattr(taxi, "_write_batch", answered_as_lost)
    existed = {s.snapshot_id for s in load_table(RAW).snapshots()}
    told = taxi.merge_into_raw(2023, 1, task)
    (raw_use,) = told.outputs
    own = load_table(RAW).snapshot_by_id(int(raw_use.version))
    assert landed and landed[0].total and raw_use.committed
    assert {s.snapshot_id for s in load_table(RAW).snapshots()} - existed == {own.snapshot_id}  # one commit
    assert own.summary.get(COMMITTED_BY) == task.task_run
    assert raw_use.replaced_version == republished_version  # the version it replaced, as the file was
    said = (raw_use.changes.added, raw_use.changes.changed, raw_use.changes.removed)
    assert said == (landed[0].added, landed[0].changed, landed[0].removed)  # not the second try's nothing
    # every trip of the new file added and every trip of the one before removed (no trip is in both)
    assert said == (expected_taxi_rows(again).num_rows, 0, republished_rows)
    assert comparable(raw_rows_of(again)).equals(comparable(expected_taxi_rows(again)))
