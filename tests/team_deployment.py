"""The team profile's deployment for the tests that run it (tests/test_team_profile.py, the suite's lane;
tests/test_team_system.py, the system lane): one deployment per module, brought up by `bash run team up`
under a state directory of its own and down (its services' data removed) after the module; and what those
tests read of it. A pytest plugin (tests/conftest.py loads it)."""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from expected_loads import comparable, expected_taxi_rows, expected_weather

from nyc_taxi.airflow_adapter.rest_api import RestApi
from nyc_taxi.core import datasets as registry
from nyc_taxi.core import jobs
from nyc_taxi.core.processes import free_port

TAXI, WEATHER, TRAINING = (
    jobs.INGEST_YELLOW_TAXI_DATA.name,
    jobs.INGEST_WEATHER_DATA.name,
    jobs.TRAIN_FORECAST_MODEL.name,
)
TAXI_JOBS = jobs.INGEST_YELLOW_TAXI_DATA
TAXI_MERGE = TAXI_JOBS.merge_upsert_staging_into_raw_yellow.name


def assert_the_team_demo_ended_as_the_local_one(done: subprocess.CompletedProcess) -> None:
    """`PROFILE=team bash run demo` exited 0 having said what the local demo says: the trainings the
    scheduler started from the merges' asset events succeeded, January's republication made outputs stale
    and nothing was after the re-run loaded it again, the forecast was reproduced, and the broken month
    left raw unchanged."""
    import re

    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    said = done.stdout
    started = re.findall(r"train_forecast_model started by the scheduler from an asset event: (\w+)", said)
    assert len(started) >= 2 and set(started) == {"success"}, said[-4000:]
    # January's republication made outputs stale, its re-run loaded it again, and then nothing was stale
    before, _, after = said.partition("bash run lineage --stale --rerun")
    assert re.search(r"stale \(\d+\):", before.rsplit("bash run lineage --stale)", 1)[-1]), said[-4000:]
    assert 'ingest_yellow_taxi_data {"month": "2024-01"}: success' in after.partition("re-run: ok")[0], said[-4000:]
    assert "nothing is stale: every output was computed from what its inputs hold now" in after
    assert re.search(r"yellow_rides_hourly_forecast @ \d+: reproduced: \d+ rows equal", said), said[-4000:]
    assert re.search(r"yellow_taxi_raw is unchanged: snapshot \d+", said), said[-4000:]


def team_cli(env: dict, *args: str) -> subprocess.CompletedProcess:
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
    """The team profile's deployment, brought up once for the module under a state directory of its own,
    as `bash run team up` ships it, and down (its services' data removed) afterwards: (settings,
    environment)."""
    from nyc_taxi.core.settings import Settings

    state = tmp_path_factory.mktemp("team-state")
    # the session's local-profile Airflow settings stay out: the team profile derives its own
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {"PROFILE": "team", "STATE_DIR": str(state), "AIRFLOW_PORT": str(free_port()), "SPARK_SERVER": "false"}
    env |= {"OPENLINEAGE_URL": lineage_server.url, "DATAHUB_GMS_URL": lineage_server.url}  # delivered as it goes
    # PostgreSQL's data is kept under its own user's home, keyed by the state directory's path, which
    # pytest hands out again once old runs are cleaned up: a run killed before its teardown left it there
    team_cli(env, "down", "--delete-data")
    up = team_cli(env, "up")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        created = subprocess.run(
            [sys.executable, "-m", "nyc_taxi.cli.infra", "create"], env=env, capture_output=True, text=True
        )
        assert created.returncode == 0, created.stderr
        yield Settings(profile="team", state_dir=state, airflow_port=int(env["AIRFLOW_PORT"])), env
    finally:
        down = team_cli(env, "down", "--delete-data")
        print(down.stdout, down.stderr)


def api(settings) -> RestApi:
    return RestApi(settings)


def finished(rest: RestApi, dag: str, run_id: str, seconds: float = 900) -> dict:
    return rest.finished(dag, run_id, seconds)


def task(rest: RestApi, dag: str, run_id: str, task_id: str) -> dict:
    from urllib.parse import quote

    return rest.call(f"/api/v2/dags/{dag}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}")


def task_spans(rest: RestApi, dag: str, run_id: str) -> list[tuple[dt.datetime, dt.datetime]]:
    """When each task of a DAG run ran (its last try)."""
    return [
        (dt.datetime.fromisoformat(ti["start_date"]), dt.datetime.fromisoformat(ti["end_date"]))
        for ti in rest.task_instances(dag, run_id)
        if ti["start_date"] and ti["end_date"]
    ]


def wait_for(fetch, done, seconds: float):
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


def programs(settings) -> dict[str, dict]:
    """supervisord's account of each program: state, pid, start time."""
    from nyc_taxi.deployment.supervisor import Supervisor

    return {p["name"]: p for p in Supervisor(settings).programs() if p["group"] != "process-states"}


def component_pids(settings) -> dict[str, int]:
    """The pid of each program running (supervisord's pid 0: one not started, as the programs only the
    hosts layout runs are on one machine)."""
    return {name: info["pid"] for name, info in programs(settings).items() if info["pid"]}


def restarted(settings, program: str, old_pid: int, seconds: float = 120) -> dict:
    """supervisord ran the program again (a new pid, RUNNING): no `team up`."""
    found = wait_for(
        lambda: programs(settings)[program],
        lambda p: p["statename"] == "RUNNING" and p["pid"] not in (0, old_pid),
        seconds,
    )
    assert found and found["statename"] == "RUNNING" and found["pid"] != old_pid, found
    return found


def status(env) -> dict[str, dict]:
    """`team status`, program by program: its state, whether it answers, its pid, its restarts."""
    said = team_cli(env, "status")
    assert said.returncode == 0, said.stderr
    lines = said.stdout.splitlines()
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


def freeze(pids) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)


def thaw(pids) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGCONT)


def raw_holds_exactly(settings, taxi_file: Path) -> None:
    """raw's rows of the file equal an independent reading of it: nothing lost, nothing doubled."""
    from nyc_taxi.core.catalog import load_table

    raw = load_table(registry.YELLOW_TAXI_RAW, settings).scan(row_filter=f"source_file == '{taxi_file.name}'")
    assert comparable(raw.to_arrow()).equals(comparable(expected_taxi_rows(taxi_file)))


def check_weather(settings, site, year: int, month: int) -> None:
    """weather_raw's rows of the month equal an independent reading of the published NOAA files."""
    from nyc_taxi.core.catalog import load_table

    rows = load_table(registry.WEATHER_RAW, settings).scan().to_arrow().to_pylist()
    rows = [r for r in rows if (r["date"].year, r["date"].month) == (year, month)]
    weather = {(r["county_code"], r["date"]): r for r in rows}
    expected = expected_weather(site, year, month, "scaled")
    assert len(weather) == len(rows) and weather.keys() == expected.keys()
    assert all({k: weather[key][k] for k in expected[key]} == expected[key] for key in expected)


def forecasts_of(settings, as_of: dt.datetime) -> dict[tuple[int, dt.datetime], float]:
    """The forecast table's predictions from the origin as_of, by zone and hour (a doubled row fails)."""
    from nyc_taxi.core.catalog import load_table

    rows = load_table(registry.YELLOW_RIDES_HOURLY_FORECAST, settings).scan().to_arrow().to_pylist()
    rows = [r for r in rows if r["as_of_datetime"] == as_of]
    predicted = {(r["pickup_location_id"], r["forecast_hour"]): r["predicted_ride_count"] for r in rows}
    assert len(predicted) == len(rows)
    return predicted


def task_logs(settings) -> list[str]:
    return [p.read_text() for p in (settings.airflow_home / "logs").glob("dag_id=*/**/*.log")]


def bucket(settings) -> dict[str, str]:
    """Every object of the lake's bucket and its ETag."""
    from nyc_taxi.core import team as services

    objects = services.ObjectStore(settings)
    pages = objects.client().get_paginator("list_objects_v2").paginate(Bucket=objects.bucket)
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


@contextlib.contextmanager
def network_of(namespace: str):
    """This thread in ``namespace``'s network (Linux's setns: a thread's network namespace is its own), as
    a machine of the hosts' network: what it connects to or serves meanwhile is there, and so is every
    thread it starts."""
    libc, new_network = ctypes.CDLL(None, use_errno=True), 0x40000000  # CLONE_NEWNET
    here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    there = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(there, new_network) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {namespace}")
        yield
    finally:
        libc.setns(here, new_network)
        os.close(here)
        os.close(there)


def processes_of(state: Path) -> list[list[str]]:
    """Every process left on the machine that runs for the deployment of ``state`` (by the marker its
    supervisord gives every program): what `team down` must leave none of."""
    import psutil

    from nyc_taxi.deployment.supervisor import MARKER

    left = []
    for process in psutil.process_iter():
        try:
            if str(state) in process.environ().get(MARKER, ""):
                left.append(process.cmdline())
        except psutil.Error:
            continue
    return left
