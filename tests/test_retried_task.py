"""An Airflow merge task that fails before merging, then, retried, fails again after its commit landed,
and is retried by Airflow once more ends as a clean run must: staging and raw hold the file's rows
exactly (computed from the file independently: nothing doubled, nothing lost), the retry that has
nothing left to do commits nothing, and the lineage has all three tries with each failure's reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from expected_loads import comparable, expected_taxi_rows

from nyc_taxi.core import datasets as registry
from nyc_taxi.lineage.write.destinations import openlineage_events_dir
from nyc_taxi_proving.fixtures.site import add_taxi_month

pytestmark = [pytest.mark.airflow, pytest.mark.faults, pytest.mark.system]
MONTH = "2023-09"
MERGE = "merge_upsert_staging_into_raw_yellow"

# dag.test() on the real DAG; the merge task's first two tries die as a lost worker would: the first
# before the merge (after staging), the second after its commit landed but before the task could say
# so. Airflow's own retries run it again (two here: the DAG's default_args have one, enough for a
# single failure); both kinds of failure in one DAG run, the second met by a retry of the first.
RUNNER = """
import datetime as dt, json
from airflow.models import DagBag
from nyc_taxi.airflow_adapter.environment import DAGS_FOLDER
from nyc_taxi.core import datasets as d
from nyc_taxi.core.catalog import current_snapshot_id

dag = DagBag(dag_folder=str(DAGS_FOLDER)).dags["ingest_yellow_taxi_data"]
merge = dag.task_dict["{merge}"]
merge.retry_delay = dt.timedelta(seconds=1)  # the DAG's 5 minutes, shortened for the test
assert merge.retries == 1, merge.retries  # the DAG's own: one lost worker is recovered from
merge.retries += 1  # and one more for the second
tries, snapshots = [], []
merge_into_raw = merge.step
def lost_worker_on_the_first_two_tries(year, month, settings):
    tries.append(1)
    if len(tries) == 1:
        raise RuntimeError("worker lost after staging, before the merge (injected by the test)")
    report = merge_into_raw(year, month, settings)
    snapshots.append(current_snapshot_id(d.YELLOW_TAXI_RAW))
    if len(tries) == 2:
        raise RuntimeError("worker lost after the merge committed, before the task said so (injected by the test)")
    return report
merge.step = lost_worker_on_the_first_two_tries
run = dag.test(run_conf={{"month": "{month}"}})
print("RESULT", run.state, len(tries))
print("SNAPSHOTS", json.dumps(snapshots))
from airflow.models.asset import AssetEvent
from airflow.utils.session import create_session
with create_session() as session:
    events = [(e.extra.get("month"), e.extra.get("snapshot_id")) for e in session.query(AssetEvent)]
print("ASSET_EVENTS", json.dumps(events))
"""


def _run(state: Path, airflow_state) -> tuple[str, list, list, object]:
    from nyc_taxi.airflow_adapter.environment import airflow_environment
    from nyc_taxi.core.settings import Settings

    settings = Settings(state_dir=state, profile="local")
    airflow_state(settings)
    env = {**os.environ, "STATE_DIR": str(state), **airflow_environment(settings)}
    result = subprocess.run(
        [sys.executable, "-c", RUNNER.format(merge=MERGE, month=MONTH)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    lines = output.splitlines()
    snapshots = json.loads(next(line for line in lines if line.startswith("SNAPSHOTS")).split(" ", 1)[1])
    events = json.loads(next(line for line in lines if line.startswith("ASSET_EVENTS")).split(" ", 1)[1])
    return next(line for line in lines if line.startswith("RESULT")), snapshots, events, settings


@pytest.fixture(scope="module")
def published(site):
    return add_taxi_month(site, 2023, 9, rows=20_000, seed=91)


def test_a_merge_task_lost_before_and_after_its_commit_and_retried_ends_like_a_clean_run(
    published, tmp_path, lineage_events, airflow_state
):
    from nyc_taxi.core.catalog import load_table

    retried, snapshots, asset_events, retried_settings = _run(tmp_path / "retried", airflow_state)

    assert retried == "RESULT success 3", retried  # two tries failed, Airflow's second retry succeeded
    expected = comparable(expected_taxi_rows(published))
    for table in (registry.YELLOW_TAXI_STAGING, registry.YELLOW_TAXI_RAW):  # whole tables: nothing doubled
        assert comparable(load_table(table, retried_settings).scan().to_arrow()).equals(expected), table.name
    committed, after_the_retry = snapshots  # raw's snapshot after the second try's merge, after the third's
    assert after_the_retry == committed  # the retry found raw already holding the month: it committed nothing
    # and found the commit its lost try made as this task run's: raw's asset event (what starts the
    # training) is emitted once, for that commit, though the try that made it never said so
    assert asset_events == [[MONTH, str(committed)]], asset_events

    merge_events = [e for e in lineage_events(retried_settings) if e[0].endswith(f".{MERGE}")]
    assert merge_events == sorted(
        [(f"ingest_yellow_taxi_data.{MERGE}", t) for t in ("START", "FAIL", "START", "FAIL", "START", "COMPLETE")]
    )
    failed = [
        json.loads(line)
        for path in openlineage_events_dir(retried_settings).glob("*.jsonl")
        for line in path.read_text().splitlines()
        if '"FAIL"' in line
    ]
    # each reason travels with the lineage: each in exactly one FAIL event
    for reason in ("worker lost after staging", "worker lost after the merge committed"):
        assert sum(reason in json.dumps(e) for e in failed) == 1, reason
