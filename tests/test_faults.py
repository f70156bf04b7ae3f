"""Faults: lineage backends that are down, secrets that must not leak, a Spark JVM killed mid-MERGE."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from nyc_taxi.fixtures.site import add_weather_month

pytestmark = [pytest.mark.airflow, pytest.mark.faults]


@pytest.fixture(params=["closed port", "answers 500"])
def broken_backend(request, lineage_backend):
    """(URL, what it was sent or None) of a lineage backend that is down: nothing listening, or a
    server answering 500 to everything."""
    if request.param == "closed port":
        return f"http://127.0.0.1:{_closed_port()}", None
    backend = lineage_backend(500)
    return backend.url, backend.events


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connections are refused


def _files_containing(root: Path, needles: dict[str, str]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{name} in {path}" for name, value in needles.items() if value.encode() in data]
    return found


def _run_weather_dag(site, state: Path, **variables: str) -> SimpleNamespace:
    """`airflow dags test ingest_weather_data` in its own state directory, with these environment
    variables (lineage URLs, credentials) set as a user's shell would have them."""
    from nyc_taxi.airflow_adapter.environment import airflow_environment, prepare_directories
    from nyc_taxi.core.settings import Settings

    settings = Settings(
        state_dir=state,
        **{name.lower(): value for name, value in variables.items() if name.lower() in Settings.model_fields},
    )
    prepare_directories(settings)
    env = {**os.environ, "STATE_DIR": str(state), **variables, **airflow_environment(settings)}
    add_weather_month(site, 2023, 6, n_counties=60)
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, check=True, capture_output=True)
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", "ingest_weather_data", "--conf", '{"month": "2023-06"}'],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    took = time.monotonic() - started
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "DagRunState.SUCCESS" in output or "state=success" in output.lower(), output[-3000:]
    events_file = state / "lineage/openlineage/airflow_events.jsonl"
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    return SimpleNamespace(took=took, output=output, env=env, events=events, settings=settings)


@pytest.fixture(scope="module")
def with_live_backend(site, tmp_path_factory, lineage_backend):
    """The weather DAG with a live OpenLineage backend: what it received, and the run's time as the
    reference for the runs with a backend that is down."""
    backend = lineage_backend(201)
    run = _run_weather_dag(site, tmp_path_factory.mktemp("live") / "state", OPENLINEAGE_URL=backend.url)
    print(f"ingest_weather_data with a live OpenLineage backend: {run.took:.0f} s")
    run.received_during_the_run = backend.events()
    replay = subprocess.run([sys.executable, "-m", "nyc_taxi.cli.replay"], env=run.env, capture_output=True, text=True)
    assert replay.returncode == 0, replay.stderr
    run.received = backend.events()
    return run


def test_a_live_openlineage_backend_gets_every_event_once(with_live_backend):
    """The tasks ship their events as they end; what the DAG run emits after its last task goes with the
    next shipping (here `bash run lineage-replay`): the backend has every local event exactly once, in order."""
    run = with_live_backend
    assert {e["eventType"] for e in run.events} >= {"START", "COMPLETE"}
    during = run.received_during_the_run
    assert during == run.events[: len(during)]  # in order, nothing twice
    assert len(during) >= len([e for e in run.events if "." in e["job"]["name"]])  # at least every task's events
    assert run.received == run.events


def test_lineage_backends_down_warn_only_keep_everything_and_replay_delivers_it_once(
    site, tmp_path, broken_backend, with_live_backend, lineage_backend
):
    secret = {
        "DATAHUB_TOKEN": "dh-" + secrets.token_hex(16),
        "OPENLINEAGE_API_KEY": "ol-" + secrets.token_hex(16),
        "AWS_ACCESS_KEY_ID": "AKIA" + secrets.token_hex(8).upper(),
        "AWS_SECRET_ACCESS_KEY": secrets.token_hex(20),
    }
    down, attempts = broken_backend
    state = tmp_path / "state"
    run = _run_weather_dag(site, state, DATAHUB_GMS_URL=down, OPENLINEAGE_URL=down, **secret)
    normal = with_live_backend.took
    print(
        f"ingest_weather_data with both lineage backends down ({down}): {run.took:.0f} s, with a live backend {normal:.0f} s"
    )
    # within normal time: at the end of each task the first pending event is tried once, then left to the file
    assert run.took < 1.5 * normal, f"the DAG took {run.took:.0f} s with the backends down, {normal:.0f} s with them up"
    if attempts is not None:
        assert attempts() and all(a == run.events[0] for a in attempts())  # never past the first: order is kept
    assert re.search(r"\[(warning|error) *\]|WARNING", run.output)  # the failed deliveries are logged, the run goes on

    # every record stayed local
    completed = {e["job"]["name"] for e in run.events if e["eventType"] == "COMPLETE"}
    assert {
        "ingest_weather_data.create_tables",
        "ingest_weather_data.download_published_files",
        "ingest_weather_data.stage_landed_files",
        "ingest_weather_data.merge_upsert_staging_into_raw_weather",
    } <= completed
    from nyc_taxi.lineage.write.outbox import read_datahub_records

    records = read_datahub_records(run.settings, "airflow")
    assert {
        r["entityUrn"].rsplit(",", 1)[1].rstrip(")") for r in records if r.get("aspectName") == "dataJobInputOutput"
    } >= {"download_published_files", "stage_landed_files", "merge_upsert_staging_into_raw_weather"}

    # no secret in any file the run left (task logs, lineage records, Airflow's config and database) or its output
    assert _files_containing(state, secret) == []
    assert [name for name, value in secret.items() if value in run.output] == []

    # the backend comes back: one command sends every event, once, with the API key; again sends nothing
    backend = lineage_backend(201)
    replay_env = {**run.env, "OPENLINEAGE_URL": backend.url}
    replay_env.pop("DATAHUB_GMS_URL")
    first = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.replay"], env=replay_env, capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    assert backend.events() == run.events
    assert {headers["Authorization"] for _, headers, _ in backend.requests} == {
        f"Bearer {secret['OPENLINEAGE_API_KEY']}"
    }
    again = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.replay"], env=replay_env, capture_output=True, text=True
    )
    assert "openlineage: 0 records sent" in again.stdout and len(backend.events()) == len(run.events)


@pytest.mark.spark
def test_the_fixture_server_and_spark_listen_on_127_0_0_1_only(spark, settings, listening_sockets):
    """The test process serves the fixture sites and drives a local Spark JVM (py4j, driver RPC, block
    manager, Spark UI): every socket they listen on is on this machine only."""
    listeners = listening_sockets(os.getpid())
    fixture_port = int(settings.tlc_base_url.rsplit(":", 1)[1].split("/")[0])
    assert any(port == fixture_port for _, _, port in listeners), listeners
    assert sum("java" in name for name, _, _ in listeners) >= 3, listeners
    assert {address for _, address, _ in listeners} == {"127.0.0.1"}, listeners
