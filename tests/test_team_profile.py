"""The team profile, run for real on this machine: `bash run team up` starts supervisord, which runs
PostgreSQL (Airflow's metadata database and the Iceberg JDBC catalog), Redis, SeaweedFS (master, volume
server, filer, S3 gateway: the lake and Metaflow's datastore), a Spark standalone cluster and Airflow on
the CeleryExecutor with two workers, each a process of its own.

The deployment's work is the chaos run's mission, shortened to one month (the whole mission under every
named moment, with a backtest beside the second month's loads, is the system lane's:
tests/test_team_system.py): the month's two ingestion DAG runs triggered together through the REST API
as the UI's Trigger button does, and the training the scheduler starts from the taxi merge's asset event.
Four faults hit it, each at its moment: the Celery worker running the taxi merge killed after its commit,
the scheduler killed during the weather stage, PostgreSQL killed in the middle of the weather merge's
commit, the lineage server down beyond every retry budget. Every table then equals an independent
computation from the fixture files, the lineage reached the server once, nothing is left running;
nothing listens beyond 127.0.0.1; the generated passwords and keys are in no log; `team up` again changes
nothing, and `team status` says which program answers (a frozen or just-killed one does not)."""

from __future__ import annotations

import contextlib
import dataclasses
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
    comparable,
    expected_actuals,
    expected_taxi_rows,
    seasonal_naive,
)
from listener_probes import SEAWEEDFS_HTTPS, https, spark_rpc_refusal, tls_handshake
from team_deployment import (
    TAXI,
    TAXI_MERGE,
    TRAINING,
    WEATHER,
    api,
    bucket,
    check_weather,
    component_pids,
    forecasts_of,
    programs,
    raw_holds_exactly,
    status,
    task,
    task_logs,
    team_cli,
    wait_for,
)

from nyc_taxi.airflow_adapter.environment import airflow_environment
from nyc_taxi.core import datasets as registry
from nyc_taxi.core import jobs

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.team]

MONTHS = ((2024, 7),)
ROWS = 20_000
MONTH = "month 2024-07"


@pytest.fixture(scope="module")
def mission(team, lineage_server, site):
    """The mission on this module's deployment under four faults, each at its moment: (settings, env, the
    faults as they went, the mission's DAG runs, the taxi files, the runs the mission triggered)."""
    from nyc_taxi_proving.chaos import mission as chaos_mission
    from nyc_taxi_proving.chaos.run import Fault, with_faults

    settings, env = team
    files = chaos_mission.publish(site, ROWS, MONTHS)
    steps = tuple(s for s in chaos_mission.steps(MONTHS) if s.name == MONTH)  # no backtest step
    faults = [
        Fault(1, 1, MONTH, "lineage-server", "lineage server down beyond every retry budget"),
        Fault(2, 1, MONTH, "airflow-worker", "worker after commit"),
        Fault(
            3,
            1,
            MONTH,
            "airflow-scheduler",
            "during",
            f"{WEATHER}.{jobs.INGEST_WEATHER_DATA.stage_landed_files.name}",
            2.0,
        ),
        Fault(4, 1, MONTH, "postgres", "PostgreSQL mid-commit", "weather_raw"),
    ]
    started = dt.datetime.now(dt.UTC)
    runs = with_faults(settings, env, lineage_server, faults, print, months=MONTHS, steps=steps)
    ours = [r for r in runs if dt.datetime.fromisoformat(r["run_after"]) >= started]
    triggered = [(dag, conf) for step in steps for dag, conf in step.runs]
    return SimpleNamespace(
        settings=settings, env=env, faults={f.moment: f for f in faults}, all=faults, runs=ours, files=files,
        triggered=triggered,
    )  # fmt: skip


@pytest.mark.guards
def test_every_fault_met_its_moment_and_what_it_killed_came_back_within_its_bound(mission):
    from nyc_taxi_proving.chaos.run import RECOVERY_BOUND, TASK_BOUND

    for fault in mission.all:
        assert not fault.error and fault.at and fault.pids and fault.proven, vars(fault)
        assert fault.recovered_s is not None and fault.recovered_s <= RECOVERY_BOUND, vars(fault)
        assert fault.task_done_s is None or fault.task_done_s <= TASK_BOUND, vars(fault)
    assert "committed yellow_taxi_raw" in mission.faults["worker after commit"].at
    assert "UPDATE of weather_raw in flight" in mission.faults["PostgreSQL mid-commit"].at
    assert "down for 90 s" in mission.faults["lineage server down beyond every retry budget"].at


def test_the_dag_runs_are_those_triggered_and_one_training_per_merge_each_a_success(mission):
    """Each DAG run the mission triggered, once, with its conf; and exactly one asset-triggered training per
    taxi merge (the retry of the merge whose worker was lost after its commit emitted the event the lost
    try never did): a duplicate run, or a missing one, fails here whatever the tables say."""
    manual = sorted((r["dag_id"], sorted(r["conf"].items())) for r in mission.runs if r["type"] == "manual")
    assert manual == sorted((dag, sorted(conf.items())) for dag, conf in mission.triggered), mission.runs
    trainings = [r for r in mission.runs if r["type"] == "asset_triggered"]
    assert [r["dag_id"] for r in trainings] == [TRAINING] * len(MONTHS), mission.runs
    assert {r["type"] for r in mission.runs} == {"manual", "asset_triggered"}, mission.runs
    assert all(r["state"] == "success" for r in mission.runs), mission.runs


def test_the_tables_equal_an_independent_reading_of_the_files_and_every_file_and_manifest_reads(mission, site):
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi_proving.chaos import check

    settings = mission.settings
    for taxi_file in mission.files:
        raw_holds_exactly(settings, taxi_file)
    raw = load_table(registry.YELLOW_TAXI_RAW, settings).scan(selected_fields=("source_file",)).to_arrow()
    assert set(raw.column("source_file").to_pylist()) == {f.name for f in mission.files}  # nothing else
    for year, month in MONTHS:
        check_weather(settings, site, year, month)
    # staging holds the last month staged, each row once
    staging = load_table(registry.YELLOW_TAXI_STAGING, settings).scan().to_arrow()
    assert comparable(staging).equals(comparable(expected_taxi_rows(mission.files[-1])))
    # the trainings the scheduler started after each merge (the DAG's defaults: seasonal naive, 28 days
    # back, 24 h ahead), from the month after the merge's: each forecast the same zone's count a week earlier
    for year, month in MONTHS:
        as_of = dt.datetime(year + month // 12, month % 12 + 1, 1)
        counted = expected_actuals(mission.files, as_of - dt.timedelta(days=28), as_of)
        assert forecasts_of(settings, as_of) == seasonal_naive(counted, as_of, 24), as_of
    assert check.unreadable_files(settings.state_dir) == []
    # the chaos command's own reading of the files agrees, and finds a difference where there is one
    from nyc_taxi_proving.chaos import expected as chaos_expected

    published = chaos_expected.expected(site, mission.files, MONTHS, backtest=None)
    assert check.unexpected(settings.state_dir, published) == {}
    # one published trip fewer than the tables hold, one county-day's value other than NOAA's, one zone-hour
    # counted otherwise
    key = next(iter(published.weather))
    column, value = next(iter(published.weather[key].items()))
    zone_hour = next(iter(published.actuals))
    differing = dataclasses.replace(
        published,
        taxi={name: rows[1:] for name, rows in published.taxi.items()},
        weather={**published.weather, key: {**published.weather[key], column: value + 1}},
        actuals={**published.actuals, zone_hour: published.actuals[zone_hour] + 1},
    )
    assert set(check.unexpected(settings.state_dir, differing)) == {
        "yellow_taxi_raw",
        "yellow_taxi_staging",
        "weather_raw",
        "weather_staging",
        "yellow_rides_hourly_actuals",
    }


def test_both_workers_ran_tasks_no_writer_lost_a_race_every_spark_session_ran_on_the_cluster_and_the_lake_is_a_bucket(
    mission,
):
    """The month's two ingestion DAGs ran at once on the two Celery workers, no catalog commit had to wait
    for another writer (PostgreSQL's transactions, not SQLite's file lock), every Spark session ran on the
    cluster, and the lake is in SeaweedFS's bucket."""
    from nyc_taxi.core import team as services
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.core.naming import landed_folder
    from nyc_taxi_proving.deployment.supervisor import logs_dir

    settings = mission.settings
    for worker in ("airflow-worker-1", "airflow-worker-2"):
        assert "succeeded" in (logs_dir(settings) / f"{worker}.log").read_text(), worker
    logs = task_logs(settings)
    assert len(logs) >= 8 and not [text for text in logs if "lost a race with another writer" in text]

    # every Spark session ran on the cluster: one application per Spark task and step, all finished
    applications = services.SparkCluster(settings).applications()
    assert len(applications) >= 5 and all(a["state"] == "FINISHED" for a in applications), applications
    # the landed files, raw's data files and the flow's artifacts are objects of the bucket; the bytes under
    # SeaweedFS's own directory, none in a lake directory
    objects = services.ObjectStore(settings)
    keys = set(bucket(settings))
    assert {f"{landed_folder(registry.TLC_YELLOW_TRIPDATA_LANDED)}/{f.name}" for f in mission.files} <= keys
    files = load_table(registry.YELLOW_TAXI_RAW, settings).inspect.files().column("file_path").to_pylist()
    assert files and all(
        f.startswith(f"s3a://{objects.bucket}/warehouse/") and f[len(f"s3a://{objects.bucket}/") :] in keys
        for f in files
    )
    assert any(k.startswith("metaflow/TrainForecastModelFlow/") for k in keys)
    assert not (settings.state_dir / "lake").exists()
    assert not list(settings.metaflow_home.glob("**/TrainForecastModelFlow/data"))  # artifacts: the bucket's
    volumes = services.team_dir(settings) / "seaweedfs" / "volume"
    assert sum(p.stat().st_size for p in volumes.glob("*.dat")) > sum(f.stat().st_size for f in mission.files)


def test_a_merge_lost_after_its_commit_is_committed_once_and_its_training_still_runs(mission):
    """The worker running the taxi merge killed once the commit landed: the retry finds the commit as its
    task run's own, commits nothing, and emits the asset event the lost try never did (the training it
    starts is counted above)."""
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.core.snapshots import COMMITTED_BY, MONTH

    fault = mission.faults["worker after commit"]
    month = f"{MONTHS[0][0]:04d}-{MONTHS[0][1]:02d}"
    raw = load_table(registry.YELLOW_TAXI_RAW, mission.settings)
    commits = [s for s in raw.snapshots() if (s.summary or {}).get(MONTH) == month]
    assert len(commits) == 1 and TAXI_MERGE in commits[0].summary.get(COMMITTED_BY), commits
    hit = fault.task
    retried = task(api(mission.settings), TAXI, hit["dag_run_id"], TAXI_MERGE)
    assert retried["state"] == "success" and retried["try_number"] > hit["try_number"], (retried, hit)


def test_postgres_killed_mid_commit_deleted_no_file_a_table_may_reference(mission):
    """PostgreSQL killed while the catalog's UPDATE of weather_raw's commit was in flight: the commit did not
    happen, the writer retried, and every table's current metadata, manifests and data files read."""
    from nyc_taxi_proving.chaos import check

    fault = mission.faults["PostgreSQL mid-commit"]
    assert "in flight" in fault.at and "merge_upsert_staging_into_raw_weather" in fault.at, fault.at
    assert check.unreadable_files(mission.settings.state_dir) == []


def test_the_lineage_reached_the_server_once_and_nothing_is_left_running_or_queued(mission, lineage_server):
    from nyc_taxi.lineage.write.delivery import OpenLineageServer
    from nyc_taxi_proving.chaos import check
    from nyc_taxi_proving.chaos.readings import datahub_missing, leftovers
    from nyc_taxi_proving.fixtures.lineage_server import OPENLINEAGE_PATH

    local = OpenLineageServer(mission.settings)
    events = [e for path in local.files() for e in local.read(path)]
    assert check.delivery(events, lineage_server.stored(OPENLINEAGE_PATH)) == {"missing": [], "twice": []}
    assert datahub_missing(mission.settings, lineage_server) == 0
    assert leftovers(mission.settings, mission.env) == []


def test_nothing_listens_beyond_127_0_0_1_and_no_password_or_key_is_in_a_log(team, listening_sockets):
    from nyc_taxi.core import team as services
    from nyc_taxi.core.processes import read_record

    settings, env = team
    listeners = listening_sockets(*component_pids(settings).values())
    commands = {command.split()[0].rsplit("/", 1)[-1] for command, _, _ in listeners}
    assert {"weed", "redis-server", "postgres"} <= commands, listeners  # every kind of service was looked at
    assert len(listeners) >= 14 and {address for _, address, _ in listeners} == {"127.0.0.1"}, listeners

    record = read_record(services.services_record(settings))
    from nyc_taxi_proving.deployment.object_storage import JWT_KEYS

    secrets = [record["postgres"]["password"], record["redis"]["password"], record["seaweedfs"]["secret_key"]]
    secrets += list(record["postgres"]["roles"].values())  # the roles that own Airflow's database and the catalog's
    secrets += [record["spark"]["secret"], *(record["seaweedfs"][key] for key in JWT_KEYS)]
    secrets += [record["airflow"][name] for name in services.AIRFLOW_SECRETS]
    config = subprocess.run(
        [sys.executable, "-m", "airflow", "config", "list"],
        env={**env, **airflow_environment(settings)},
        capture_output=True,
        text=True,
    )
    assert config.returncode == 0 and "sql_alchemy_conn" in config.stdout
    import psutil

    places = {"airflow config list": config.stdout + config.stderr}
    command_lines = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            command_lines.append(" ".join(process.cmdline()))
    places["every process's command line"] = "\n".join(command_lines)
    team_dir = services.team_dir(settings)
    secret_files = {
        services.services_record(settings),
        services.Postgres(settings).airflow_url_file,
        services.Redis(settings).results_url_file,
        services.Redis(settings).broker_url_file,
        team_dir / "redis" / "redis.conf",
        team_dir / "seaweedfs" / "s3-identities.json",
        team_dir / "seaweedfs" / "security.toml",
        team_dir / "spark" / "cluster.conf",
        *(services.airflow_secret_file(settings, name) for name in services.AIRFLOW_SECRETS),
        services.ObjectStore(settings).credentials_file,
    }
    private_keys = set((team_dir / "seaweedfs" / "tls").glob("*.key"))
    assert {key.name for key in private_keys} == {"ca.key", "seaweedfs.key"}
    secrets += [key.read_text().splitlines()[1] for key in private_keys]  # a line of each PEM key's body
    secret_files |= private_keys
    for path in Path(settings.state_dir).rglob("*"):
        if path.is_file() and path not in secret_files and path.stat().st_size < 50_000_000:
            places[str(path)] = path.read_bytes().decode(errors="replace")
    from nyc_taxi_proving.deployment.postgres import Postgres

    for path in Postgres(settings, record).directory.glob("*.log"):
        places[str(path)] = path.read_text(errors="replace")
    for secret in secrets:
        assert not [place for place, text in places.items() if secret in text]
    for path in secret_files:
        assert path.stat().st_mode & 0o077 == 0, path


# ---- who may connect: each listener, without the deployment's credentials and with them --------------


LISTENERS = (
    "postgres", "redis", "airflow-api-server", "spark-master", "spark-worker",
    *(f"seaweedfs-{part} https" for part in SEAWEEDFS_HTTPS),
    *(f"seaweedfs-{part} grpc" for part in ("master", "volume", "filer", "s3")),
    "seaweedfs-s3",
)  # fmt: skip


def _listener_port(record: dict, settings, listener: str) -> int:
    program, _, kind = listener.partition(" ")
    service, _, part = program.partition("-")
    if program == "airflow-api-server":
        return settings.airflow_port
    if service == "spark":
        return record["spark"]["port" if part == "master" else "worker_port"]
    if service == "seaweedfs":
        return record["seaweedfs"][f"{part}_{'grpc_' if kind == 'grpc' else ''}port"]
    return record[service]["port"]


@pytest.mark.parametrize("listener", LISTENERS)
def test_a_client_without_the_deployments_credentials_is_refused_and_one_with_them_is_let_in(team, listener):
    """Each listener, asked without the deployment's credentials, refuses; asked with them, answers.
    PostgreSQL and Redis: a password; the Airflow API: a token; Spark's master and worker: the cluster's
    shared secret (the handshake a client without it skips); SeaweedFS's master, volume server and filer
    (HTTPS) and all four gRPC ports: a certificate of the deployment's authority, and on top of it a JWT
    for a write to a volume and any request to the filer's files; the S3 gateway: the S3 key pair."""
    import ssl

    from nyc_taxi.core import team as services
    from nyc_taxi.core.processes import read_record
    from nyc_taxi_proving.deployment.object_storage import SEAWEEDFS_CERTIFICATE, ObjectStorage

    settings, _ = team
    record = read_record(services.services_record(settings))
    port = _listener_port(record, settings, listener)
    authority = ObjectStorage(settings, record).authority
    program, _, kind = listener.partition(" ")
    if program == "postgres":
        import psycopg2

        with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
            psycopg2.connect(host="127.0.0.1", port=port, user="nyc_taxi", password="guessed", dbname="postgres")
        services.Postgres(settings).connect().close()
    elif program == "redis":
        import socket

        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
            connection.sendall(b"PING\r\n")
            assert connection.recv(100).startswith(b"-NOAUTH")
            connection.sendall(f"AUTH {record['redis']['password']}\r\nPING\r\n".encode())
            assert wait_for(lambda: connection.recv(100), lambda said: b"+PONG" in said, 10)
    elif program == "airflow-api-server":
        import urllib.error
        import urllib.request

        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/dags", timeout=10)
        assert refused.value.code == 401
        assert api(settings).call("/api/v2/dags")["total_entries"] >= 3
    elif program.startswith("spark-"):
        refusal = spark_rpc_refusal("127.0.0.1", port)
        # Spark's encrypting authentication answered (its AES handshake, no fallback to plain SASL), not its RPC
        assert "network.crypto.AuthRpcHandler" in refusal and "Sasl" not in refusal, refusal
        # drivers with the secret ran on the cluster: test_both_workers_ran_tasks…
    elif kind == "https":
        part = program.removeprefix("seaweedfs-")
        without = ssl.create_default_context(cafile=str(authority.certificate))
        assert "CERTIFICATE_REQUIRED" in str(https("127.0.0.1", port, SEAWEEDFS_HTTPS[part], without))
        with_certificate = authority.client_context(SEAWEEDFS_CERTIFICATE)
        assert https("127.0.0.1", port, SEAWEEDFS_HTTPS[part], with_certificate) == 200
        # the certificate alone writes no file to a volume, and reads or writes none on the filer: a JWT must
        # sign it (the master's for a volume, the S3 gateway's for the filer)
        if part == "volume":
            assert https("127.0.0.1", port, "/3,01637037d6", with_certificate, "PUT", b"x") == 401
        if part == "filer":
            assert https("127.0.0.1", port, "/buckets/", with_certificate) == 401
            assert https("127.0.0.1", port, "/buckets/nyc-taxi-lakehouse/x", with_certificate, "PUT", b"x") == 401
    elif kind == "grpc":
        refused = tls_handshake("127.0.0.1", port, ssl.create_default_context(cafile=str(authority.certificate)))
        assert refused.startswith("refused:") and "CERTIFICATE_REQUIRED" in refused, refused
        assert tls_handshake("127.0.0.1", port, authority.client_context(SEAWEEDFS_CERTIFICATE)).startswith("spoke h2")
    else:  # the S3 gateway
        import boto3
        from botocore.exceptions import ClientError

        guessed = boto3.client(
            "s3", endpoint_url=f"http://127.0.0.1:{port}", region_name=settings.aws_region,
            aws_access_key_id=record["seaweedfs"]["access_key"], aws_secret_access_key="guessed",
        )  # fmt: skip
        with pytest.raises(ClientError, match="SignatureDoesNotMatch|AccessDenied"):
            guessed.list_buckets()
        assert services.ObjectStore(settings).bucket in [
            b["Name"] for b in services.ObjectStore(settings).client().list_buckets()["Buckets"]
        ]


def test_every_listener_of_the_deployment_is_one_a_refusal_is_tested_on_or_a_spark_web_ui_on_loopback(
    team, listening_sockets
):
    """No port listens that the test above does not ask: a new listener comes with its refusal. Spark's
    web UIs (no authentication of Spark's own) listen on 127.0.0.1 only, also where the daemons' RPC ports
    face a network (SPARK_LOCAL_IP)."""
    from nyc_taxi.core import team as services
    from nyc_taxi.core.processes import read_record

    settings, _ = team
    record = read_record(services.services_record(settings))
    tested = {_listener_port(record, settings, listener) for listener in LISTENERS}
    web_uis = {record["spark"]["web_port"], record["spark"]["worker_web_port"]}
    listeners = listening_sockets(*component_pids(settings).values())
    assert {port for _, _, port in listeners} == tested | web_uis, listeners
    assert {address for _, address, port in listeners if port in web_uis} == {"127.0.0.1"}


@pytest.mark.guards
def test_up_again_changes_nothing_and_status_says_which_program_answers(team):
    """`up` again starts nothing; `status` names all fourteen programs, and "answers" is asked of each
    program, not read from its state: a process frozen with SIGSTOP is still RUNNING to supervisord, and
    status says it does not answer (the volume server's HTTP port, the Spark master's cluster state, a
    Celery worker's ping through the broker; the scheduler, DAG processor and triggerer once their last
    heartbeat is older than three beats, though Airflow calls them healthy for 30 s), until it runs on."""
    from nyc_taxi_proving.deployment.services import one_machine_programs

    settings, env = team
    before = component_pids(settings)
    again = team_cli(env, "up")
    assert again.returncode == 0, again.stderr
    assert component_pids(settings) == before
    names = one_machine_programs()  # the lineage receiver and shippers run only across hosts
    assert set(before) == set(names) and len(names) == 14
    now = status(env)
    assert {name: (now[name]["state"], now[name]["answers"], now[name]["pid"]) for name in names} == {
        name: ("RUNNING", "yes", before[name]) for name in names
    }
    from nyc_taxi_proving.deployment.services import HEARTBEAT_FRESH

    frozen = ("seaweedfs-volume", "spark-master", "airflow-worker-1")
    frozen += ("airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
    for name in frozen:
        os.kill(before[name], signal.SIGSTOP)
    try:
        time.sleep(HEARTBEAT_FRESH + 1)  # the last heartbeat before the freeze, stale
        now = status(env)
    finally:
        for name in frozen:
            os.kill(before[name], signal.SIGCONT)
    assert {name for name in names if now[name]["answers"] == "no"} >= set(frozen), now
    assert all(now[name]["state"] == "RUNNING" for name in names), now
    after = wait_for(lambda: status(env), lambda s: all(p["answers"] == "yes" for p in s.values()), 120)
    assert all(p["answers"] == "yes" for p in after.values()), after


_DRIVERS_MAPS = """
import json, psutil
from nyc_taxi.core.spark import get_spark
spark = get_spark()
spark.sql("SELECT 1").collect()
def command(process):  # the launcher's own children may be gone (zombies): no command line
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""
(driver,) = [p for p in psutil.Process().children(recursive=True) if "SparkSubmit" in command(p)]
mapped = sorted({line.split()[-1] for line in open(f"/proc/{driver.pid}/maps") if line.rstrip().endswith(".jsa")})
print(json.dumps({"master": spark.sparkContext.master, "mapped": mapped}))
"""


def test_a_drivers_jvm_maps_the_class_data_sharing_archive_of_the_drivers_class_path(team):
    """A Spark driver started as the deployment's tasks start one (its settings, its cluster) maps the archive
    `team up` built for the drivers' class path: the kernel's map of the driver's JVM holds the file. A JVM
    whose class path did not match would drop it and start without (a driver archive is no executor's)."""
    import json

    from nyc_taxi.core.spark_jvm import class_archive, driver_class_path

    settings, env = team
    archive = class_archive(driver_class_path(settings))
    ran = subprocess.run([sys.executable, "-c", _DRIVERS_MAPS], env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    assert seen["master"].startswith("spark://") and archive.is_file()
    assert str(archive) in seen["mapped"], seen  # beside the JDK's own base archive


def test_a_killed_scheduler_answers_again_only_once_its_new_process_has_sent_a_heartbeat(team):
    """SIGKILL to the scheduler: its last heartbeat is seconds old, and Airflow's health calls it healthy for
    30 s more. It answers again only once supervisord has run it again and the new process has beaten."""
    import datetime as dt_

    from nyc_taxi.airflow_adapter.rest_api import base_url, health
    from nyc_taxi.core.processes import alive
    from nyc_taxi_proving.deployment.services import answering

    settings, _ = team
    old = programs(settings)["airflow-scheduler"]["pid"]
    os.kill(old, signal.SIGKILL)
    assert wait_for(lambda: not alive(old), bool, 10), f"the scheduler {old} still runs after SIGKILL"
    assert answering(settings, "airflow-scheduler") is False
    assert (health(base_url(settings)) or {}).get("scheduler", {}).get("status") == "healthy"  # Airflow: still

    def answering_now():
        """(process, its latest beat) when the scheduler answers, read around the answer: one process
        throughout (a process supervisord ran again in between is read again, never paired with the
        beat of the one before it)."""
        before = programs(settings)["airflow-scheduler"]
        answers = answering(settings, "airflow-scheduler")
        beat = ((health(base_url(settings)) or {}).get("scheduler") or {}).get("latest_scheduler_heartbeat")
        after = programs(settings)["airflow-scheduler"]
        same = (before["pid"], before["start"]) == (after["pid"], after["start"])
        return (after, beat) if answers and beat and same else None

    back = wait_for(answering_now, bool, 120)
    assert back, "the scheduler did not answer again"
    info, beat = back
    assert info["pid"] != old and dt_.datetime.fromisoformat(beat).timestamp() > info["start"] + 1


def test_postgres_data_left_by_a_removed_state_directory_is_named_with_its_remedy(tmp_path):
    """PostgreSQL keeps its data under its own user's home: a state directory removed without `team down`
    leaves it. `team up` on that path again refuses the orphaned cluster with the command that removes
    it, and after that command a fresh record is made."""
    from nyc_taxi.core import team as services
    from nyc_taxi.core.processes import ServiceError
    from nyc_taxi.core.settings import Settings
    from nyc_taxi_proving.deployment import services as deployment
    from nyc_taxi_proving.deployment.supervisor import Supervisor

    settings = Settings(profile="team", state_dir=tmp_path / "state")
    record = deployment._record(settings, Supervisor(settings).running())
    postgres = deployment.Postgres(settings, record)
    try:
        postgres.prepare()  # initdb: the cluster's data, under PostgreSQL's user's home when root
        services.services_record(settings).unlink()  # the state directory's record gone, the data kept
        with pytest.raises(ServiceError, match="bash run team down --delete-data"):
            deployment.up(settings)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        removed = team_cli(env | {"PROFILE": "team", "STATE_DIR": str(settings.state_dir)}, "down", "--delete-data")
        assert removed.returncode == 0 and not postgres.directory.exists(), removed.stdout + removed.stderr
        assert deployment._record(settings, Supervisor(settings).running())["postgres"]["password"]
    finally:
        deployment.down(settings, delete_data=True)


def test_every_dataset_keeps_its_name_datahubs_iceberg_source_on_postgres_included(mission):
    """The same identities as on the local profile: the registry's names, the lineage the deployment's
    tasks wrote, and what DataHub's own Iceberg source reads from the PostgreSQL catalog."""
    from nyc_taxi.core import team as services
    from nyc_taxi.core.naming import identity
    from nyc_taxi.core.settings import Settings
    from nyc_taxi.lineage.write.datahub_pipeline import ingest_catalog
    from nyc_taxi.lineage.write.destinations import openlineage_file
    from nyc_taxi.lineage.write.outbox import read_datahub_file, read_openlineage_file

    settings = mission.settings
    local = Settings(profile="local", state_dir=settings.state_dir)  # the same lake under the local profile
    objects = f"s3://{services.ObjectStore(settings).bucket}"
    for dataset in registry.DATASETS.values():
        here, there = identity(dataset, settings), identity(dataset, local)
        names = ("key", "datahub_urn", "ol_namespace", "ol_name", "asset_uri")
        assert [getattr(here, n) for n in names] == [getattr(there, n) for n in names], dataset.name
        # where the bytes are differs, and only the storage symlink says so: the bucket
        if there.ol_symlinks:
            assert [s.namespace for s in here.ol_symlinks if s.type == "LOCATION"] == [objects], here

    records = read_datahub_file(ingest_catalog(settings))
    tables = {r["entityUrn"] for r in records if r["entityUrn"].startswith("urn:li:dataset:")}
    assert tables == {identity(t, local).datahub_urn for t in registry.TABLES.values()}

    events = read_openlineage_file(openlineage_file(settings, "airflow"))
    merge = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(f".{TAXI_MERGE}")]
    raw = identity(registry.YELLOW_TAXI_RAW, local)
    assert merge and all((o["namespace"], o["name"]) == (raw.ol_namespace, raw.ol_name) for o in merge[0]["outputs"])
