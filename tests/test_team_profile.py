"""The team profile, run for real on this machine: `bash run team up` starts supervisord, which runs
PostgreSQL (Airflow's metadata database and the Iceberg JDBC catalog), Redis, SeaweedFS (master, volume
server, filer, S3 gateway: the lake and Metaflow's datastore), a Spark standalone cluster and Airflow on
the CeleryExecutor with two workers, each a process of its own. DAG runs are triggered through the REST
API as the UI's Trigger button does; the merge's asset event makes the scheduler start the training
DAG, whose flow runs its Spark steps on the cluster. The tables equal an independent computation from
the fixture files; a component killed with SIGKILL is restarted by supervisord, with no `team up`;
nothing listens beyond 127.0.0.1; the generated passwords and keys are in no log; `team down` leaves no
process of the deployment running."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from expected_loads import (
    actuals_rows,
    comparable,
    expected_actuals,
    expected_daily_prcp,
    expected_taxi_rows,
    expected_weather,
    expected_weather_adjusted,
    seasonal_naive,
    table_actuals,
)

from nyc_taxi.airflow_adapter.environment import airflow_environment
from nyc_taxi.airflow_adapter.rest_api import RestApi
from nyc_taxi.chaos.run import QUICK_RECOVERY
from nyc_taxi.core import datasets as registry
from nyc_taxi.core import jobs
from nyc_taxi.core.processes import free_port
from nyc_taxi.fixtures.site import add_taxi_month, add_weather_month, taxi_path

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.team]

MONTH = (2024, 7)
TAXI, WEATHER, TRAINING = (
    jobs.INGEST_YELLOW_TAXI_DATA.name,
    jobs.INGEST_WEATHER_DATA.name,
    jobs.TRAIN_FORECAST_MODEL.name,
)
TAXI_JOBS = jobs.INGEST_YELLOW_TAXI_DATA
TAXI_MERGE = TAXI_JOBS.merge_upsert_staging_into_raw_yellow.name


def _team(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.team", *args], env=env, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def lineage_server(tmp_path_factory):
    """The lineage server the deployment delivers to (OpenLineage events and DataHub records)."""
    from nyc_taxi.fixtures.lineage_server import LineageServer

    server = LineageServer(tmp_path_factory.mktemp("lineage-server") / "requests.jsonl").start("ok")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def team(site, tmp_path_factory, lineage_server):
    """The team profile's deployment, brought up once for this module under a state directory of its
    own, and down (its services' data removed) afterwards: (settings, environment)."""
    from nyc_taxi.core.settings import Settings

    state = tmp_path_factory.mktemp("team-state")
    # the session's local-profile Airflow settings stay out: the team profile derives its own
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {"PROFILE": "team", "STATE_DIR": str(state), "AIRFLOW_PORT": str(free_port()), "SPARK_SERVER": "false"}
    # lineage delivered as it goes; a task retried as often as the chaos tests' faults may hit it
    env |= {"OPENLINEAGE_URL": lineage_server.url, "DATAHUB_GMS_URL": lineage_server.url, "TASK_RETRIES": "3"}
    env |= QUICK_RECOVERY  # a lost task failed and retried within minutes, as in the chaos command's runs
    # PostgreSQL's data is kept under its own user's home, keyed by the state directory's path, which
    # pytest hands out again once old runs are cleaned up: a run killed before its teardown left it there
    _team(env, "down", "--delete-data")
    up = _team(env, "up")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        created = subprocess.run(
            [sys.executable, "-m", "nyc_taxi.cli.infra", "create"], env=env, capture_output=True, text=True
        )
        assert created.returncode == 0, created.stderr
        yield Settings(profile="team", state_dir=state, airflow_port=int(env["AIRFLOW_PORT"]), task_retries=3), env
    finally:
        down = _team(env, "down", "--delete-data")
        print(down.stdout, down.stderr)


def _api(settings) -> RestApi:
    return RestApi(settings)


def _finished(api: RestApi, dag: str, run_id: str, seconds: float = 900) -> dict:
    return api.finished(dag, run_id, seconds)


def _task(api: RestApi, dag: str, run_id: str, task: str) -> dict:
    from urllib.parse import quote

    return api.call(f"/api/v2/dags/{dag}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task}")


def _wait_for(fetch, done, seconds: float):
    """Poll until done(answer); an answer that is slow to come (a busy machine) is "not yet"."""
    deadline, answer = time.monotonic() + seconds, None
    while time.monotonic() < deadline:
        try:
            answer = fetch()
        except OSError:
            answer = None
        if answer is not None and done(answer):
            return answer
        time.sleep(1)
    return answer


def _programs(settings) -> dict[str, dict]:
    """supervisord's account of each program: state, pid, start time."""
    from nyc_taxi.deployment.supervisor import Supervisor

    return {p["name"]: p for p in Supervisor(settings).programs() if p["group"] != "process-states"}


def _component_pids(settings) -> dict[str, int]:
    return {name: info["pid"] for name, info in _programs(settings).items()}


def _kill(settings, program: str) -> int:
    """SIGKILL to a program's process (not its group: a process that crashes), as supervisord runs it."""
    pid = _programs(settings)[program]["pid"]
    os.kill(pid, signal.SIGKILL)
    return pid


def _restarted(settings, program: str, old_pid: int, seconds: float = 120) -> dict:
    """supervisord ran the program again (a new pid, RUNNING): no `team up`."""
    found = _wait_for(
        lambda: _programs(settings)[program],
        lambda p: p["statename"] == "RUNNING" and p["pid"] not in (0, old_pid),
        seconds,
    )
    assert found and found["statename"] == "RUNNING" and found["pid"] != old_pid, found
    return found


def _restarts(env, program: str) -> int:
    """The restarts `team status` reports for a program."""
    status = _team(env, "status")
    assert status.returncode == 0, status.stderr
    line = next(line for line in status.stdout.splitlines() if line.split()[:1] == [program])
    return int(line.split()[-1])


def _a_taxi_month_loading(settings, site, year: int, month: int, rows: int = 100_000):
    """A taxi month published and its DAG run triggered: (the file, the API, the run id)."""
    taxi_file = add_taxi_month(site, year, month, rows=rows, seed=year + month)
    api = _api(settings)
    return taxi_file, api, api.trigger(TAXI, {"month": f"{year:04d}-{month:02d}"})


def _raw_holds_exactly(settings, taxi_file: Path) -> None:
    """raw's rows of the file equal an independent reading of it: nothing lost, nothing doubled."""
    from nyc_taxi.core.catalog import load_table

    raw = load_table(registry.YELLOW_TAXI_RAW, settings).scan(row_filter=f"source_file == '{taxi_file.name}'")
    assert comparable(raw.to_arrow()).equals(comparable(expected_taxi_rows(taxi_file)))


def _check_weather(settings, site, year: int, month: int) -> None:
    """weather_raw's rows of the month equal an independent reading of the published NOAA files."""
    from nyc_taxi.core.catalog import load_table

    rows = load_table(registry.WEATHER_RAW, settings).scan().to_arrow().to_pylist()
    rows = [r for r in rows if (r["date"].year, r["date"].month) == (year, month)]
    weather = {(r["county_code"], r["date"]): r for r in rows}
    expected = expected_weather(site, year, month, "scaled")
    assert len(weather) == len(rows) and weather.keys() == expected.keys()
    assert all({k: weather[key][k] for k in expected[key]} == expected[key] for key in expected)


def _forecasts_of(settings, as_of: dt.datetime) -> dict[tuple[int, dt.datetime], float]:
    """The forecast table's predictions from the origin as_of, by zone and hour (a doubled row fails)."""
    from nyc_taxi.core.catalog import load_table

    rows = load_table(registry.YELLOW_RIDES_HOURLY_FORECAST, settings).scan().to_arrow().to_pylist()
    rows = [r for r in rows if r["as_of_datetime"] == as_of]
    predicted = {(r["pickup_location_id"], r["forecast_hour"]): r["predicted_ride_count"] for r in rows}
    assert len(predicted) == len(rows)
    return predicted


def _task_logs(settings) -> list[str]:
    return [p.read_text() for p in (settings.airflow_home / "logs").glob("dag_id=*/**/*.log")]


def _bucket(settings) -> dict[str, str]:
    """Every object of the lake's bucket and its ETag."""
    from nyc_taxi.core import team as services

    objects = services.ObjectStore(settings)
    pages = objects.client().get_paginator("list_objects_v2").paginate(Bucket=objects.bucket)
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def test_the_mission_through_the_scheduler_on_postgres_celery_and_a_spark_cluster(team, site):
    from nyc_taxi.core import team as services
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.core.naming import landed_folder
    from nyc_taxi.deployment.supervisor import logs_dir

    settings, _ = team
    taxi_file = add_taxi_month(site, *MONTH, rows=20_000, seed=71)
    add_weather_month(site, *MONTH, seed=71)
    api = _api(settings)

    # both ingestion DAGs at once, as two clicks on Trigger would
    month = f"{MONTH[0]:04d}-{MONTH[1]:02d}"
    triggered = {dag: api.trigger(dag, {"month": month}) for dag in (TAXI, WEATHER)}
    for dag, run_id in triggered.items():
        done = _finished(api, dag, run_id)
        assert done["state"] == "success", (dag, done)

    def training():
        return [r for r in api.runs(TRAINING, order_by="-run_after") if r["run_type"] == "asset_triggered"]

    runs = _wait_for(training, lambda found: found and found[0]["state"] in ("success", "failed"), 900)
    assert runs and len(runs) == 1 and runs[0]["state"] == "success", runs

    # the tables, read through pyiceberg from the PostgreSQL catalog, equal an independent reading
    raw = load_table(registry.YELLOW_TAXI_RAW, settings).scan().to_arrow()
    assert raw.num_rows == 20_000 and comparable(raw).equals(comparable(expected_taxi_rows(taxi_file)))
    dates = load_table(registry.WEATHER_RAW, settings).scan(selected_fields=("date",)).to_arrow()
    assert {(d.year, d.month) for d in dates.column("date").to_pylist()} == {MONTH}  # July's rows, nothing else
    _check_weather(settings, site, *MONTH)
    forecasts = load_table(registry.YELLOW_RIDES_HOURLY_FORECAST, settings).scan().to_arrow()
    as_of = dt.datetime(MONTH[0], MONTH[1] + 1, 1)  # the month after the one the merge loaded
    assert forecasts.num_rows > 0 and set(forecasts.column("as_of_datetime").to_pylist()) == {as_of}
    # the DAG's defaults (seasonal naive, 28 days back, 24 h ahead): each forecast is the same zone's
    # count a week earlier, counted independently from the published file
    counted = expected_actuals([taxi_file], as_of - dt.timedelta(days=28), as_of)
    assert _forecasts_of(settings, as_of) == seasonal_naive(counted, as_of, 24)

    # the lake is in SeaweedFS's bucket: the landed file, raw's data files, the flow's artifacts; the
    # bytes under SeaweedFS's own directory, none in a lake directory
    objects = services.ObjectStore(settings)
    keys = set(_bucket(settings))
    assert f"{landed_folder(registry.TLC_YELLOW_TRIPDATA_LANDED)}/{taxi_file.name}" in keys
    files = load_table(registry.YELLOW_TAXI_RAW, settings).inspect.files().column("file_path").to_pylist()
    assert files and all(
        f.startswith(f"s3a://{objects.bucket}/warehouse/") and f[len(f"s3a://{objects.bucket}/") :] in keys
        for f in files
    )
    assert any(k.startswith("metaflow/TrainForecastModelFlow/") for k in keys)
    assert not (settings.state_dir / "lake").exists()
    assert not list(settings.metaflow_home.glob("**/TrainForecastModelFlow/data"))  # artifacts: the bucket's
    volumes = services.team_dir(settings) / "seaweedfs" / "volume"
    assert sum(p.stat().st_size for p in volumes.glob("*.dat")) > taxi_file.stat().st_size

    # every Spark session ran on the cluster: one application per Spark task and step, all finished
    applications = services.SparkCluster(settings).applications()
    assert len(applications) >= 4 and all(a["state"] == "FINISHED" for a in applications), applications
    # both Celery workers ran tasks, and no catalog commit had to wait for another writer
    for worker in ("airflow-worker-1", "airflow-worker-2"):
        assert "succeeded" in (logs_dir(settings) / f"{worker}.log").read_text(), worker
    task_logs = _task_logs(settings)
    assert len(task_logs) >= 9 and not [text for text in task_logs if "lost a race with another writer" in text]


def test_a_broken_month_is_refused_before_raw_through_the_scheduler_once_and_the_server_hears_why(
    team, site, lineage_server
):
    """The TLC publishes a month whose trips are all a year early, triggered as the UI does. On the team
    profile as locally: it lands and stages, its checks stop the merge before raw changes, and the merge
    fails on its first try though the deployment retries a task three times (the same data fails every
    try). The lineage server received the merge's FAIL, naming the check with its counts, and DataHub's
    run event of the failed check on the staged version."""
    import json

    from nyc_taxi.core.catalog import current_snapshot_id, load_table
    from nyc_taxi.core.naming import landed_folder
    from nyc_taxi.fixtures import tlc
    from nyc_taxi.fixtures.lineage_server import DATAHUB_INGEST_PATH, OPENLINEAGE_PATH
    from nyc_taxi.lineage.write.datahub import assertion_urn

    settings, _ = team
    path = tlc.write_yellow_month(tlc.generate_yellow_month(2023, 12, rows=2_000, seed=12), taxi_path(site, 2024, 12))
    raw_before = current_snapshot_id(registry.YELLOW_TAXI_RAW, settings)
    api = _api(settings)
    run_id = api.trigger(TAXI, {"month": "2024-12"})
    assert _finished(api, TAXI, run_id)["state"] == "failed"
    stage, merge = (_task(api, TAXI, run_id, t) for t in (TAXI_JOBS.stage_landed_files.name, TAXI_MERGE))
    assert (stage["state"], merge["state"], merge["try_number"]) == ("success", "failed", 1), (stage, merge)
    assert current_snapshot_id(registry.YELLOW_TAXI_RAW, settings) == raw_before
    staging = load_table(registry.YELLOW_TAXI_STAGING, settings)
    assert staging.scan().to_arrow().num_rows == 2_000  # the staged version, kept for inspection
    assert f"{landed_folder(registry.TLC_YELLOW_TRIPDATA_LANDED)}/{path.name}" in _bucket(settings)

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
        # a warn check that finds rows is a FAILURE too (the generator's TLC quirks): the errors are "fail"
        errors = [
            e
            for e in events
            if e["batchSpec"]["nativeBatchId"] == snapshot and e["result"]["nativeResults"]["status"] == "fail"
        ]
        return (fails, errors) if fails and errors else None

    found = _wait_for(received, bool, 180)
    assert found, (lineage_server.requests()[-5:], snapshot)
    (failed,), errors = found
    message = failed["run"]["facets"]["errorMessage"]["message"]
    assert "pickup_in_month (error): 2,000 of 2,000 rows fail (100.0%)" in message, message
    assert f"yellow_taxi_raw was not changed (it stays at snapshot {raw_before})" in message, message
    pickups = assertion_urn(registry.YELLOW_TAXI_STAGING, "pickup_in_month", settings)
    assert [(e["assertionUrn"], e["result"]["type"], e["result"]["unexpectedCount"]) for e in errors] == [
        (pickups, "FAILURE", 2_000)
    ], errors


def _task_spans(api: RestApi, dag: str, run_id: str) -> list[tuple[dt.datetime, dt.datetime]]:
    return [
        (dt.datetime.fromisoformat(ti["start_date"]), dt.datetime.fromisoformat(ti["end_date"]))
        for ti in api.task_instances(dag, run_id)
        if ti["start_date"] and ti["end_date"]
    ]


def test_both_ingestion_dags_and_a_training_run_at_once_on_two_workers_need_no_retry_and_agree(team, site):
    """August's taxi and weather DAG runs and a backtest of the training DAG (as of mid-July, which the
    mission test loaded) triggered at the same moment: the flow reads raw while a merge writes it, on the
    other Celery worker. All succeed, no commit had to be recomputed after losing a race, raw and weather
    hold August as published, and the backtest's actuals and forecasts equal an independent count."""
    from nyc_taxi.core.catalog import load_table

    settings, _ = team
    july = taxi_path(site, *MONTH)
    assert july.exists()  # published by the mission test
    august = add_taxi_month(site, 2024, 8, rows=20_000, seed=72)
    add_weather_month(site, 2024, 8, seed=72)
    api = _api(settings)
    before = {r["dag_run_id"] for r in api.runs(TRAINING)}

    as_of = dt.datetime(2024, 7, 15)
    triggered = {
        TRAINING: api.trigger(TRAINING, {"as_of_datetime": as_of.strftime("%Y-%m-%dT%H:%M")}),
        TAXI: api.trigger(TAXI, {"month": "2024-08"}),
        WEATHER: api.trigger(WEATHER, {"month": "2024-08"}),
    }
    for dag, run_id in triggered.items():
        done = _finished(api, dag, run_id)
        assert done["state"] == "success", (dag, done)
    # the flow ran while an ingestion task ran on the other worker (one task at a time per worker)
    (flow_span,) = _task_spans(api, TRAINING, triggered[TRAINING])
    ingestion = [span for dag in (TAXI, WEATHER) for span in _task_spans(api, dag, triggered[dag])]
    assert any(start < flow_span[1] and flow_span[0] < end for start, end in ingestion), (flow_span, ingestion)

    # August's merge started a training run of its own (after the backtest: one run at a time): let it end
    def asset_started():
        return [r for r in api.runs(TRAINING) if r["dag_run_id"] not in before and r["run_type"] == "asset_triggered"]

    started = _wait_for(
        asset_started, lambda runs: runs and all(r["state"] in ("success", "failed") for r in runs), 900
    )
    assert started and all(r["state"] == "success" for r in started), started

    _raw_holds_exactly(settings, august)
    _check_weather(settings, site, 2024, 8)

    # the backtest's window (the DAG's defaults: 28 days back, 24 h ahead) holds exactly July's counts
    start, end = as_of - dt.timedelta(days=28), as_of + dt.timedelta(hours=24)
    counted = expected_actuals([july], start, end)
    actuals = load_table(registry.YELLOW_RIDES_HOURLY_ACTUALS, settings).scan().to_arrow().to_pylist()
    assert table_actuals([r for r in actuals if start <= r["pickup_hour"] < end]) == actuals_rows(counted)
    assert _forecasts_of(settings, as_of) == seasonal_naive(counted, as_of, 24)
    assert not [text for text in _task_logs(settings) if "lost a race with another writer" in text]


def test_nothing_listens_beyond_127_0_0_1_and_no_password_or_key_is_in_a_log(team, listening_sockets):
    from nyc_taxi.core import team as services
    from nyc_taxi.core.processes import read_record

    settings, env = team
    listeners = listening_sockets(*_component_pids(settings).values())
    commands = {command.split()[0].rsplit("/", 1)[-1] for command, _, _ in listeners}
    assert {"weed", "redis-server", "postgres"} <= commands, listeners  # every kind of service was looked at
    assert len(listeners) >= 14 and {address for _, address, _ in listeners} == {"127.0.0.1"}, listeners

    record = read_record(services.services_record(settings))
    secrets = [record["postgres"]["password"], record["redis"]["password"], record["seaweedfs"]["secret_key"]]
    config = subprocess.run(
        [sys.executable, "-m", "airflow", "config", "list"],
        env={**env, **airflow_environment(settings)},
        capture_output=True,
        text=True,
    )
    assert config.returncode == 0 and "sql_alchemy_conn" in config.stdout
    places = {"airflow config list": config.stdout + config.stderr}
    team_dir = services.team_dir(settings)
    secret_files = {
        services.services_record(settings),
        services.Postgres(settings).airflow_url_file,
        services.Postgres(settings).celery_results_url_file,
        services.Redis(settings).broker_url_file,
        team_dir / "redis" / "redis.conf",
        team_dir / "seaweedfs" / "s3-identities.json",
        services.ObjectStore(settings).credentials_file,
    }
    for path in Path(settings.state_dir).rglob("*"):
        if path.is_file() and path not in secret_files and path.stat().st_size < 50_000_000:
            places[str(path)] = path.read_bytes().decode(errors="replace")
    from nyc_taxi.deployment.services import Postgres

    for path in Postgres(settings, record).directory.glob("*.log"):
        places[str(path)] = path.read_text(errors="replace")
    for secret in secrets:
        assert not [place for place, text in places.items() if secret in text]
    for path in secret_files:
        assert path.stat().st_mode & 0o077 == 0, path


@pytest.mark.guards
def test_up_again_changes_nothing_and_status_says_which_program_answers(team):
    """`up` again starts nothing; `status` names all fourteen programs, and "answers" is asked of each
    program, not read from its state: a process frozen with SIGSTOP is still RUNNING to supervisord, and
    status says it does not answer (the volume server's HTTP port, the Spark master's cluster state, a
    Celery worker's ping through the broker), until it runs on."""
    from nyc_taxi.deployment.supervisor import program_names

    settings, env = team
    before = _component_pids(settings)
    again = _team(env, "up")
    assert again.returncode == 0, again.stderr
    assert _component_pids(settings) == before
    names = program_names()
    assert set(before) == set(names) and len(names) == 14
    status = _status(env)
    assert {name: (status[name]["state"], status[name]["answers"], status[name]["pid"]) for name in names} == {
        name: ("RUNNING", "yes", before[name]) for name in names
    }
    frozen = ("seaweedfs-volume", "spark-master", "airflow-worker-1")
    for name in frozen:
        os.kill(before[name], signal.SIGSTOP)
    try:
        status = _status(env)
    finally:
        for name in frozen:
            os.kill(before[name], signal.SIGCONT)
    assert {name for name in names if status[name]["answers"] == "no"} >= set(frozen), status
    assert all(status[name]["state"] == "RUNNING" for name in names), status
    after = _wait_for(lambda: _status(env), lambda s: all(p["answers"] == "yes" for p in s.values()), 120)
    assert all(p["answers"] == "yes" for p in after.values()), after


def test_postgres_data_left_by_a_removed_state_directory_is_named_with_its_remedy(tmp_path):
    """PostgreSQL keeps its data under its own user's home: a state directory removed without `team down`
    leaves it. `team up` on that path again refuses the orphaned cluster with the command that removes
    it, and after that command a fresh record is made."""
    from nyc_taxi.core import team as services
    from nyc_taxi.core.processes import ServiceError
    from nyc_taxi.core.settings import Settings
    from nyc_taxi.deployment import services as deployment
    from nyc_taxi.deployment.supervisor import Supervisor

    settings = Settings(profile="team", state_dir=tmp_path / "state")
    record = deployment._record(settings, Supervisor(settings))
    postgres = deployment.Postgres(settings, record)
    try:
        postgres.prepare()  # initdb: the cluster's data, under PostgreSQL's user's home when root
        services.services_record(settings).unlink()  # the state directory's record gone, the data kept
        with pytest.raises(ServiceError, match="bash run team down --delete-data"):
            deployment.up(settings)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        removed = _team(env | {"PROFILE": "team", "STATE_DIR": str(settings.state_dir)}, "down", "--delete-data")
        assert removed.returncode == 0 and not postgres.directory.exists(), removed.stdout + removed.stderr
        assert deployment._record(settings, Supervisor(settings))["postgres"]["password"]
    finally:
        deployment.down(settings, delete_data=True)


def test_every_dataset_keeps_its_name_datahubs_iceberg_source_on_postgres_included(team):
    """The same identities as on the local profile: the registry's names, the lineage the deployment's
    tasks wrote, and what DataHub's own Iceberg source reads from the PostgreSQL catalog."""
    from nyc_taxi.core import team as services
    from nyc_taxi.core.naming import identity
    from nyc_taxi.core.settings import Settings
    from nyc_taxi.lineage.write.datahub_pipeline import ingest_catalog
    from nyc_taxi.lineage.write.destinations import openlineage_file
    from nyc_taxi.lineage.write.outbox import read_datahub_file, read_openlineage_file

    settings, _ = team
    local = Settings(profile="local", state_dir=settings.state_dir)  # the same lake under the local profile
    bucket = f"s3://{services.ObjectStore(settings).bucket}"
    for dataset in registry.DATASETS.values():
        here, there = identity(dataset, settings), identity(dataset, local)
        names = ("key", "datahub_urn", "ol_namespace", "ol_name", "asset_uri")
        assert [getattr(here, n) for n in names] == [getattr(there, n) for n in names], dataset.name
        # where the bytes are differs, and only the storage symlink says so: the bucket
        if there.ol_symlinks:
            assert [s.namespace for s in here.ol_symlinks if s.type == "LOCATION"] == [bucket], here

    records = read_datahub_file(ingest_catalog(settings))
    tables = {r["entityUrn"] for r in records if r["entityUrn"].startswith("urn:li:dataset:")}
    assert tables == {identity(t, local).datahub_urn for t in registry.TABLES.values()}

    events = read_openlineage_file(openlineage_file(settings, "airflow"))
    merge = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(f".{TAXI_MERGE}")]
    raw = identity(registry.YELLOW_TAXI_RAW, local)
    assert merge and all((o["namespace"], o["name"]) == (raw.ol_namespace, raw.ol_name) for o in merge[0]["outputs"])


# ---- chaos: the mission under faults, each at its moment ------------------------------------------------

CHAOS_MONTHS = ((2019, 3), (2019, 4))
CHAOS_ROWS = 20_000


@pytest.fixture(scope="module")
def chaos(team, lineage_server, site):
    """The chaos run's mission on this module's deployment — two months (both ingestion DAGs each, the
    training the scheduler starts after each merge), a weather-adjusted backtest, the last shipping of
    lineage — under the eight named moments (each held open so it is met every time) and three faults
    inside tasks, two of them in one task: (settings, the faults as they went, the mission's DAG runs, the
    taxi files)."""
    from nyc_taxi.chaos import mission
    from nyc_taxi.chaos.run import Fault, with_faults

    settings, env = team
    _api(settings).idle(seconds=1800)  # the runs of the tests before (a training an asset event started)
    files = mission.publish(site, CHAOS_ROWS, CHAOS_MONTHS)
    first, second = (f"month {y:04d}-{m:02d}" for y, m in CHAOS_MONTHS)
    faults = [
        Fault(1, 1, first, "lineage-server", "lineage server down beyond every retry budget"),
        Fault(2, 1, first, "airflow-worker", "staging load after writing"),
        Fault(3, 1, first, "airflow-worker", "worker after commit"),
        Fault(4, 1, first, "spark-driver", "during", "ingest_weather_data.stage_landed_files", 1.0),
        Fault(5, 1, second, "postgres", "PostgreSQL mid-commit"),
        Fault(6, 1, second, "airflow-api-server", "API server while a task reports success"),
        Fault(7, 1, second, "airflow-scheduler", "scheduler between queueing and recording"),
        Fault(8, 1, "backtest", "redis", "Redis while a task is queued"),
        Fault(9, 1, "backtest", "metaflow-step", "during", "train_forecast_model.run_training_flow", 5.0),
        # two faults in one task: the one met second finds its process under the try after the first's
        Fault(10, 1, "backtest", "spark-driver", "during", "train_forecast_model.run_training_flow", 2.0),
        Fault(11, 1, "backtest", "lineage shipper", "lineage shipper after the server accepted"),
    ]
    started = dt.datetime.now(dt.UTC)
    runs = with_faults(settings, env, lineage_server, faults, print, months=CHAOS_MONTHS)
    ours = [r for r in runs if dt.datetime.fromisoformat(r["run_after"]) >= started]
    return SimpleNamespace(
        settings=settings, env=env, faults={f.moment: f for f in faults}, all=faults, runs=ours, files=files
    )


@pytest.mark.guards
def test_chaos_every_fault_met_its_moment_and_what_it_killed_came_back_within_its_bound(chaos):
    from nyc_taxi.chaos.run import RECOVERY_BOUND, TASK_BOUND

    for fault in chaos.all:
        assert not fault.error and fault.at and fault.pids, vars(fault)
        assert fault.recovered_s is not None and fault.recovered_s <= RECOVERY_BOUND, vars(fault)
        assert fault.task_done_s is None or fault.task_done_s <= TASK_BOUND, vars(fault)
    assert all(r["state"] == "success" for r in chaos.runs) and len(chaos.runs) >= 5, chaos.runs


def test_chaos_tables_equal_an_independent_reading_and_every_file_and_manifest_reads(chaos, site):
    from nyc_taxi.chaos import check
    from nyc_taxi.core.catalog import load_table

    settings = chaos.settings
    for taxi_file in chaos.files:
        _raw_holds_exactly(settings, taxi_file)
    for year, month in CHAOS_MONTHS:
        _check_weather(settings, site, year, month)
    # staging holds the last month staged, each row once: a retried stage replaced it, never appended
    staging = load_table(registry.YELLOW_TAXI_STAGING, settings).scan().to_arrow()
    assert comparable(staging).equals(comparable(expected_taxi_rows(chaos.files[-1])))
    # the trainings the scheduler started after each merge, from an independent count of the files
    for year, month in CHAOS_MONTHS:
        as_of = dt.datetime(year + month // 12, month % 12 + 1, 1)
        counted = expected_actuals(chaos.files, as_of - dt.timedelta(days=28), as_of)
        assert _forecasts_of(settings, as_of) == seasonal_naive(counted, as_of, 24), as_of
    # the weather-adjusted backtest, recomputed from the files: counts and the rain of NOAA's files
    as_of = dt.datetime(*CHAOS_MONTHS[-1], 15)
    counted = expected_actuals(chaos.files, as_of - dt.timedelta(days=28), as_of + dt.timedelta(hours=24))
    _, expected = expected_weather_adjusted(counted, expected_daily_prcp(site, CHAOS_MONTHS), as_of, 24)
    predicted = _forecasts_of(settings, as_of)
    assert predicted.keys() == expected.keys()
    assert all(abs(predicted[k] - expected[k]) < 1e-9 for k in expected)
    assert check.unreadable_files(settings.state_dir) == []
    # the chaos command's own reading of the files agrees, and finds a difference where there is one
    from nyc_taxi.chaos import expected as chaos_expected
    from nyc_taxi.chaos import mission

    backtest = mission.backtest_origin(CHAOS_MONTHS)
    published = chaos_expected.expected(site, chaos.files, CHAOS_MONTHS, backtest)
    # this deployment also holds the months of the tests before: only=False leaves them out
    assert check.unexpected(settings.state_dir, published, only=False) == {}
    assert set(check.unexpected(settings.state_dir, published)) == {"yellow_taxi_raw", "weather_raw"}
    swapped = chaos_expected.expected(site, chaos.files[::-1], CHAOS_MONTHS, backtest)  # staging: the other month
    assert set(check.unexpected(settings.state_dir, swapped, only=False)) == {"yellow_taxi_staging"}


def test_chaos_lineage_reached_the_server_once_and_nothing_is_left_running_or_queued(chaos, lineage_server):
    from nyc_taxi.chaos import check
    from nyc_taxi.chaos.run import _datahub_missing, _leftovers
    from nyc_taxi.fixtures.lineage_server import OPENLINEAGE_PATH
    from nyc_taxi.lineage.write.delivery import OpenLineageServer

    local = OpenLineageServer(chaos.settings)
    events = [e for path in local.files() for e in local.read(path)]
    delivered = check.delivery(events, lineage_server.stored(OPENLINEAGE_PATH))
    assert delivered == {"missing": [], "twice": []}
    assert _datahub_missing(chaos.settings, lineage_server) == 0
    # the shipper killed after the server stored a record sent it again; the server keeps it once
    assert len(lineage_server.accepted(OPENLINEAGE_PATH)) + len(
        lineage_server.accepted("/aspects?action=ingestProposal")
    ) > len(lineage_server.stored(OPENLINEAGE_PATH)) + len(lineage_server.stored("/aspects?action=ingestProposal"))
    assert _leftovers(chaos.settings, chaos.env) == []


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
    assert len(commits) == 1 and "merge_upsert_staging_into_raw_yellow" in commits[0].summary.get(COMMITTED_BY), commits
    task = _task(_api(chaos.settings), TAXI, fault.task["dag_run_id"], TAXI_MERGE)
    assert task["state"] == "success" and task["try_number"] >= 2, task
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
    from nyc_taxi.chaos.run import RECOVERY_BOUND

    fault = chaos.faults[moment]
    assert said in fault.at and not fault.error, vars(fault)
    assert fault.recovered_s is not None and fault.recovered_s <= RECOVERY_BOUND, vars(fault)
    if "committed" in said:  # the try killed after its commit never said so: a later try ended the task
        hit = fault.task
        task = _task(_api(chaos.settings), hit["dag_id"], hit["dag_run_id"], hit["task_id"])
        assert task["state"] == "success" and task["try_number"] > hit["try_number"], (task, hit)


def test_chaos_postgres_killed_mid_commit_deleted_no_file_a_table_may_reference(chaos):
    """PostgreSQL killed while the catalog's UPDATE of raw's commit was in flight: the commit did not
    happen, the writer retried, and every table's current metadata, manifests and data files read."""
    from nyc_taxi.chaos import check

    fault = chaos.faults["PostgreSQL mid-commit"]
    assert "in flight" in fault.at and "merge_upsert_staging_into_raw_yellow" in fault.at, fault.at
    assert check.unreadable_files(chaos.settings.state_dir) == []


@pytest.fixture
def no_training(team):
    """train_forecast_model paused for a test that loads a month only to hurt the load: its merge's asset
    event then starts no training (the scheduler queues asset-triggered runs for unpaused DAGs only), and
    the tests after it do not wait for a run nobody checks. The next asset-triggered training consumes
    every event since the last one (Airflow's event window, paused or not) and forecasts from the latest
    month among them, so these tests come after every test that checks a training a merge started."""
    api = _api(team[0])
    before = {r["dag_run_id"] for r in api.runs(TRAINING, limit=100)}
    api.call(f"/api/v2/dags/{TRAINING}", {"is_paused": True}, method="PATCH")
    try:
        yield
        assert {r["dag_run_id"] for r in api.runs(TRAINING, limit=100)} == before  # no training while paused
    finally:
        api.call(f"/api/v2/dags/{TRAINING}", {"is_paused": False}, method="PATCH")


def _when_running(api: RestApi, run_id: str, task: str, seconds: float = 600) -> dict:
    found = _wait_for(lambda: _task(api, TAXI, run_id, task), lambda ti: ti["state"] == "running", seconds)
    assert found and found["state"] == "running", found
    return found


def test_every_object_survives_the_s3_gateway_the_volume_server_and_the_filer_killed_in_the_middle_of_a_load(
    team, site, no_training
):
    """SeaweedFS's S3 gateway killed while the month downloads, its volume server while it stages, its
    filer while it merges (SIGKILL to each process): supervisord runs each again, the load succeeds (a
    task whose storage went away is retried), raw holds the file's rows once, and every object the
    bucket held before is there with the same ETag."""
    settings, env = team
    before = _bucket(settings)
    assert before
    taxi_file, api, run_id = _a_taxi_month_loading(settings, site, 2024, 9)
    for task, program in (
        (TAXI_JOBS.download_published_files.name, "seaweedfs-s3"),
        (TAXI_JOBS.stage_landed_files.name, "seaweedfs-volume"),
        (TAXI_MERGE, "seaweedfs-filer"),
    ):
        _when_running(api, run_id, task)
        old = _kill(settings, program)
        _restarted(settings, program, old)
        assert _restarts(env, program) >= 1

    assert _finished(api, TAXI, run_id)["state"] == "success"
    _raw_holds_exactly(settings, taxi_file)
    after = _bucket(settings)
    assert {key: after.get(key) for key in before} == before


def _status(env) -> dict[str, dict]:
    """`team status`, program by program: its state, whether it answers, its pid, its restarts."""
    status = _team(env, "status")
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("program"))
    found = {}
    for line in lines[header + 1 :]:
        words = line.split()
        if len(words) == 6 and words[-1].isdigit():
            found[words[0]] = {
                "state": words[1],
                "answers": words[2],
                "pid": int(words[3]) if words[3].isdigit() else None,
                "restarts": int(words[-1]),
            }
    return found


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


def test_ten_programs_killed_at_once_are_each_restarted_counted_and_answering_and_every_object_reads(team):
    """An operator's test: ten programs SIGKILLed together. supervisord runs each again; `team status`
    counts each one's restart (a burst of exits once overflowed supervisord's event buffer, and a killed
    master showed 0 restarts) and says each program answers a request once it does (RUNNING came seconds
    before the S3 gateway accepted connections); every object of the bucket reads as it was."""
    settings, env = team
    _api(settings).idle(seconds=1800)
    before, objects = _status(env), _bucket(settings)
    assert set(BURST) <= set(before) and all(p["answers"] == "yes" for p in before.values()), before
    pids = {program: _programs(settings)[program]["pid"] for program in BURST}
    for pid in pids.values():
        os.kill(pid, signal.SIGKILL)
    for program, pid in pids.items():
        _restarted(settings, program, pid, seconds=300)
    after = _wait_for(lambda: _status(env), lambda s: all(p["answers"] == "yes" for p in s.values()), 300)
    assert all(p["state"] == "RUNNING" and p["answers"] == "yes" for p in after.values()), after
    assert {p: after[p]["restarts"] - before[p]["restarts"] >= 1 for p in BURST} == dict.fromkeys(BURST, True), (
        before,
        after,
    )
    now = _bucket(settings)
    assert {key: now.get(key) for key in objects} == objects


def test_a_celery_worker_killed_in_the_middle_of_a_merge_is_retried_on_the_other_and_the_month_loads_once(
    team, site, no_training
):
    """A worker lost with its task (SIGKILL to its whole process tree, as a machine that goes away):
    the task stops heart-beating, Airflow fails that try and retries it on the other worker; the
    month is in raw exactly once. supervisord runs the lost worker again, and `team status` counts it."""
    import psutil

    from nyc_taxi.core import team as services
    from nyc_taxi.deployment.supervisor import logs_dir

    settings, env = team
    taxi_file, api, run_id = _a_taxi_month_loading(settings, site, 2024, 10)
    cluster = services.SparkCluster(settings)

    def merging():
        ti = _task(api, TAXI, run_id, TAXI_MERGE)
        active = [a for a in cluster.applications() if a["state"] == "RUNNING"]
        return ti if ti["state"] == "running" and ti.get("pid") and active else None

    ti = _wait_for(merging, lambda found: found is not None, 600)
    assert ti, _task(api, TAXI, run_id, TAXI_MERGE)
    workers = {n: p for n, p in _component_pids(settings).items() if n.startswith("airflow-worker-")}
    victim = next(n for n, p in workers.items() if ti["pid"] in {c.pid for c in psutil.Process(p).children(True)})
    time.sleep(2)  # its Spark application is running the merge
    tree = [psutil.Process(workers[victim]), *psutil.Process(workers[victim]).children(True)]
    for process in tree:
        process.kill()
    psutil.wait_procs(tree, timeout=30)

    assert _finished(api, TAXI, run_id)["state"] == "success"
    retried = _task(api, TAXI, run_id, TAXI_MERGE)
    assert retried["state"] == "success" and retried["try_number"] == 2, retried
    _raw_holds_exactly(settings, taxi_file)
    _restarted(settings, victim, workers[victim])
    assert _restarts(env, victim) >= 1
    (survivor,) = set(workers) - {victim}
    assert "received" in (logs_dir(settings) / f"{survivor}.log").read_text()


def test_postgres_and_the_scheduler_killed_in_the_middle_of_a_merge_come_back_and_the_month_loads_once(
    team, site, no_training
):
    """PostgreSQL (the catalog and Airflow's database) and the scheduler killed with SIGKILL while a merge
    runs: supervisord runs both again (PostgreSQL recovers from its write-ahead log), with no `team up`;
    the merge's try fails or succeeds, the run ends in success, and the month is in raw exactly once."""
    settings, env = team
    taxi_file, api, run_id = _a_taxi_month_loading(settings, site, 2024, 11)
    _when_running(api, run_id, TAXI_MERGE)
    time.sleep(3)
    killed = {program: _kill(settings, program) for program in ("postgres", "airflow-scheduler")}
    for program, pid in killed.items():
        _restarted(settings, program, pid)
        assert _restarts(env, program) >= 1
    assert _finished(_api(settings), TAXI, run_id)["state"] == "success"
    _raw_holds_exactly(settings, taxi_file)


def test_down_in_the_middle_of_a_training_run_leaves_no_process_and_up_finds_every_object(team, site):
    """`team down` while the flow runs (its Airflow task in a process group of its own, the flow's steps
    and a Spark driver under it): afterwards no process of the deployment runs (the process table: none
    carries the deployment's environment, none runs from its state directory). `team up` then brings
    back every object of the bucket, with nothing saved or restored by the project. Last in the module:
    the deployment is down after it until its `up`."""
    import psutil

    from nyc_taxi.deployment.supervisor import MARKER

    settings, env = team
    api = _api(settings)
    run_id = api.trigger(TRAINING, {"as_of_datetime": "2024-07-20T00:00"})

    def flow_running():
        return [
            p for p in psutil.process_iter(["cmdline"]) if "train_model_flow.py" in " ".join(p.info["cmdline"] or [])
        ]

    assert _wait_for(flow_running, bool, 600), _task(
        api, TRAINING, run_id, jobs.TRAIN_FORECAST_MODEL.run_training_flow.name
    )

    def spark_driver():  # a step's own Spark JVM (spark-submit's pyspark-shell)
        return [p for p in psutil.process_iter(["cmdline"]) if "pyspark-shell" in " ".join(p.info["cmdline"] or [])]

    assert _wait_for(spark_driver, bool, 300)
    before = _bucket(settings)
    down = _team(env, "down")
    assert down.returncode == 0, down.stdout + down.stderr

    mine, state = str(Path(settings.state_dir) / "team"), str(settings.state_dir)
    left = []
    for process in psutil.process_iter(["cmdline", "environ"]):
        environ, cmdline = process.info["environ"] or {}, " ".join(process.info["cmdline"] or [])
        if environ.get(MARKER) == mine or state in cmdline:
            left.append((process.pid, cmdline[:120]))
    assert left == []

    up = _team(env, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    after = _bucket(settings)  # the flow may have written more after the first listing, before `down`
    assert len(before) > 1000 and {key: after.get(key) for key in before} == before
