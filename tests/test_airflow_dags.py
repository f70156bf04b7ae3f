"""The ingestion DAGs run for real (dag.test) on fixture files served over 127.0.0.1.

Raw tables are compared with an independent pyarrow computation from the same files, and the
lineage each task emitted is checked against the registry and the tables' real snapshot ids.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from airflow.sdk import Asset
from datahub_check import assert_valid_record_files
from expected_loads import comparable, expected_taxi_rows, expected_weather, quality_counts
from tlc_columns import COLUMNS_2024, TLC_TO_TARGET

from nyc_taxi.airflow_adapter.environment import DAGS_FOLDER
from nyc_taxi.core import datasets as registry
from nyc_taxi.core.catalog import current_snapshot_id, load_table
from nyc_taxi.core.naming import identity, landed_location, published_url
from nyc_taxi.lineage.spec import validation_errors
from nyc_taxi.lineage.write.destinations import openlineage_file
from nyc_taxi.lineage.write.outbox import datahub_files, read_datahub_records
from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month

pytestmark = [pytest.mark.spark, pytest.mark.airflow]


class LineageLog:
    """The records both lineage systems wrote since the mark."""

    def __init__(self, settings):
        self.settings, self.ol_path = settings, openlineage_file(settings, "airflow")
        self.ol_mark = len(self._ol_all())
        self.dh_mark = len(self._dh_all())

    def _ol_all(self):
        return self.ol_path.read_text().splitlines() if self.ol_path.exists() else []

    def _dh_all(self):
        return read_datahub_records(self.settings, "airflow")

    def datahub_files(self) -> list[Path]:
        return datahub_files(self.settings, "airflow")

    def openlineage(self) -> list[dict]:
        return [json.loads(line) for line in self._ol_all()[self.ol_mark :]]

    def datahub(self) -> list[dict]:
        return self._dh_all()[self.dh_mark :]

    def ol_event(self, event_type: str, task_id: str) -> dict:
        [event] = [
            e for e in self.openlineage() if e["eventType"] == event_type and e["job"]["name"].endswith(f".{task_id}")
        ]
        return event


def run_dag(dagbag, dag_id: str, month: str) -> dict[str, str]:
    """Task states of one run (``dag.test()``); the run's id as ``last_run_id``."""
    global last_run_id
    run = dagbag.get_dag(dag_id).test(run_conf={"month": month})
    last_run_id = run.run_id
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


last_run_id: str | None = None


def asset_events(table: registry.Table, run_id: str) -> list[tuple[str, dict]]:
    """The events one DAG run emitted for a raw table's Asset: (source task, extra), oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from nyc_taxi.airflow_adapter.operators import asset

    with create_session() as session:
        query = (
            select(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == asset(table).name, AssetEvent.source_run_id == run_id)
            .order_by(AssetEvent.id)
        )
        return [(event.source_task_id, dict(event.extra)) for event in session.scalars(query)]


def snapshot_id(table: registry.Table) -> int | None:
    return current_snapshot_id(table)


def raw_rows(table: registry.Table, **equal) -> pa.Table:
    arrow = load_table(table).scan().to_arrow()
    for column, value in equal.items():
        arrow = arrow.filter(pc.equal(arrow[column], value))
    return arrow


# ---------------------------------------------------------------------------------------------


def test_dags_import_without_database_or_network(tmp_path):
    """Parsing touches neither the metadata database (a path that cannot exist) nor the network."""
    probe = f"""
import json, socket
def refuse(*a, **k): raise AssertionError("network access while parsing DAGs")
socket.socket.connect = refuse
socket.create_connection = refuse
from airflow.models import DagBag
bag = DagBag(dag_folder={str(DAGS_FOLDER)!r})
print(json.dumps({{"errors": {{k: str(v) for k, v in bag.import_errors.items()}},
    "tasks": {{d: sorted(dag.task_ids) for d, dag in bag.dags.items()}},
    "outlets": {{d: sorted(getattr(a, "uri", a.name) for t in dag.tasks for a in t.outlets) for d, dag in bag.dags.items()}},
    "schedules": {{d: sorted(a.uri for a in dag.schedule) if isinstance(dag.schedule, list) else [] for d, dag in bag.dags.items()}}}}))
"""
    env = {
        **os.environ,
        "PROFILE": "aws",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "sqlite:////nonexistent/dir/airflow.db",
    }
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed["errors"] == {}
    assert parsed["tasks"] == {
        "ingest_yellow_taxi_data": [
            "create_tables",
            "download_published_files",
            "merge_upsert_staging_into_raw_yellow",
            "stage_landed_files",
        ],
        "ingest_weather_data": [
            "create_tables",
            "download_published_files",
            "merge_upsert_staging_into_raw_weather",
            "stage_landed_files",
        ],
        "train_forecast_model": ["run_training_flow"],
    }
    # a merge emits its raw table's asset events through an alias, only when it committed a snapshot
    assert parsed["outlets"] == {
        "ingest_yellow_taxi_data": ["yellow_taxi_raw commits"],
        "ingest_weather_data": ["weather_raw commits"],
        "train_forecast_model": [],
    }
    assert parsed["schedules"] == {
        "ingest_yellow_taxi_data": [],
        "ingest_weather_data": [],
        "train_forecast_model": [Asset(uri="iceberg://nyc_taxi.yellow_taxi_raw").uri],
    }


def test_taxi_month_lands_in_raw_exactly_and_lineage_names_the_registry(dagbag, site, settings):
    path = add_taxi_month(site, 2024, 2, rows=8_000, seed=11)
    log = LineageLog(settings)
    assert run_dag(dagbag, "ingest_yellow_taxi_data", "2024-02") == {
        "create_tables": "success",
        "download_published_files": "success",
        "stage_landed_files": "success",
        "merge_upsert_staging_into_raw_yellow": "success",
    }

    got = raw_rows(registry.YELLOW_TAXI_RAW, source_file=path.name)
    assert comparable(got).equals(comparable(expected_taxi_rows(path)))
    raw_snapshot, staging_snapshot = snapshot_id(registry.YELLOW_TAXI_RAW), snapshot_id(registry.YELLOW_TAXI_STAGING)
    # the merge committed: one event of the yellow_taxi_raw Asset (what starts train_forecast_model), naming it
    assert asset_events(registry.YELLOW_TAXI_RAW, last_run_id) == [
        ("merge_upsert_staging_into_raw_yellow", {"snapshot_id": str(raw_snapshot), "month": "2024-02"})
    ]

    # OpenLineage: each task's inputs and outputs are the registry's identities, with versions.
    ident = {d.name: identity(d, settings) for d in registry.DATASETS.values()}
    url = published_url(registry.TLC_YELLOW_TRIPDATA_PUBLISHED, 2024, 2, settings)
    landed = landed_location(registry.TLC_YELLOW_TRIPDATA_LANDED, 2024, 2, settings)
    download = log.ol_event("COMPLETE", "download_published_files")
    assert [(i["namespace"], i["name"]) for i in download["inputs"]] == [
        (ident["tlc_yellow_tripdata_published"].ol_namespace, ident["tlc_yellow_tripdata_published"].ol_name)
    ]
    assert download["inputs"][0]["inputFacets"]["subset"]["inputCondition"]["locations"] == [url]
    etag = f'"{hashlib.md5(path.read_bytes()).hexdigest()}"'  # the fixture site sends S3's ETag
    assert download["inputs"][0]["facets"]["version"]["datasetVersion"] == f"{path.name}@etag:{etag}"
    assert [f["name"] for f in download["inputs"][0]["facets"]["schema"]["fields"]] == [
        name for name in COLUMNS_2024 + ["cbd_congestion_fee"]
    ]
    assert [(o["namespace"], o["name"]) for o in download["outputs"]] == [
        (ident["tlc_yellow_tripdata_landed"].ol_namespace, ident["tlc_yellow_tripdata_landed"].ol_name)
    ]
    landed_version = f"{path.name}@sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"
    assert download["outputs"][0]["facets"]["version"]["datasetVersion"] == landed_version
    assert download["outputs"][0]["outputFacets"]["subset"]["outputCondition"]["locations"] == [landed]
    stage = log.ol_event("COMPLETE", "stage_landed_files")
    assert [(i["name"], i["facets"]["version"]["datasetVersion"]) for i in stage["inputs"]] == [
        (ident["tlc_yellow_tripdata_landed"].ol_name, landed_version)
    ]
    assert [(o["name"], o["facets"]["version"]["datasetVersion"]) for o in stage["outputs"]] == [
        (ident["yellow_taxi_staging"].ol_name, str(staging_snapshot))
    ]
    merge = log.ol_event("COMPLETE", "merge_upsert_staging_into_raw_yellow")
    assert [i["name"] for i in merge["inputs"]] == [ident["yellow_taxi_staging"].ol_name]
    assert [o["name"] for o in merge["outputs"]] == [ident["yellow_taxi_raw"].ol_name]
    assert merge["inputs"][0]["facets"]["version"]["datasetVersion"] == str(staging_snapshot)
    assert merge["outputs"][0]["facets"]["version"]["datasetVersion"] == str(raw_snapshot)
    assert merge["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 8_000
    assert [f["name"] for f in merge["outputs"][0]["facets"]["schema"]["fields"]] == [
        "row_key",
        "source_file",
        "ingested_at",
        *(name for name, _ in TLC_TO_TARGET.values()),
    ]
    # every check of the staged batch the merge audited, its failing rows an independent count over the file
    assertions = {a["name"]: a for a in merge["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]}
    assert list(assertions) == [c.name for c in registry.YELLOW_TAXI_STAGING.checks]
    expected_counts = quality_counts(path, 2024, 2)
    for name, rows in expected_counts.items():
        assert assertions[name]["actual"] == f"{rows} of 8000 rows fail"
        assert assertions[name]["success"] is (rows == 0)
        assert assertions[name]["severity"] == next(
            c.severity for c in registry.YELLOW_TAXI_STAGING.checks if c.name == name
        )
    assert assertions["rows_as_landed"]["actual"] == "8000 rows" and assertions["rows_as_landed"]["expected"] == "8000"
    assert expected_counts["pickup_in_month"] > 0 and expected_counts["not_flex_fare"] > 0
    # the TLC's quirks are warned of and merged as published: the stray pickups are in raw
    assert assertions["pickup_in_month"]["params"]["status"] == "warn"
    assert assertions["not_flex_fare"]["params"]["status"] == "warn"
    month = raw_rows(registry.YELLOW_TAXI_RAW, source_file=path.name)
    outside = pc.or_(
        pc.less(month["pickup_datetime"], pa.scalar(dt.datetime(2024, 2, 1), pa.timestamp("us"))),
        pc.greater_equal(month["pickup_datetime"], pa.scalar(dt.datetime(2024, 3, 1), pa.timestamp("us"))),
    )
    assert pc.sum(pc.fill_null(outside, False).cast(pa.int64())).as_py() == expected_counts["pickup_in_month"]
    for event in log.openlineage():
        assert validation_errors(event) == [], event["job"]["name"]

    # DataHub: per-task lineage with the registry's URNs, and the snapshot id the table really has.
    records = log.datahub()
    io = {
        r["entityUrn"].rsplit(",", 1)[1].rstrip(")"): r["aspect"]["json"]
        for r in records
        if r.get("aspectName") == "dataJobInputOutput" and "ingest_yellow_taxi_data" in r["entityUrn"]
    }
    assert io["download_published_files"]["inputDatasets"] == [ident["tlc_yellow_tripdata_published"].datahub_urn]
    assert io["download_published_files"]["outputDatasets"] == [ident["tlc_yellow_tripdata_landed"].datahub_urn]
    assert io["stage_landed_files"]["inputDatasets"] == [ident["tlc_yellow_tripdata_landed"].datahub_urn]
    assert io["stage_landed_files"]["outputDatasets"] == [ident["yellow_taxi_staging"].datahub_urn]
    assert io["merge_upsert_staging_into_raw_yellow"]["inputDatasets"] == [ident["yellow_taxi_staging"].datahub_urn]
    assert io["merge_upsert_staging_into_raw_yellow"]["outputDatasets"] == [ident["yellow_taxi_raw"].datahub_urn]
    operations = [
        r["aspect"]["json"]["customProperties"]
        for r in records
        if r.get("aspectName") == "operation"
        and r["entityUrn"] == ident["yellow_taxi_raw"].datahub_urn
        and r["aspect"]["json"].get("customProperties")
    ]
    assert operations[-1]["snapshot_id"] == str(raw_snapshot)
    dataset_urns = {r["entityUrn"] for r in records if r.get("entityType") == "dataset"}
    assert dataset_urns == {
        ident[name].datahub_urn
        for name in (
            "tlc_yellow_tripdata_published",
            "tlc_yellow_tripdata_landed",
            "yellow_taxi_staging",
            "yellow_taxi_raw",
        )
    }
    assert_valid_record_files(log.datahub_files())

    # Re-running the month changes nothing: the landed file is not fetched again, no new snapshot, the same rows.
    landed_file = Path(landed)
    landed_mtime = landed_file.stat().st_mtime_ns
    log = LineageLog(settings)
    assert run_dag(dagbag, "ingest_yellow_taxi_data", "2024-02")["merge_upsert_staging_into_raw_yellow"] == "success"
    assert snapshot_id(registry.YELLOW_TAXI_RAW) == raw_snapshot
    assert snapshot_id(registry.YELLOW_TAXI_STAGING) == staging_snapshot  # staging already held this landed version
    assert asset_events(registry.YELLOW_TAXI_RAW, last_run_id) == []  # no event: nothing downstream runs
    assert landed_file.stat().st_mtime_ns == landed_mtime  # the server said 304: not fetched again
    rerun = log.ol_event("COMPLETE", "download_published_files")
    assert rerun["inputs"][0]["facets"]["version"]["datasetVersion"] == f"{path.name}@etag:{etag}"
    assert comparable(raw_rows(registry.YELLOW_TAXI_RAW, source_file=path.name)).equals(
        comparable(expected_taxi_rows(path))
    )


def test_republished_month_replaces_its_month_and_the_lineage_says_which_version_replaced_which(dagbag, site, settings):
    """TLC republishes a corrected file with fewer trips: the server's new ETag makes it a new version,
    fetched again; raw then holds exactly the new file (corrected trips changed, dropped trips removed,
    one commit), and both lineage systems say which version replaced which and what changed."""
    first = add_taxi_month(site, 2024, 5, rows=4_000, seed=1)
    log = LineageLog(settings)
    assert run_dag(dagbag, "ingest_yellow_taxi_data", "2024-05")["merge_upsert_staging_into_raw_yellow"] == "success"
    before = {"etag": f'"{hashlib.md5(first.read_bytes()).hexdigest()}"', "sha": hashlib.sha256(first.read_bytes())}
    corrected = pq.read_table(first)
    fares = corrected["fare_amount"].to_numpy().copy()
    fares[::10] += 1.0  # every tenth trip corrected
    corrected = corrected.set_column(corrected.schema.get_field_index("fare_amount"), "fare_amount", pa.array(fares))
    corrected = pa.concat_tables([corrected.slice(0, 2_000), corrected.slice(2_500)])  # 500 trips withdrawn
    pq.write_table(corrected, first)
    after = {"etag": f'"{hashlib.md5(first.read_bytes()).hexdigest()}"', "sha": hashlib.sha256(first.read_bytes())}
    assert run_dag(dagbag, "ingest_yellow_taxi_data", "2024-05")["merge_upsert_staging_into_raw_yellow"] == "success"
    got = raw_rows(registry.YELLOW_TAXI_RAW, source_file=first.name)
    assert got.num_rows == 3_500
    assert comparable(got).equals(comparable(expected_taxi_rows(first)))
    versions = [
        e["inputs"][0]["facets"]["version"]["datasetVersion"]
        for e in log.openlineage()
        if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".download_published_files")
    ]
    assert versions == [f"{first.name}@etag:{before['etag']}", f"{first.name}@etag:{after['etag']}"]
    # which version replaced which, and what changed: in Iceberg's commit, OpenLineage and DataHub
    old, new = (f"{first.name}@sha256:{v['sha'].hexdigest()}" for v in (before, after))
    changed = sum(1 for i in range(0, 4_000, 10) if not 2_000 <= i < 2_500)
    summary = load_table(registry.YELLOW_TAXI_RAW).current_snapshot().summary
    assert (summary["nyc-taxi.replaced-version"], summary["nyc-taxi.landed-version"]) == (old, new)
    assert [summary[f"nyc-taxi.rows-{k}"] for k in ("added", "changed", "removed")] == ["0", str(changed), "500"]
    merges = [
        e
        for e in log.openlineage()
        if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".merge_upsert_staging_into_raw_yellow")
    ]
    facet = merges[-1]["outputs"][0]["outputFacets"]["rowChanges"]
    assert (facet["added"], facet["changed"], facet["removed"]) == (0, changed, 500)
    assert (facet["replacedSourceVersion"], facet["sourceVersion"]) == (old, new)
    assert merges[-1]["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == changed
    assert validation_errors(merges[-1]) == []
    operations = [
        r["aspect"]["json"]
        for r in log.datahub()
        if r.get("aspectName") == "operation" and r["aspect"]["json"].get("customProperties", {}).get("rows_removed")
    ]
    assert operations[-1]["numAffectedRows"] == changed + 500
    assert operations[-1]["customProperties"]["replaced_source_version"] == old


@pytest.mark.parametrize("month", ["2023-03", "2025-01"])
def test_other_years_file_shapes_load(dagbag, site, month):
    year, number = map(int, month.split("-"))
    path = add_taxi_month(site, year, number, rows=3_000, seed=5)
    assert run_dag(dagbag, "ingest_yellow_taxi_data", month)["merge_upsert_staging_into_raw_yellow"] == "success"
    got = raw_rows(registry.YELLOW_TAXI_RAW, source_file=path.name)
    assert comparable(got).equals(comparable(expected_taxi_rows(path)))
    assert (pc.sum(pc.is_valid(got["cbd_congestion_fee"])).as_py() > 0) == (year >= 2025)
    assert pc.sum(pc.greater(got["airport_fee"], 0)).as_py() > 0  # lowercase airport_fee in 2023 files


def test_truncated_file_fails_the_task_and_leaves_tables_untouched(dagbag, site, settings):
    good = add_taxi_month(site, 2024, 4, rows=3_000, seed=2)
    good.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    before = {t.name: snapshot_id(t) for t in (registry.YELLOW_TAXI_RAW, registry.YELLOW_TAXI_STAGING)}
    log = LineageLog(settings)
    states = run_dag(dagbag, "ingest_yellow_taxi_data", "2024-04")
    assert states["download_published_files"] == "failed"
    assert states["stage_landed_files"] == states["merge_upsert_staging_into_raw_yellow"] == "upstream_failed"
    assert {t.name: snapshot_id(t) for t in (registry.YELLOW_TAXI_RAW, registry.YELLOW_TAXI_STAGING)} == before
    assert not Path(landed_location(registry.TLC_YELLOW_TRIPDATA_LANDED, 2024, 4, settings)).exists()
    failed = log.ol_event("FAIL", "download_published_files")
    assert "truncated" in failed["run"]["facets"]["errorMessage"]["message"]
    assert validation_errors(failed) == []


def test_a_month_that_fails_its_checks_is_refused_before_raw_and_its_correction_goes_through(dagbag, site, settings):
    """A TLC file whose trips are all a year early lands and stages; its checks stop the merge before raw:
    raw's snapshot unchanged, the landed file and the staging snapshot kept, one try and one clear message,
    the failed check on the staged version in both lineage systems. The corrected file then loads."""
    from nyc_taxi.core.snapshots import LANDED_VERSION
    from nyc_taxi_proving.fixtures import tlc
    from nyc_taxi_proving.fixtures.site import taxi_path

    path = tlc.write_yellow_month(tlc.generate_yellow_month(2023, 8, rows=3_000, seed=8), taxi_path(site, 2024, 8))
    raw_before = snapshot_id(registry.YELLOW_TAXI_RAW)
    log = LineageLog(settings)
    states = run_dag(dagbag, "ingest_yellow_taxi_data", "2024-08")
    assert states["stage_landed_files"] == "success" and states["merge_upsert_staging_into_raw_yellow"] == "failed"
    assert snapshot_id(registry.YELLOW_TAXI_RAW) == raw_before
    landed = Path(landed_location(registry.TLC_YELLOW_TRIPDATA_LANDED, 2024, 8, settings))
    assert landed.read_bytes() == path.read_bytes()  # the landed file, kept
    staging = load_table(registry.YELLOW_TAXI_STAGING).current_snapshot()
    assert staging.summary[LANDED_VERSION] == f"{path.name}@sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"
    assert raw_rows(registry.YELLOW_TAXI_STAGING).num_rows == 3_000  # the staging snapshot, kept
    merges = [e for e in log.openlineage() if e["job"]["name"].endswith(".merge_upsert_staging_into_raw_yellow")]
    assert [e["eventType"] for e in merges] == ["START", "FAIL"]  # one try: the same data fails every try
    failed = merges[-1]
    message = failed["run"]["facets"]["errorMessage"]["message"]
    assert f"yellow_taxi_staging snapshot {staging.snapshot_id}" in message
    assert "pickup_in_month (error): 3,000 of 3,000 rows fail (100.0%), more than the 1% allowed" in message
    assert f"yellow_taxi_raw was not changed (it stays at snapshot {raw_before})" in message
    assert message.count("e.g. row_key=yellow_tripdata_2024-08.parquet:") == 3  # a few of the rows
    assert [o["facets"]["version"]["datasetVersion"] for o in failed["outputs"]] == [str(raw_before)]
    assertions = {a["name"]: a for a in failed["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]}
    assert (assertions["pickup_in_month"]["success"], assertions["pickup_in_month"]["params"]["status"]) == (
        False,
        "fail",
    )
    assert validation_errors(failed) == []
    # DataHub: the stage's result of the check on the version it wrote, a failure of severity HIGH
    events = [
        r["aspect"]["json"]
        for r in log.datahub()
        if r.get("aspectName") == "assertionRunEvent"
        and r["aspect"]["json"]["batchSpec"]["nativeBatchId"] == str(staging.snapshot_id)
    ]
    assert len(events) == len(registry.YELLOW_TAXI_STAGING.checks)
    [event] = [e for e in events if e["result"]["nativeResults"]["status"] == "fail"]
    assert (event["result"]["type"], event["result"]["severity"], event["result"]["unexpectedCount"]) == (
        "FAILURE",
        "HIGH",
        3_000,
    )
    assert_valid_record_files(log.datahub_files())

    # the TLC publishes the month again, corrected: it passes, and raw holds it exactly
    corrected = add_taxi_month(site, 2024, 8, rows=3_000, seed=8)
    assert run_dag(dagbag, "ingest_yellow_taxi_data", "2024-08")["merge_upsert_staging_into_raw_yellow"] == "success"
    assert snapshot_id(registry.YELLOW_TAXI_RAW) != raw_before
    assert comparable(raw_rows(registry.YELLOW_TAXI_RAW, source_file=corrected.name)).equals(
        comparable(expected_taxi_rows(corrected))
    )


def test_a_training_whose_window_is_not_loaded_is_refused_on_its_first_try_with_the_days_and_the_months_to_load(
    dagbag, settings
):
    """train_forecast_model with a forecast origin whose 28 days before are not in raw: the flow's
    compute_actuals refuses the window, and the task fails on its first try (a retry reads the same raw and
    is refused the same way; Airflow would retry a RuntimeError after its delay), the refusal in its failure."""
    log = LineageLog(settings)
    run = dagbag.get_dag("train_forecast_model").test(run_conf={"as_of_datetime": "2018-08-15T00:00"})
    states = {ti.task_id: (str(ti.state), ti.try_number) for ti in run.get_task_instances()}
    assert states == {"run_training_flow": ("failed", 1)}, states
    task = [e for e in log.openlineage() if e["job"]["name"] == "train_forecast_model.run_training_flow"]
    assert [e["eventType"] for e in task] == ["START", "FAIL"]
    message = task[-1]["run"]["facets"]["errorMessage"]["message"]
    assert "refused what it read" in message and "training_days_have_rides (error)" in message, message
    assert "no trips on 2018-07-18 – 2018-08-14" in message, message
    assert (
        'Load 2018-07, 2018-08 with the ingest_yellow_taxi_data DAG ({"month": "2018-07"}, {"month": "2018-08"})'
        in message
    )


def test_a_trace_through_a_raw_snapshot_whose_own_check_failed_says_the_data_failed_its_checks(
    dagbag, site, settings, monkeypatch
):
    """Raw's own check fails after a merge's commit, which stands: another writer appended May while the merge
    wrote it (a staging table of an older shape, whose rows the merge writes again). June then loads
    cleanly on top. A trace of raw's newest snapshot holds May's commit: it walks to its failed check, and
    says the data failed its checks — raw's newest snapshot passed its own."""
    import dataclasses

    from nyc_taxi.core.catalog import load_catalog
    from nyc_taxi.core.naming import iceberg_identifier, spark_table
    from nyc_taxi.core.tables import ensure_tables, pinned
    from nyc_taxi.ingest import taxi
    from nyc_taxi.lineage.read.trace import trace, verdict_of

    add_taxi_month(site, 2018, 5, rows=2_000, seed=5)
    add_taxi_month(site, 2018, 6, rows=2_000, seed=6)
    catalog = load_catalog(settings)
    catalog.drop_table(iceberg_identifier(registry.YELLOW_TAXI_STAGING, settings))
    ensure_tables([dataclasses.replace(registry.YELLOW_TAXI_STAGING, partitioned_by=(), properties={})])
    real_append = taxi.append_staged_files

    def another_writer_first(spark, staging, snapshot_id, *rest):
        staged = pinned(staging, load_table(staging).snapshot_by_id(snapshot_id))
        spark.sql(f"INSERT INTO {spark_table(registry.YELLOW_TAXI_RAW)} SELECT * FROM {staged}")
        return real_append(spark, staging, snapshot_id, *rest)

    monkeypatch.setattr(taxi, "append_staged_files", another_writer_first)
    try:
        assert run_dag(dagbag, "ingest_yellow_taxi_data", "2018-05")["merge_upsert_staging_into_raw_yellow"] == "failed"
    finally:
        monkeypatch.undo()
        catalog.drop_table(iceberg_identifier(registry.YELLOW_TAXI_STAGING, settings))
        ensure_tables([registry.YELLOW_TAXI_STAGING])
    may = snapshot_id(registry.YELLOW_TAXI_RAW)
    assert run_dag(dagbag, "ingest_yellow_taxi_data", "2018-06")["merge_upsert_staging_into_raw_yellow"] == "success"

    traced = trace("yellow_taxi_raw", settings)
    assert traced.version == str(snapshot_id(registry.YELLOW_TAXI_RAW)) != str(may)
    failed = [e for e in traced.checks if e.status == "fail"]
    assert [(e.check, e.version) for e in failed] == [("month_rows_as_staged", str(may))], traced.checks
    verdict = verdict_of(traced)
    assert not verdict.passed and verdict.text().startswith("✗ computed from data that failed its checks")
    assert "month_rows_as_staged" in verdict.text()

    # June's snapshot still holds May as it failed, and says so to its readers: the flow refuses a window
    # over May, naming the snapshot to roll back to; a window of June alone is counted
    from nyc_taxi.core import quality, verdicts
    from nyc_taxi.core.naming import iceberg_identifier
    from nyc_taxi.core.spark import get_spark
    from nyc_taxi.forecast import steps

    raw = load_table(registry.YELLOW_TAXI_RAW)
    june = snapshot_id(registry.YELLOW_TAXI_RAW)
    before_may = raw.snapshot_by_id(may).parent_snapshot_id
    assert [(batch, r.check, r.version) for batch, r in verdicts.failures_of(raw, june)] == [
        ("2018-05", "month_rows_as_staged", str(may))
    ]
    ensure_tables([registry.YELLOW_RIDES_HOURLY_ACTUALS])
    actuals_before = snapshot_id(registry.YELLOW_RIDES_HOURLY_ACTUALS)

    def refused(as_of: dt.datetime) -> str:
        with pytest.raises(quality.ChecksFailed) as refusal:
            steps.compute_actuals(as_of, 28, 24, settings)
        assert snapshot_id(registry.YELLOW_RIDES_HOURLY_ACTUALS) == actuals_before
        return str(refusal.value)

    message = refused(dt.datetime(2018, 6, 15))
    assert message.startswith(f"yellow_taxi_raw snapshot {june} fails its checks, so nothing was committed"), message
    assert "month_rows_as_staged (error)" in message and f"failed on yellow_taxi_raw snapshot {may}" in message
    identifier = iceberg_identifier(registry.YELLOW_TAXI_RAW, settings)
    assert f"rollback_to_snapshot('{identifier}', {before_may}) undoes snapshot {may}" in message, message
    # rolled back to May itself (June undone), raw still holds May as it failed: still refused
    catalog_name = spark_table(registry.YELLOW_TAXI_RAW).split(".")[0]
    get_spark().sql(f"CALL {catalog_name}.system.rollback_to_snapshot('{identifier}', {may})")
    assert f"yellow_taxi_raw snapshot {may} fails its checks" in refused(dt.datetime(2018, 6, 15))
    get_spark().sql(f"CALL {catalog_name}.system.set_current_snapshot('{identifier}', {june})")


@pytest.mark.guards
def test_unpublished_month_skips_cleanly(dagbag):
    before = snapshot_id(registry.YELLOW_TAXI_RAW)
    states = run_dag(dagbag, "ingest_yellow_taxi_data", "2031-01")
    assert states == {
        "create_tables": "success",
        "download_published_files": "skipped",
        "stage_landed_files": "skipped",
        "merge_upsert_staging_into_raw_yellow": "skipped",
    }
    assert snapshot_id(registry.YELLOW_TAXI_RAW) == before


def weather_in_raw(year: int, month: int) -> dict[tuple[str, dt.date], dict]:
    """The month's rows of weather_raw by county and day; there must be one row per county and day."""
    rows = [r for r in raw_rows(registry.WEATHER_RAW).to_pylist() if (r["date"].year, r["date"].month) == (year, month)]
    by_key = {(r["county_code"], r["date"]): r for r in rows}
    assert len(by_key) == len(rows), "a county and day is in weather_raw more than once"
    return by_key


def test_weather_prelim_then_scaled_overwrites(dagbag, site):
    add_weather_month(site, 2024, 6, seed=1, n_counties=80, through_day=10)
    assert run_dag(dagbag, "ingest_weather_data", "2024-06")["merge_upsert_staging_into_raw_weather"] == "success"
    expected = expected_weather(site, 2024, 6, "prelim")
    got = weather_in_raw(2024, 6)
    assert set(got) == set(expected) and len(got) == 5 * 10
    assert all({k: got[key][k] for k in expected[key]} == expected[key] for key in expected)
    assert {r["source_status"] for r in got.values()} == {"prelim"}

    add_weather_month(site, 2024, 6, seed=2, n_counties=80)  # the final file, with revised values
    assert run_dag(dagbag, "ingest_weather_data", "2024-06")["merge_upsert_staging_into_raw_weather"] == "success"
    expected = expected_weather(site, 2024, 6, "scaled")
    got = weather_in_raw(2024, 6)
    assert set(got) == set(expected) and len(got) == 5 * 30
    assert all({k: got[key][k] for k in expected[key]} == expected[key] for key in expected)
    assert {r["source_status"] for r in got.values()} == {"scaled"}

    before = snapshot_id(registry.WEATHER_RAW)
    assert run_dag(dagbag, "ingest_weather_data", "2024-06")["merge_upsert_staging_into_raw_weather"] == "success"
    assert snapshot_id(registry.WEATHER_RAW) == before  # re-run: nothing to change

    # a late preliminary file after the final one (the final files gone from the site and the landing
    # area): staged, and merged as nothing — a preliminary value never replaces a final one
    final = weather_in_raw(2024, 6)
    for var in ("prcp", "tavg", "tmax", "tmin"):
        for location in (
            site / f"pub/data/daily-grids/v1-0-0/averages/2024/{var}-202406-cty-scaled.csv",
            Path(landed_location(registry.NOAA_NCLIMGRID_DAILY_COUNTY_LANDED, 2024, 6, var=var, status="scaled")),
        ):
            location.unlink()
            Path(f"{location}.source.json").unlink(missing_ok=True)
    add_weather_month(site, 2024, 6, seed=3, n_counties=80, through_day=20)
    assert run_dag(dagbag, "ingest_weather_data", "2024-06")["merge_upsert_staging_into_raw_weather"] == "success"
    staged = {r["source_status"] for r in raw_rows(registry.WEATHER_STAGING).to_pylist()}
    assert staged == {"prelim"}  # the preliminary values were staged ...
    assert snapshot_id(registry.WEATHER_RAW) == before and weather_in_raw(2024, 6) == final  # ... and kept out
