"""The team profile, run for real on this machine: `bash run team up` starts PostgreSQL (Airflow's
metadata database and the Iceberg JDBC catalog), Redis, a Spark standalone cluster and Airflow on the
CeleryExecutor with two workers, each a process of its own. DAG runs are triggered through the REST API
as the UI's Trigger button does; the merge's asset event makes the scheduler start the training DAG,
whose flow runs its Spark steps on the cluster. The tables equal an independent computation from the
fixture files; nothing listens beyond 127.0.0.1; the generated passwords are in no log."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from expected_loads import (
    actuals_rows,
    comparable,
    expected_actuals,
    expected_taxi_rows,
    expected_weather,
    seasonal_naive,
    table_actuals,
)

from nyc_taxi.airflow_adapter.environment import airflow_environment
from nyc_taxi.core import datasets as registry
from nyc_taxi.core import jobs, processes
from nyc_taxi.fixtures.site import add_taxi_month, add_weather_month, taxi_path

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.team]

MONTH = (2024, 7)
TAXI, WEATHER, TRAINING = (
    jobs.INGEST_YELLOW_TAXI_DATA.name,
    jobs.INGEST_WEATHER_DATA.name,
    jobs.TRAIN_FORECAST_MODEL.name,
)
TAXI_MERGE = jobs.INGEST_YELLOW_TAXI_DATA.merge_upsert_staging_into_raw_yellow.name


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _team(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.team", *args], env=env, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def team(site, tmp_path_factory):
    """The team profile's deployment, brought up once for this module under a state directory of its
    own, and down (its PostgreSQL data removed) afterwards: (settings, environment)."""
    from nyc_taxi.core.settings import Settings

    state = tmp_path_factory.mktemp("team-state")
    # the session's local-profile Airflow settings stay out: the team profile derives its own
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {"PROFILE": "team", "STATE_DIR": str(state), "AIRFLOW_PORT": str(_free_port()), "SPARK_SERVER": "false"}
    # a deployment's own choices, shorter than Airflow's defaults (300 s each) so a lost worker's task
    # is failed and retried within the test's patience
    env |= {
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "45",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
        "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5",
    }
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
        yield Settings(profile="team", state_dir=state, airflow_port=int(env["AIRFLOW_PORT"])), env
    finally:
        down = _team(env, "down", "--delete-data")
        print(down.stdout, down.stderr)


def _token(settings) -> str:
    base = f"http://127.0.0.1:{settings.airflow_port}"
    password = json.loads((settings.airflow_home / "simple_auth_manager_passwords.json.generated").read_text())
    return _request(f"{base}/auth/token", body={"username": "admin", "password": password["admin"]})["access_token"]


def _trigger(settings, token: str, dag: str, month: str) -> str:
    base = f"http://127.0.0.1:{settings.airflow_port}"
    body = {"logical_date": None, "conf": {"month": month}}
    return _request(f"{base}/api/v2/dags/{dag}/dagRuns", token, body)["dag_run_id"]


def _finished(settings, token: str, dag: str, run_id: str, seconds: float = 900) -> dict:
    url = f"http://127.0.0.1:{settings.airflow_port}/api/v2/dags/{dag}/dagRuns/{run_id}"
    return _wait_for(lambda: _request(url, token), lambda r: r["state"] in ("success", "failed"), seconds)


def _request(url: str, token: str | None = None, body: dict | None = None) -> dict:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers, data=data), timeout=30) as answer:
        return json.load(answer)


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
        time.sleep(3)
    return answer


def _a_taxi_month_loading(settings, site, year: int, month: int):
    """A taxi month of 100,000 trips published and its DAG run triggered: (the file, a token, the run
    id, the URL of the run's merge task instance)."""
    taxi_file = add_taxi_month(site, year, month, rows=100_000, seed=year + month)
    token = _token(settings)
    run_id = _trigger(settings, token, TAXI, f"{year:04d}-{month:02d}")
    base = f"http://127.0.0.1:{settings.airflow_port}"
    return taxi_file, token, run_id, f"{base}/api/v2/dags/{TAXI}/dagRuns/{run_id}/taskInstances/{TAXI_MERGE}"


def _component_pids(settings) -> dict[str, int]:
    from nyc_taxi.core import team

    pids = dict(processes.read_record(team.team_dir(settings) / "airflow.json"))
    pids["spark"] = processes.read_record(team.SparkCluster(settings).record)["pids"]
    pids["redis"] = processes.read_record(team.Redis(settings).record)["pid"]
    pids["s3"] = processes.read_record(team.ObjectStore(settings).record)["pid"]
    postmaster = team.Postgres(settings).data_dir / "data" / "postmaster.pid"
    pids["postgres"] = int(postmaster.read_text().split()[0])
    return pids


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


def test_the_mission_through_the_scheduler_on_postgres_celery_and_a_spark_cluster(team, site):
    from nyc_taxi.core import team as services
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.core.naming import landed_folder

    settings, _ = team
    base = f"http://127.0.0.1:{settings.airflow_port}"
    taxi_file = add_taxi_month(site, *MONTH, rows=20_000, seed=71)
    add_weather_month(site, *MONTH, seed=71)
    token = _token(settings)

    # both ingestion DAGs at once, as two clicks on Trigger would
    month = f"{MONTH[0]:04d}-{MONTH[1]:02d}"
    triggered = {dag: _trigger(settings, token, dag, month) for dag in (TAXI, WEATHER)}
    for dag, run_id in triggered.items():
        done = _finished(settings, token, dag, run_id)
        assert done and done["state"] == "success", (dag, done)

    def training():
        runs = _request(f"{base}/api/v2/dags/{TRAINING}/dagRuns?order_by=-run_after", token)["dag_runs"]
        return [r for r in runs if r["run_type"] == "asset_triggered"]

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

    # the lake is in the bucket: the landed file, raw's data files, the flow's artifacts; none on disk
    objects = services.ObjectStore(settings)
    keys = {
        o["Key"]
        for page in objects.client().get_paginator("list_objects_v2").paginate(Bucket=objects.bucket)
        for o in page.get("Contents", [])
    }
    assert f"{landed_folder(registry.TLC_YELLOW_TRIPDATA_LANDED)}/{taxi_file.name}" in keys
    files = load_table(registry.YELLOW_TAXI_RAW, settings).inspect.files().column("file_path").to_pylist()
    assert files and all(
        f.startswith(f"s3a://{objects.bucket}/warehouse/") and f[len(f"s3a://{objects.bucket}/") :] in keys
        for f in files
    )
    assert any(k.startswith("metaflow/TrainForecastModelFlow/") for k in keys)
    assert not (settings.state_dir / "lake").exists()
    assert not list(settings.metaflow_home.glob("**/TrainForecastModelFlow/data"))  # artifacts: the bucket's

    # every Spark session ran on the cluster: one application per Spark task and step, all finished
    applications = services.SparkCluster(settings).applications()
    assert len(applications) >= 4 and all(a["state"] == "FINISHED" for a in applications), applications
    # both Celery workers ran tasks, and no catalog commit had to wait for another writer
    logs = settings.airflow_home / "logs" / "components"
    for worker in ("worker-1", "worker-2"):
        assert "succeeded" in (logs / f"{worker}.log").read_text(), worker
    task_logs = _task_logs(settings)
    assert len(task_logs) >= 9 and not [text for text in task_logs if "lost a race with another writer" in text]


def _task_spans(settings, token: str, dag: str, run_id: str) -> list[tuple[dt.datetime, dt.datetime]]:
    url = f"http://127.0.0.1:{settings.airflow_port}/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances"
    return [
        (dt.datetime.fromisoformat(ti["start_date"]), dt.datetime.fromisoformat(ti["end_date"]))
        for ti in _request(url, token)["task_instances"]
        if ti["start_date"] and ti["end_date"]
    ]


def test_both_ingestion_dags_and_a_training_run_at_once_on_two_workers_need_no_retry_and_agree(team, site):
    """August's taxi and weather DAG runs and a backtest of the training DAG (as of mid-July, which the
    mission test loaded) triggered at the same moment: the flow reads raw while a merge writes it, on the
    other Celery worker. All succeed, no commit had to be recomputed after losing a race, raw and weather
    hold August as published, and the backtest's actuals and forecasts equal an independent count."""
    from nyc_taxi.core.catalog import load_table

    settings, _ = team
    base = f"http://127.0.0.1:{settings.airflow_port}"
    july = taxi_path(site, *MONTH)
    assert july.exists()  # published by the mission test
    august = add_taxi_month(site, 2024, 8, rows=20_000, seed=72)
    add_weather_month(site, 2024, 8, seed=72)
    token = _token(settings)
    before = {r["dag_run_id"] for r in _request(f"{base}/api/v2/dags/{TRAINING}/dagRuns", token)["dag_runs"]}

    as_of = dt.datetime(2024, 7, 15)
    backtest = {"logical_date": None, "conf": {"as_of_datetime": as_of.strftime("%Y-%m-%dT%H:%M")}}
    triggered = {
        TRAINING: _request(f"{base}/api/v2/dags/{TRAINING}/dagRuns", token, backtest)["dag_run_id"],
        TAXI: _trigger(settings, token, TAXI, "2024-08"),
        WEATHER: _trigger(settings, token, WEATHER, "2024-08"),
    }
    for dag, run_id in triggered.items():
        done = _finished(settings, token, dag, run_id)
        assert done and done["state"] == "success", (dag, done)
    # the flow ran while an ingestion task ran on the other worker (one task at a time per worker)
    (flow_span,) = _task_spans(settings, token, TRAINING, triggered[TRAINING])
    ingestion = [span for dag in (TAXI, WEATHER) for span in _task_spans(settings, token, dag, triggered[dag])]
    assert any(start < flow_span[1] and flow_span[0] < end for start, end in ingestion), (flow_span, ingestion)

    # August's merge started a training run of its own (after the backtest: one run at a time): let it end
    def asset_started():
        runs = _request(f"{base}/api/v2/dags/{TRAINING}/dagRuns", token)["dag_runs"]
        return [r for r in runs if r["dag_run_id"] not in before and r["run_type"] == "asset_triggered"]

    started = _wait_for(
        asset_started, lambda runs: runs and all(r["state"] in ("success", "failed") for r in runs), 900
    )
    assert started and all(r["state"] == "success" for r in started), started

    raw = load_table(registry.YELLOW_TAXI_RAW, settings).scan(row_filter=f"source_file == '{august.name}'")
    assert comparable(raw.to_arrow()).equals(comparable(expected_taxi_rows(august)))
    _check_weather(settings, site, 2024, 8)

    # the backtest's window (the DAG's defaults: 28 days back, 24 h ahead) holds exactly July's counts
    start, end = as_of - dt.timedelta(days=28), as_of + dt.timedelta(hours=24)
    counted = expected_actuals([july], start, end)
    actuals = load_table(registry.YELLOW_RIDES_HOURLY_ACTUALS, settings).scan().to_arrow().to_pylist()
    assert table_actuals([r for r in actuals if start <= r["pickup_hour"] < end]) == actuals_rows(counted)
    assert _forecasts_of(settings, as_of) == seasonal_naive(counted, as_of, 24)
    assert not [text for text in _task_logs(settings) if "lost a race with another writer" in text]


def test_nothing_listens_beyond_127_0_0_1_and_no_password_is_in_a_log(team, listening_sockets):
    from nyc_taxi.core import team as services

    settings, env = team
    pids = _component_pids(settings)
    flat = [p for value in pids.values() for p in (value if isinstance(value, list) else [value])]
    listeners = listening_sockets(*flat)
    assert len(listeners) >= 5 and {address for _, address, _ in listeners} == {"127.0.0.1"}, listeners

    secrets = [
        processes.read_record(services.Postgres(settings).record)["password"],
        processes.read_record(services.Redis(settings).record)["password"],
        services.ObjectStore(settings).keys()[1],
    ]
    config = subprocess.run(
        [sys.executable, "-m", "airflow", "config", "list"],
        env={**env, **airflow_environment(settings)},
        capture_output=True,
        text=True,
    )
    assert config.returncode == 0 and "sql_alchemy_conn" in config.stdout
    places = {"airflow config list": config.stdout + config.stderr}
    secret_files = {
        services.Postgres(settings).record,
        services.Postgres(settings).airflow_url_file,
        services.Postgres(settings).celery_results_url_file,
        services.Redis(settings).record,
        services.Redis(settings).broker_url_file,
        services.Redis(settings).directory / "redis.conf",
        services.ObjectStore(settings).record,
        services.ObjectStore(settings).credentials_file,
    }
    for path in Path(settings.state_dir).rglob("*"):
        if path.is_file() and path not in secret_files and path.stat().st_size < 50_000_000:
            places[str(path)] = path.read_bytes().decode(errors="replace")
    for path in services.Postgres(settings).data_dir.glob("*.log"):
        places[str(path)] = path.read_text(errors="replace")
    for secret in secrets:
        assert not [place for place, text in places.items() if secret in text]
    for path in secret_files:
        assert path.stat().st_mode & 0o077 == 0, path


def test_up_again_changes_nothing_and_status_names_every_service(team):
    settings, env = team
    before = _component_pids(settings)
    again = _team(env, "up")
    assert again.returncode == 0, again.stderr
    assert _component_pids(settings) == before
    status = _team(env, "status").stdout
    for service in (
        "PostgreSQL: running",
        "Redis: running",
        "object storage: running",
        "Spark: master running",
        "Airflow: 6 of 6",
    ):
        assert service in status, status


def test_postgres_data_left_by_a_removed_state_directory_is_named_with_its_remedy(tmp_path):
    """PostgreSQL keeps its data under its own user's home: a state directory removed without `team down`
    leaves it. `team up` on that path again refuses it with the command that removes it, and after that
    command it starts a fresh cluster."""
    from nyc_taxi.core import team as services
    from nyc_taxi.core.settings import Settings

    settings = Settings(profile="team", state_dir=tmp_path / "state")
    postgres = services.Postgres(settings)
    try:
        assert postgres.up().startswith("PostgreSQL: started")
        postgres.down()
        postgres.record.unlink()  # the state directory's record gone, PostgreSQL's data kept
        with pytest.raises(services.ServiceError, match="bash run team down --delete-data"):
            postgres.up()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        removed = _team(env | {"PROFILE": "team", "STATE_DIR": str(settings.state_dir)}, "down", "--delete-data")
        assert removed.returncode == 0 and not postgres.data_dir.exists(), removed.stdout + removed.stderr
        assert postgres.up().startswith("PostgreSQL: started")
    finally:
        postgres.down(delete_data=True)


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


def test_the_bucket_keeps_the_lake_when_its_server_goes_down_and_comes_up(team):
    """moto keeps objects in memory: `down` saves them, `up` puts them back on the same port, and the
    tables read the same rows."""
    from nyc_taxi.core import team as services
    from nyc_taxi.core.catalog import load_table

    settings, _ = team
    objects = services.ObjectStore(settings)

    def listing() -> dict[str, int]:
        pages = objects.client().get_paginator("list_objects_v2").paginate(Bucket=objects.bucket)
        return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}

    before, port = listing(), processes.read_record(objects.record)["port"]
    raw_before = load_table(registry.YELLOW_TAXI_RAW, settings).scan().to_arrow()
    assert before and raw_before.num_rows > 0
    assert "saved" in objects.down() and objects.status() == "object storage: down"
    assert objects.up().startswith("object storage:") and processes.read_record(objects.record)["port"] == port
    assert listing() == before and not objects.saved.exists()
    assert load_table(registry.YELLOW_TAXI_RAW, settings).scan().to_arrow().equals(raw_before)


def test_a_celery_worker_killed_in_the_middle_of_a_merge_is_retried_on_the_other_and_the_month_loads_once(team, site):
    """A worker lost with its task (SIGKILL to its whole process tree, as a machine that goes away):
    the task stops heart-beating, Airflow fails that try and retries it on the other worker; the
    month is in raw exactly once. `team up` then starts the lost worker again."""
    import psutil

    from nyc_taxi.core import team as services
    from nyc_taxi.core.catalog import load_table

    settings, env = team
    taxi_file, token, run_id, merge = _a_taxi_month_loading(settings, site, 2024, 9)
    cluster = services.SparkCluster(settings)

    def merging():
        ti = _request(merge, token)
        active = [a for a in cluster.applications() if a["state"] == "RUNNING"]
        return ti if ti["state"] == "running" and ti.get("pid") and active else None

    ti = _wait_for(merging, lambda found: found is not None, 600)
    assert ti, _request(merge, token)
    workers = {n: p for n, p in _component_pids(settings).items() if n.startswith("worker-")}
    victim = next(n for n, p in workers.items() if ti["pid"] in {c.pid for c in psutil.Process(p).children(True)})
    time.sleep(2)  # its Spark application is running the merge
    tree = [psutil.Process(workers[victim]), *psutil.Process(workers[victim]).children(True)]
    for process in tree:
        process.kill()
    psutil.wait_procs(tree, timeout=30)

    done = _finished(settings, token, TAXI, run_id)
    assert done and done["state"] == "success", done
    retried = _request(merge, token)
    assert retried["state"] == "success" and retried["try_number"] == 2, retried
    (survivor,) = set(workers) - {victim}
    survivor_log = (settings.airflow_home / "logs" / "components" / f"{survivor}.log").read_text()
    assert survivor_log.count("received") >= 1

    raw = load_table(registry.YELLOW_TAXI_RAW, settings).scan(row_filter=f"source_file == '{taxi_file.name}'")
    assert comparable(raw.to_arrow()).equals(comparable(expected_taxi_rows(taxi_file)))

    again = _team(env, "up")
    assert again.returncode == 0, again.stderr
    assert "Airflow: 6 of 6" in _team(env, "status").stdout


def test_postgres_stopped_in_the_middle_of_a_merge_fails_that_try_and_the_retry_loads_the_month_once(team, site):
    """PostgreSQL (the catalog and Airflow's database) goes away while a merge runs: that try fails
    (the database refuses the task, or the task loses its heartbeat to an API server without its
    database, whichever comes first) and commits nothing; Airflow's scheduler, triggerer and DAG
    processor exit. Once `team up` brings PostgreSQL back (on the port it had) and starts what exited,
    Airflow fails the try that lost its heartbeat and retries it: the month is in raw exactly once."""
    from nyc_taxi.core import team as services
    from nyc_taxi.core.catalog import load_table

    settings, env = team
    taxi_file, token, run_id, merge = _a_taxi_month_loading(settings, site, 2024, 10)
    assert _wait_for(lambda: _request(merge, token), lambda ti: ti["state"] == "running", 600)
    postgres = services.Postgres(settings)
    port = processes.read_record(postgres.record)["port"]
    assert postgres.down() == "PostgreSQL: stopped"
    time.sleep(30)  # the task meets the closed database

    back = _team(env, "up")
    assert back.returncode == 0, back.stdout + back.stderr
    assert processes.read_record(postgres.record)["port"] == port
    done = _finished(settings, _token(settings), TAXI, run_id)
    assert done and done["state"] == "success", done
    retried = _request(merge, _token(settings))
    assert retried["state"] == "success" and retried["try_number"] == 2, retried
    raw = load_table(registry.YELLOW_TAXI_RAW, settings).scan(row_filter=f"source_file == '{taxi_file.name}'")
    assert comparable(raw.to_arrow()).equals(comparable(expected_taxi_rows(taxi_file)))
