"""Test set-up: every test run gets its own state directory, one Spark session and one moto server."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_STATE = Path(tempfile.mkdtemp(prefix="nyc-taxi-test-state-"))
SITE = _STATE / "site"  # a fixture copy of the TLC and NOAA sites, served on 127.0.0.1
_server = None


def pytest_configure(config):
    """Before anything reads the settings or imports Airflow: isolated state, sources on 127.0.0.1."""
    global _server
    from nyc_taxi.fixtures.server import FixtureServer

    SITE.mkdir(parents=True)
    _server = FixtureServer(SITE)
    url = _server.start()
    os.environ.update({"STATE_DIR": str(_STATE), "PROFILE": "local", "SPARK_LOCAL_IP": "127.0.0.1",
                       "TLC_BASE_URL": url, "NOAA_BASE_URL": url, "DATAHUB_TELEMETRY_ENABLED": "false"})
    for name in ("DATAHUB_PLATFORM_INSTANCE", "DATAHUB_ENV", "DATAHUB_GMS_URL", "OPENLINEAGE_URL", "SPARK_MASTER",
                 "S3_BUCKET", "AIRFLOW_CONFIG"):
        os.environ.pop(name, None)
    from nyc_taxi.airflow_env import airflow_environment, prepare_directories

    os.environ.update(airflow_environment())
    prepare_directories()


def pytest_unconfigure(config):
    if _server is not None:
        _server.stop()
    shutil.rmtree(_STATE, ignore_errors=True)


@pytest.fixture(scope="session")
def site() -> Path:
    return SITE


@pytest.fixture(scope="session")
def settings():
    from nyc_taxi.settings import get_settings

    return get_settings()


@pytest.fixture(scope="session")
def spark(settings):
    """One real local Spark session on the test state's Iceberg catalog, shared by all tests."""
    from nyc_taxi import infra
    from nyc_taxi.spark import get_spark, stop_spark

    infra.create(settings)
    yield get_spark(settings)
    stop_spark()


@pytest.fixture(scope="session")
def moto_endpoint():
    """A moto server on 127.0.0.1: real HTTP AWS APIs (S3, Glue, STS) without an AWS account."""
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")}
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    os.environ.pop("AWS_SESSION_TOKEN", None)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def aws_settings(moto_endpoint, tmp_path):
    from nyc_taxi.settings import Settings

    return Settings(_env_file=None, profile="aws", aws_profile="", aws_endpoint_url=moto_endpoint,
                    aws_region="eu-west-1", state_dir=tmp_path)


@pytest.fixture(scope="session")
def airflow_db(settings):
    """An initialised Airflow metadata database in the test state (what dag.test() needs)."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    return settings.airflow_home


@pytest.fixture(scope="session")
def dagbag(airflow_db, spark):
    from airflow.dag_processing.dagbag import DagBag
    from nyc_taxi.airflow_env import DAGS_FOLDER

    bag = DagBag(dag_folder=str(DAGS_FOLDER))
    assert bag.import_errors == {}
    return bag


@pytest.fixture
def real_source_defaults(monkeypatch):
    """Settings built in the test see the real public source URLs, not the session's fixture server."""
    for name in ("TLC_BASE_URL", "NOAA_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium driven by Playwright (no browser download), on a fresh empty profile."""
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"]
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium", args=args)
        yield chromium
        chromium.close()


# Columns whose values name the run or the moment, not the data.
RUN_SPECIFIC_COLUMNS = {"ingested_at", "computed_at", "created_at", "model_version"}


@pytest.fixture(scope="session")
def table_contents():
    """settings -> the rows of every registry table that exists, without the run-specific columns,
    sorted: two lakehouses that did the same work compare equal."""
    def contents(settings) -> dict[str, list[tuple]]:
        from nyc_taxi import registry
        from nyc_taxi.catalog import load_catalog

        catalog = load_catalog(settings)
        tables = {}
        for table in registry.TABLES.values():
            if not catalog.table_exists(table.identifier(settings)):
                continue
            rows = catalog.load_table(table.identifier(settings)).scan().to_arrow()
            rows = rows.drop_columns([c for c in rows.column_names if c in RUN_SPECIFIC_COLUMNS])
            tables[table.name] = sorted(tuple(r.values()) for r in rows.to_pylist())
        return tables
    return contents


@pytest.fixture(scope="session")
def lineage_events():
    """settings -> (job, event type) of every OpenLineage event both tools wrote, sorted; every line
    must be whole JSON (a torn or interleaved line fails)."""
    def events(settings) -> list[tuple[str, str]]:
        import json

        from nyc_taxi.lineage.destinations import openlineage_events_dir

        found = []
        for path in sorted(openlineage_events_dir(settings).glob("*.jsonl")):
            for line in path.read_text().splitlines():
                event = json.loads(line)
                found.append((event["job"]["name"], event["eventType"]))
        return sorted(found)
    return events


@pytest.fixture(scope="session")
def listening_sockets():
    """pids -> {(command line, IPv4 address, port)} of every listening TCP socket of those processes
    and all their descendants."""
    def sockets(*pids: int) -> set[tuple[str, str, int]]:
        import psutil

        found = set()
        processes = [psutil.Process(pid) for pid in pids]
        for process in processes + [c for p in processes for c in p.children(recursive=True)]:
            try:
                for connection in process.net_connections(kind="tcp"):
                    if connection.status == psutil.CONN_LISTEN:
                        address = connection.laddr.ip.removeprefix("::ffff:")  # Java's IPv4-mapped form
                        found.add((" ".join(process.cmdline()[:4])[:80], address, connection.laddr.port))
            except psutil.NoSuchProcess:
                pass
        return found
    return sockets


@pytest.fixture(scope="session")
def lineage_backend():
    """status -> a lineage server on 127.0.0.1 answering every request with that status: `.url`;
    `.requests`, the (path, headers, JSON body) of every request it got, in order; `.events()`, the
    bodies posted to OpenLineage's endpoint — with 201 a live OpenLineage backend, with 500 one that
    is up but broken."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from types import SimpleNamespace

    servers = []

    def start(status: int = 201):
        requests = []

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                requests.append((self.path, dict(self.headers), json.loads(body) if body else None))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _answer  # noqa: N815

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return SimpleNamespace(url=f"http://127.0.0.1:{server.server_address[1]}", requests=requests,
                               events=lambda: [body for path, _, body in requests if path == "/api/v1/lineage"])

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
