"""Faults: lineage backends that are down, secrets that must not leak, a Spark JVM killed mid-MERGE."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nyc_taxi.fixtures.site import add_weather_month

pytestmark = [pytest.mark.airflow, pytest.mark.faults]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connections are refused


class _Receiver(BaseHTTPRequestHandler):
    """The receiving end of OpenLineage's HTTP transport: keeps what it is sent."""

    received: list = []
    headers_seen: list = []

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        type(self).headers_seen.append(dict(self.headers))
        self.send_response(201)
        self.end_headers()

    def log_message(self, *args):
        pass


class _Failing(BaseHTTPRequestHandler):
    """A lineage backend that is up but broken: 500 to everything."""

    def _fail(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _fail  # noqa: N815

    def log_message(self, *args):
        pass


@pytest.fixture(params=["closed port", "answers 500"])
def broken_backend(request):
    """The URL of a lineage backend that is down: nothing listening, or a server answering 500."""
    if request.param == "closed port":
        yield f"http://127.0.0.1:{_closed_port()}"
        return
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _files_containing(root: Path, needles: dict[str, str]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{name} in {path}" for name, value in needles.items() if value.encode() in data]
    return found


def test_lineage_backends_down_warn_only_keep_everything_and_replay_delivers_it_once(site, tmp_path, broken_backend):
    from nyc_taxi.airflow_env import airflow_environment, prepare_directories
    from nyc_taxi.settings import Settings

    secret = {"DATAHUB_TOKEN": "dh-" + secrets.token_hex(16), "OPENLINEAGE_API_KEY": "ol-" + secrets.token_hex(16),
              "AWS_ACCESS_KEY_ID": "AKIA" + secrets.token_hex(8).upper(), "AWS_SECRET_ACCESS_KEY": secrets.token_hex(20)}
    down = broken_backend
    state = tmp_path / "state"
    config = {"STATE_DIR": str(state), "DATAHUB_GMS_URL": down, "OPENLINEAGE_URL": down, **secret}
    settings = Settings(state_dir=state, datahub_gms_url=down, openlineage_url=down,
                        datahub_token=secret["DATAHUB_TOKEN"], openlineage_api_key=secret["OPENLINEAGE_API_KEY"])
    prepare_directories(settings)
    env = {**os.environ, **config, **airflow_environment(settings)}
    add_weather_month(site, 2023, 6, n_counties=60)
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, check=True, capture_output=True)

    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "ingest_weather_data", "--conf",
                          '{"month": "2023-06"}'], env=env, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "DagRunState.SUCCESS" in output or "state=success" in output.lower(), output[-3000:]
    assert took < 180, f"the DAG took {took:.0f} s with the backends down"  # no hanging on a dead backend
    print(f"ingest_weather_data with both lineage backends down ({down}): {took:.0f} s")
    assert re.search(r"\[(warning|error) *\]|WARNING", output)  # the failed deliveries are logged, the run goes on

    # every record stayed local
    events = [json.loads(line) for line in (state / "lineage/openlineage/airflow_events.jsonl").read_text().splitlines()]
    completed = {e["job"]["name"] for e in events if e["eventType"] == "COMPLETE"}
    assert {"ingest_weather_data.create_tables", "ingest_weather_data.download_and_stage_data",
            "ingest_weather_data.merge_upsert_staging_into_raw_weather"} <= completed
    records = json.loads((state / "lineage/datahub/airflow_mcps.json").read_text())
    assert {r["entityUrn"].rsplit(",", 1)[1].rstrip(")") for r in records if r.get("aspectName") == "dataJobInputOutput"} \
        >= {"download_and_stage_data", "merge_upsert_staging_into_raw_weather"}

    # no secret in any file the run left (task logs, lineage records, Airflow's config and database) or its output
    assert _files_containing(state, secret) == []
    assert [name for name, value in secret.items() if value in output] == []

    # the backend comes back: one command sends every event, once, with the API key; again sends nothing
    _Receiver.received, _Receiver.headers_seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    up = f"http://127.0.0.1:{server.server_address[1]}"
    replay_env = {**env, "OPENLINEAGE_URL": up}
    replay_env.pop("DATAHUB_GMS_URL")
    try:
        first = subprocess.run([sys.executable, "-m", "nyc_taxi.lineage.replay"], env=replay_env, capture_output=True, text=True)
        assert first.returncode == 0, first.stderr
        assert _Receiver.received == events
        assert {h["Authorization"] for h in _Receiver.headers_seen} == {f"Bearer {secret['OPENLINEAGE_API_KEY']}"}
        again = subprocess.run([sys.executable, "-m", "nyc_taxi.lineage.replay"], env=replay_env, capture_output=True, text=True)
        assert "0 events sent" in again.stdout and len(_Receiver.received) == len(events)
    finally:
        server.shutdown()


@pytest.mark.spark
def test_the_fixture_server_and_spark_listen_on_127_0_0_1_only(spark, settings, listening_sockets):
    """The test process serves the fixture sites and drives a local Spark JVM (py4j, driver RPC, block
    manager, Spark UI): every socket they listen on is on this machine only."""
    listeners = listening_sockets(os.getpid())
    fixture_port = int(settings.tlc_base_url.rsplit(":", 1)[1].split("/")[0])
    assert any(port == fixture_port for _, _, port in listeners), listeners
    assert sum("java" in name for name, _, _ in listeners) >= 3, listeners
    assert {address for _, address, _ in listeners} == {"127.0.0.1"}, listeners
