"""The team deployment's long proofs, in the system lane (`bash run test --system`; docs/testing.md says
when it must run): two months loaded, a backtest of the first held between its read of raw and its write
while the second month's merge commits raw on the other Celery worker; the chaos run's whole mission —
two months, the trainings the scheduler starts from each merge, a weather-adjusted backtest, the last
shipping of lineage — under every named moment and faults inside tasks and in every kind of service (a
Celery worker with its task, each SeaweedFS process, a Spark driver, a flow step), each met at its
moment; then ten programs killed at once, a broken month through the scheduler (refused before raw on its
first try, the lineage server told why), and `team down` while a training runs (last: the deployment
is down until its `up`).

The suite's lane runs the same deployment under a short mission of four faults (tests/test_team_profile.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import signal
import time
from types import SimpleNamespace

import pytest
from expected_loads import (
    actuals_rows,
    comparable,
    expected_actuals,
    expected_daily_prcp,
    expected_taxi_rows,
    expected_weather_adjusted,
    seasonal_naive,
    table_actuals,
)
from team_deployment import (
    TAXI,
    TAXI_JOBS,
    TAXI_MERGE,
    TRAINING,
    WEATHER,
    api,
    bucket,
    check_weather,
    finished,
    forecasts_of,
    programs,
    raw_holds_exactly,
    restarted,
    status,
    task,
    task_spans,
    team_cli,
    wait_for,
)

from nyc_taxi.core import datasets as registry
from nyc_taxi.core import jobs
from nyc_taxi_proving.fixtures.site import taxi_path

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.team, pytest.mark.system]

CHAOS_MONTHS = ((2019, 3), (2019, 4))
CHAOS_ROWS = 20_000


# The flow's steps after its read of raw (compute_actuals) and before it writes its forecasts.
BETWEEN_READ_AND_WRITE = ("prepare_training_data", "train_forecasting_model", "predict")


def _freeze_the_flow_between_its_read_and_its_write(settings, seconds: float = 900):
    """The backtest's step process once compute_actuals is done and before the forecasts are written,
    suspended (SIGSTOP; checked stopped): the flow is held there, not met there by chance."""
    import psutil

    from nyc_taxi.core.team import team_dir
    from nyc_taxi_proving.chaos.components import flow_steps

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for process in flow_steps(str(team_dir(settings))):
            try:
                words = process.cmdline()
                if words[words.index("step") + 1] in BETWEEN_READ_AND_WRITE:
                    process.suspend()
                    if process.status() == psutil.STATUS_STOPPED:
                        return process
            except (psutil.Error, ValueError, IndexError):
                continue
        time.sleep(0.2)
    raise AssertionError(f"no step of {BETWEEN_READ_AND_WRITE} ran within {seconds:.0f} s")


def test_a_backtest_holds_its_read_of_raw_while_a_merge_commits_raw_on_the_other_worker(team, site):
    """July loaded (both DAGs at once, the training its merge starts), then a backtest of July; once its flow
    has read raw, the flow is frozen before it writes, and August's taxi DAG run commits raw on the other
    Celery worker meanwhile (the flow's catalog commits and the merge's in one PostgreSQL catalog, each
    Spark application on half the cluster's cores); then August's weather. All succeed, raw and weather
    hold both months as published, and the backtest's actuals and weather-adjusted forecasts equal an
    independent count of what it read."""
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.core.snapshots import MONTH
    from nyc_taxi_proving.chaos import mission

    settings, _ = team
    months = ((2024, 7), (2024, 8))
    files = mission.publish(site, CHAOS_ROWS, months)
    rest = api(settings)
    for dag in (TAXI, WEATHER):
        assert finished(rest, dag, rest.trigger(dag, {"month": "2024-07"}))["state"] == "success"
    rest.idle(seconds=1800)  # the training July's merge started
    backtest = {"as_of_datetime": "2024-07-22T00:00", "model": "weather_adjusted", "lookback_days": 21}
    triggered = {TRAINING: rest.trigger(TRAINING, backtest)}
    frozen = _freeze_the_flow_between_its_read_and_its_write(settings)
    try:
        # alone on the other of the deployment's two task slots: August's weather would stand before the
        # taxi merge (Airflow weighs a task by the tasks downstream of it)
        triggered[TAXI] = rest.trigger(TAXI, {"month": "2024-08"})
        assert finished(rest, TAXI, triggered[TAXI])["state"] == "success"
        assert frozen.status() == "stopped"  # still held: the commit came between the flow's read and write
    finally:
        frozen.resume()
    triggered[WEATHER] = rest.trigger(WEATHER, {"month": "2024-08"})
    for dag, run_id in triggered.items():
        done = finished(rest, dag, run_id)
        assert done["state"] == "success", (dag, done)
    (flow_span,) = task_spans(rest, TRAINING, triggered[TRAINING])
    raw = load_table(registry.YELLOW_TAXI_RAW, settings)
    (august,) = [s for s in raw.snapshots() if (s.summary or {}).get(MONTH) == "2024-08"]
    committed = dt.datetime.fromtimestamp(august.timestamp_ms / 1000, dt.UTC)
    assert flow_span[0] < committed < flow_span[1], (flow_span, committed)
    rest.idle(seconds=1800)  # the training August's merge started
    assert all(r["state"] == "success" for dag in (TAXI, WEATHER, TRAINING) for r in rest.runs(dag, limit=100))

    for taxi_file in files:
        raw_holds_exactly(settings, taxi_file)
    for year, month in months:
        check_weather(settings, site, year, month)
    # the backtest's window (21 days back, 24 h ahead) holds exactly July's counts
    as_of = dt.datetime(2024, 7, 22)
    start, end = as_of - dt.timedelta(days=21), as_of + dt.timedelta(hours=24)
    counted = expected_actuals(files, start, end)
    actuals = load_table(registry.YELLOW_RIDES_HOURLY_ACTUALS, settings).scan().to_arrow().to_pylist()
    assert table_actuals([r for r in actuals if start <= r["pickup_hour"] < end]) == actuals_rows(counted)
    _, expected = expected_weather_adjusted(counted, expected_daily_prcp(site, months), as_of, 24)
    predicted = forecasts_of(settings, as_of)
    assert predicted.keys() == expected.keys() and all(abs(predicted[k] - expected[k]) < 1e-9 for k in expected)


@pytest.fixture(scope="module")
def chaos(team, lineage_server, site):
    """The chaos run's mission on this module's deployment under the eight named moments (each held open
    so it is met every time) and seven faults inside tasks, two of them in one task, four of them in the
    object storage and a Celery worker: (settings, the faults as they went, the mission's DAG runs, the taxi
    files)."""
    from nyc_taxi_proving.chaos import mission
    from nyc_taxi_proving.chaos.run import Fault, with_faults

    settings, env = team
    files = mission.publish(site, CHAOS_ROWS, CHAOS_MONTHS)
    first, second = (f"month {y:04d}-{m:02d}" for y, m in CHAOS_MONTHS)
    faults = [
        Fault(1, 1, first, "lineage-server", "lineage server down beyond every retry budget"),
        Fault(2, 1, first, "airflow-worker", "staging load after writing"),
        Fault(3, 1, first, "airflow-worker", "worker after commit"),
        Fault(4, 1, first, "spark-driver", "during", "ingest_weather_data.stage_landed_files", 1.0),
        Fault(5, 1, first, "seaweedfs-s3", "during", "ingest_yellow_taxi_data.download_published_files", 1.0),
        Fault(6, 1, second, "postgres", "PostgreSQL mid-commit"),
        Fault(7, 1, second, "airflow-api-server", "API server while a task reports success"),
        Fault(8, 1, second, "airflow-scheduler", "scheduler between queueing and recording"),
        Fault(9, 1, second, "seaweedfs-volume", "during", "ingest_yellow_taxi_data.stage_landed_files", 2.0),
        Fault(10, 1, second, "airflow-worker", "during", "ingest_weather_data.merge_upsert_staging_into_raw_weather", 2.0),
        Fault(11, 1, "backtest", "redis", "Redis while a task is queued"),
        Fault(12, 1, "backtest", "metaflow-step", "during", "train_forecast_model.run_training_flow", 5.0),
        # two faults in one task: the one met second finds its process under the try after the first's
        Fault(13, 1, "backtest", "spark-driver", "during", "train_forecast_model.run_training_flow", 2.0),
        Fault(14, 1, "backtest", "seaweedfs-filer", "during", "train_forecast_model.run_training_flow", 8.0),
        Fault(15, 1, "backtest", "lineage shipper", "lineage shipper after the server accepted"),
    ]  # fmt: skip
    started = dt.datetime.now(dt.UTC)
    runs = with_faults(settings, env, lineage_server, faults, print, months=CHAOS_MONTHS)
    ours = [r for r in runs if dt.datetime.fromisoformat(r["run_after"]) >= started]
    return SimpleNamespace(
        settings=settings, env=env, faults={f.moment: f for f in faults}, all=faults, runs=ours, files=files
    )


@pytest.mark.guards
def test_chaos_every_fault_met_its_moment_and_what_it_killed_came_back_within_its_bound(chaos):
    from nyc_taxi_proving.chaos.run import RECOVERY_BOUND, TASK_BOUND

    for fault in chaos.all:
        assert not fault.error and fault.at and fault.pids and fault.proven, vars(fault)
        assert fault.recovered_s is not None and fault.recovered_s <= RECOVERY_BOUND, vars(fault)
        assert fault.task_done_s is None or fault.task_done_s <= TASK_BOUND, vars(fault)
    assert all(r["state"] == "success" for r in chaos.runs) and len(chaos.runs) >= 5, chaos.runs


def test_chaos_the_dag_runs_are_those_the_mission_triggered_and_one_training_per_merge(chaos):
    """A run triggered twice, or a training started twice by one merge's event, writes the rows a clean run
    writes: the tables cannot tell, the runs can."""
    from nyc_taxi_proving.chaos import check, mission

    triggered = [(dag, conf) for step in mission.steps(CHAOS_MONTHS) for dag, conf in step.runs]
    assert check.runs_as_triggered(chaos.runs, triggered, len(CHAOS_MONTHS), TRAINING) == []


def test_chaos_every_program_killed_was_restarted_by_supervisord_and_team_status_counts_it(chaos):
    """No `team up`: supervisord ran each killed program again, and `team status` counts each restart."""
    killed = {f.killed for f in chaos.all if f.killed in programs(chaos.settings)}
    now = status(chaos.env)
    assert {"postgres", "redis", "seaweedfs-s3", "seaweedfs-volume", "seaweedfs-filer"} <= killed, killed
    assert any(name.startswith("airflow-worker-") for name in killed), killed
    assert {p: now[p]["restarts"] >= 1 for p in killed} == dict.fromkeys(killed, True), now


def test_chaos_tables_equal_an_independent_reading_and_every_file_and_manifest_reads(chaos, site):
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi_proving.chaos import check

    settings = chaos.settings
    for taxi_file in chaos.files:
        raw_holds_exactly(settings, taxi_file)
    for year, month in CHAOS_MONTHS:
        check_weather(settings, site, year, month)
    # staging holds the last month staged, each row once: a retried stage replaced it, never appended
    staging = load_table(registry.YELLOW_TAXI_STAGING, settings).scan().to_arrow()
    assert comparable(staging).equals(comparable(expected_taxi_rows(chaos.files[-1])))
    # the trainings the scheduler started after each merge, from an independent count of the files
    for year, month in CHAOS_MONTHS:
        as_of = dt.datetime(year + month // 12, month % 12 + 1, 1)
        counted = expected_actuals(chaos.files, as_of - dt.timedelta(days=28), as_of)
        assert forecasts_of(settings, as_of) == seasonal_naive(counted, as_of, 24), as_of
    # the weather-adjusted backtest, recomputed from the files: counts and the rain of NOAA's files
    as_of = dt.datetime(*CHAOS_MONTHS[-1], 15)
    counted = expected_actuals(chaos.files, as_of - dt.timedelta(days=28), as_of + dt.timedelta(hours=24))
    _, expected = expected_weather_adjusted(counted, expected_daily_prcp(site, CHAOS_MONTHS), as_of, 24)
    predicted = forecasts_of(settings, as_of)
    assert predicted.keys() == expected.keys()
    assert all(abs(predicted[k] - expected[k]) < 1e-9 for k in expected)
    assert check.unreadable_files(settings.state_dir) == []
    # the chaos command's own reading of the files agrees, and finds a difference where there is one
    from nyc_taxi_proving.chaos import expected as chaos_expected
    from nyc_taxi_proving.chaos import mission

    backtest = mission.backtest_origin(CHAOS_MONTHS)
    published = chaos_expected.expected(site, chaos.files, CHAOS_MONTHS, backtest)
    # this deployment also holds the months of the test before: only=False leaves them out
    assert check.unexpected(settings.state_dir, published, only=False) == {}
    assert set(check.unexpected(settings.state_dir, published)) == {
        "yellow_taxi_raw",
        "weather_raw",
        "yellow_rides_hourly_actuals",  # the earlier test's trainings counted its months
    }
    # staging expected to hold the other month (the last published file is staging's)
    swapped = dataclasses.replace(published, taxi=dict(reversed(published.taxi.items())))
    assert set(check.unexpected(settings.state_dir, swapped, only=False)) == {"yellow_taxi_staging"}


def test_chaos_lineage_reached_the_server_once_and_nothing_is_left_running_or_queued(chaos, lineage_server):
    from nyc_taxi.lineage.write.delivery import OpenLineageServer
    from nyc_taxi_proving.chaos import check
    from nyc_taxi_proving.chaos.readings import datahub_missing, leftovers
    from nyc_taxi_proving.fixtures.lineage_server import OPENLINEAGE_PATH

    local = OpenLineageServer(chaos.settings)
    events = [e for path in local.files() for e in local.read(path)]
    delivered = check.delivery(events, lineage_server.stored(OPENLINEAGE_PATH))
    assert delivered == {"missing": [], "twice": []}
    assert datahub_missing(chaos.settings, lineage_server) == 0
    # the shipper killed after the server stored a record sent it again; the server keeps it once
    assert len(lineage_server.accepted(OPENLINEAGE_PATH)) + len(
        lineage_server.accepted("/aspects?action=ingestProposal")
    ) > len(lineage_server.stored(OPENLINEAGE_PATH)) + len(lineage_server.stored("/aspects?action=ingestProposal"))
    assert leftovers(chaos.settings, chaos.env) == []


def test_chaos_a_merge_lost_after_its_commit_is_committed_once_and_its_training_still_runs(chaos):
    """The worker running the taxi merge killed once the commit landed: the retry finds the commit as its
    task run's own, commits nothing, and emits the asset event the lost try never did — the training the
    scheduler starts after that merge ran (its forecasts are checked above)."""
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.core.snapshots import COMMITTED_BY, MONTH

    fault = chaos.faults["worker after commit"]
    month = f"{CHAOS_MONTHS[0][0]:04d}-{CHAOS_MONTHS[0][1]:02d}"
    raw = load_table(registry.YELLOW_TAXI_RAW, chaos.settings)
    commits = [s for s in raw.snapshots() if (s.summary or {}).get(MONTH) == month]
    assert len(commits) == 1 and TAXI_MERGE in commits[0].summary.get(COMMITTED_BY), commits
    hit = task(api(chaos.settings), TAXI, fault.task["dag_run_id"], TAXI_MERGE)
    assert hit["state"] == "success" and hit["try_number"] >= 2, hit
    trainings = [r for r in chaos.runs if r["type"] == "asset_triggered"]
    assert len(trainings) == 2 and all(r["state"] == "success" for r in trainings), trainings


@pytest.mark.parametrize(
    ("moment", "said"),
    [
        ("worker after commit", "committed yellow_taxi_raw"),
        ("staging load after writing", "committed yellow_taxi_staging"),
        ("PostgreSQL mid-commit", "UPDATE of yellow_taxi_raw in flight"),
        ("scheduler between queueing and recording", "just reached the broker"),
        ("API server while a task reports success", "reports success (its state then: running)"),
        ("Redis while a task is queued", "(queued)"),
        ("lineage shipper after the server accepted", "after the server stored a record"),
        ("lineage server down beyond every retry budget", "down for 90 s"),
    ],
)
@pytest.mark.guards
def test_chaos_each_named_moment_was_met_and_its_component_came_back(chaos, moment, said):
    """Each moment the systems underneath get wrong, met where it says (what was running then is in its
    description), its component back under supervisord within the bound; the tests above check the data."""
    from nyc_taxi_proving.chaos.run import RECOVERY_BOUND

    fault = chaos.faults[moment]
    assert said in fault.at and not fault.error, vars(fault)
    assert fault.recovered_s is not None and fault.recovered_s <= RECOVERY_BOUND, vars(fault)
    if "committed" in said:  # the try killed after its commit never said so: a later try ended the task
        hit = fault.task
        now = task(api(chaos.settings), hit["dag_id"], hit["dag_run_id"], hit["task_id"])
        assert now["state"] == "success" and now["try_number"] > hit["try_number"], (now, hit)


def test_chaos_postgres_killed_mid_commit_deleted_no_file_a_table_may_reference(chaos):
    """PostgreSQL killed while the catalog's UPDATE of raw's commit was in flight: the commit did not
    happen, the writer retried, and every table's current metadata, manifests and data files read."""
    from nyc_taxi_proving.chaos import check

    fault = chaos.faults["PostgreSQL mid-commit"]
    assert "in flight" in fault.at and "merge_upsert_staging_into_raw_yellow" in fault.at, fault.at
    assert check.unreadable_files(chaos.settings.state_dir) == []


BURST = (  # ten programs, killed at once (SIGKILL): every kind of service the deployment runs
    "postgres",
    "redis",
    "seaweedfs-master",
    "seaweedfs-volume",
    "seaweedfs-filer",
    "seaweedfs-s3",
    "spark-master",
    "airflow-scheduler",
    "airflow-triggerer",
    "airflow-worker-2",
)


def test_ten_programs_killed_at_once_are_each_restarted_counted_and_answering_and_every_object_reads(chaos):
    """An operator's test: ten programs SIGKILLed together. supervisord runs each again; `team status`
    counts each one's restart (a burst of exits once overflowed supervisord's event buffer, and a killed
    master showed 0 restarts) and says each program answers a request once it does (RUNNING came seconds
    before the S3 gateway accepted connections); every object of the bucket reads as it was."""
    settings, env = chaos.settings, chaos.env
    api(settings).idle(seconds=1800)
    before, objects = status(env), bucket(settings)
    assert set(BURST) <= set(before) and all(p["answers"] == "yes" for p in before.values()), before
    pids = {program: programs(settings)[program]["pid"] for program in BURST}
    for pid in pids.values():
        os.kill(pid, signal.SIGKILL)
    for program, pid in pids.items():
        restarted(settings, program, pid, seconds=300)
    after = wait_for(lambda: status(env), lambda s: all(p["answers"] == "yes" for p in s.values()), 300)
    assert all(p["state"] == "RUNNING" and p["answers"] == "yes" for p in after.values()), after
    assert {p: after[p]["restarts"] - before[p]["restarts"] >= 1 for p in BURST} == dict.fromkeys(BURST, True), (
        before,
        after,
    )
    now = bucket(settings)
    assert len(objects) > 1000 and {key: now.get(key) for key in objects} == objects


def test_a_broken_month_is_refused_before_raw_through_the_scheduler_once_and_the_server_hears_why(
    chaos, team, site, lineage_server
):
    """The TLC publishes a month whose trips are all a year early, triggered as the UI does. On the team
    profile as locally: it lands and stages, its checks stop the merge before raw changes, and the merge
    fails on its first try though the deployment retries a task three times (the same data fails every
    try). The lineage server received the merge's FAIL, naming the check with its counts, and DataHub's
    run event of the failed check on the staged version."""
    import json

    from nyc_taxi.core.catalog import current_snapshot_id, load_table
    from nyc_taxi.core.naming import landed_folder
    from nyc_taxi.lineage.write.datahub_quality import assertion_urn
    from nyc_taxi_proving.fixtures import tlc
    from nyc_taxi_proving.fixtures.lineage_server import DATAHUB_INGEST_PATH, OPENLINEAGE_PATH

    settings = team[0]
    path = tlc.write_yellow_month(tlc.generate_yellow_month(2023, 12, rows=2_000, seed=12), taxi_path(site, 2024, 12))
    raw_before = current_snapshot_id(registry.YELLOW_TAXI_RAW, settings)
    rest = api(settings)
    run_id = rest.trigger(TAXI, {"month": "2024-12"})
    assert finished(rest, TAXI, run_id)["state"] == "failed"
    stage, merge = (task(rest, TAXI, run_id, t) for t in (TAXI_JOBS.stage_landed_files.name, TAXI_MERGE))
    assert (stage["state"], merge["state"], merge["try_number"]) == ("success", "failed", 1), (stage, merge)
    assert current_snapshot_id(registry.YELLOW_TAXI_RAW, settings) == raw_before
    staging = load_table(registry.YELLOW_TAXI_STAGING, settings)
    assert staging.scan().to_arrow().num_rows == 2_000  # the staged version, kept for inspection
    assert f"{landed_folder(registry.TLC_YELLOW_TRIPDATA_LANDED)}/{path.name}" in bucket(settings)

    snapshot = str(staging.current_snapshot().snapshot_id)

    def received():
        """The merge's FAIL and DataHub's failed run event on the staged version, once both arrived."""
        fails = [
            r["body"]
            for r in lineage_server.stored(OPENLINEAGE_PATH)
            if r["body"]["eventType"] == "FAIL" and r["body"]["job"]["name"].endswith(f".{TAXI_MERGE}")
        ]
        fails = [f for f in fails if "2024-12" in f["run"]["facets"].get("errorMessage", {}).get("message", "")]
        events = [
            json.loads(r["body"]["proposal"]["aspect"]["value"])
            for r in lineage_server.stored(DATAHUB_INGEST_PATH)
            if r["body"]["proposal"]["aspectName"] == "assertionRunEvent"
        ]
        # the checks that stop the merge: status "fail" (a warning is a SUCCESS, its rows in the native results)
        errors = [
            e
            for e in events
            if e["batchSpec"]["nativeBatchId"] == snapshot and e["result"]["nativeResults"]["status"] == "fail"
        ]
        return (fails, errors) if fails and errors else None

    found = wait_for(received, bool, 180)
    assert found, (lineage_server.requests()[-5:], snapshot)
    (failed,), errors = found
    message = failed["run"]["facets"]["errorMessage"]["message"]
    assert "pickup_in_month (error): 2,000 of 2,000 rows fail (100.0%)" in message, message
    assert f"yellow_taxi_raw was not changed (it stays at snapshot {raw_before})" in message, message
    pickups = assertion_urn(registry.YELLOW_TAXI_STAGING, "pickup_in_month", settings)
    assert [(e["assertionUrn"], e["result"]["type"], e["result"]["unexpectedCount"]) for e in errors] == [
        (pickups, "FAILURE", 2_000)
    ], errors


def test_down_in_the_middle_of_a_training_run_leaves_no_process_and_up_finds_every_object(chaos, team):
    """`team down` while the flow runs (its Airflow task in a process group of its own, the flow's steps
    and a Spark driver under it): afterwards no process of the deployment runs (the process table: none
    carries the deployment's environment, none runs from its state directory). `team up` then brings
    back every object of the bucket, with nothing saved or restored by the project. Last in the module:
    the deployment is down after it until its `up`."""
    import psutil

    from nyc_taxi.core.team import team_dir
    from nyc_taxi_proving.chaos.components import flow_steps, spark_drivers
    from nyc_taxi_proving.deployment.supervisor import MARKER

    settings, env = team
    rest = api(settings)
    run_id = rest.trigger(TRAINING, {"as_of_datetime": "2019-04-29T00:00"})  # the chaos mission's April: loaded
    # this deployment's own flow steps and Spark drivers (its marker in their environment): another
    # deployment's flows on the machine (the system lane's other worker) are not this one's
    mine, state = str(team_dir(settings)), str(settings.state_dir)
    assert wait_for(lambda: flow_steps(mine), bool, 600), task(
        rest, TRAINING, run_id, jobs.TRAIN_FORECAST_MODEL.run_training_flow.name
    )
    assert wait_for(lambda: spark_drivers(mine), bool, 300)  # a step's own Spark JVM (spark-submit's pyspark-shell)
    before = bucket(settings)
    down = team_cli(env, "down")
    assert down.returncode == 0, down.stdout + down.stderr

    left = []
    for process in psutil.process_iter(["cmdline", "environ"]):
        environ, cmdline = process.info["environ"] or {}, " ".join(process.info["cmdline"] or [])
        if environ.get(MARKER) == mine or state in cmdline:
            left.append((process.pid, cmdline[:120]))
    assert left == []

    up = team_cli(env, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    after = bucket(settings)  # the flow may have written more after the first listing, before `down`
    assert {key.split("/")[0] for key in before} >= {"landing", "warehouse", "metaflow"}, sorted(before)[:20]
    assert {key: after.get(key) for key in before} == before
