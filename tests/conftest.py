"""Test set-up: every test run gets its own state directory; the rest (the fixture site on 127.0.0.1,
one Spark session, one moto server, Airflow's database, a browser) only for the tests that ask.

Every test is in exactly one lane (docs/testing.md), chosen by its marks:

- ``fast``: `bash run test --fast` (`pytest --fast`): every test not marked with one of ``HEAVY``;
- ``suite``: the rest of `bash run test`, CI's command, which runs the fast lane with it;
- ``system``: `bash run test --system` (`pytest --system`): the long proofs, marked ``system``.

`pytest --all-lanes` runs all three (`bash run upgrade-check` runs the guards of every lane)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

pytest_plugins = ("team_deployment", "timeline")  # the team deployment's fixtures; the lane's timeline at its end

_STATE = Path(tempfile.mkdtemp(prefix="nyc-taxi-test-state-"))
# what the fast lane leaves out: the tests that start Spark, Airflow, Metaflow, a browser, the demo, a
# Spark cluster or the team deployment
HEAVY = ("spark", "airflow", "metaflow", "ui", "lineage", "scale_out", "team")
LANES = ("fast", "suite", "system")
# the lanes each command runs (`bash run test` is CI's), and the pytest option that chooses it
COMMANDS = {
    "bash run test --fast": ("--fast", ("fast",)),
    "bash run test": (None, ("fast", "suite")),
    "bash run test --system": ("--system", ("system",)),
}


def lane(item) -> str:
    """The one lane a test is in, by its marks."""
    if item.get_closest_marker("system"):
        return "system"
    return "suite" if any(item.get_closest_marker(name) for name in HEAVY) else "fast"


def selected(items, lanes: tuple[str, ...]) -> list:
    """The tests of ``lanes``, of those collected."""
    return [item for item in items if lane(item) in lanes]


def pytest_addoption(parser):
    parser.addoption("--fast", action="store_true", help=f"the fast lane: no test marked {', '.join(HEAVY)} or system")
    parser.addoption("--system", action="store_true", help="the system lane: only the tests marked system")
    parser.addoption("--all-lanes", action="store_true", help="every lane: the suite's tests and the system's")
    parser.addoption(
        "--lanes", action="store_true", help="print each collected test's lane and the commands that run it; run none"
    )


# The test modules that bring a team deployment up, in two groups, a worker each, one deployment at a time
# in each group: two `team up`s take turns anyway (a lock in `team up`, per user and temporary directory).
# The modules of a chaos mission share a worker (the one-machine deployment's and the run across hosts):
# their missions judge recovery bounds, and never meet each other; the run across hosts does meet the hosts
# layout's demo on the other worker, which slows both (docs/testing.md's timeline; the bounds held there).
# The hosts layout's modules share the other:
# `test_hosts.py` counts the machine's namespaces, so no other layout is made beside it.
# `PROFILE=team bash run demo`'s test brings its own deployment up on a worker after the README's path.
CHAOS_MISSIONS = ("tests/test_team_profile.py", "tests/test_team_system.py", "tests/test_chaos_across_hosts.py")
HOSTS_LAYOUTS = ("tests/test_team_hosts.py", "tests/test_hosts.py")
TEAM_DEPLOYMENTS = CHAOS_MISSIONS + HOSTS_LAYOUTS

# The modules that take longest, in the order they start (their times: docs/testing.md): the team deployments
# run beside everything else, so they start first (the system lane: a group on each worker; CI's lane: the
# chaos missions' beside the demo's readers, the hosts layouts next; the flow's module, about 220 s, before
# the short ones, which fill in behind it, so that both workers end together); the rest follow in file
# order, a worker taking the next module once two tests or fewer of its own are left (xdist's loadfile
# scheduling).
LONGEST_FIRST = (
    *CHAOS_MISSIONS,
    "tests/test_lineage.py",
    "tests/test_site.py",
    *HOSTS_LAYOUTS,
    "tests/test_readme_path.py",
    "tests/test_training_flow.py",
    "tests/test_team_demo.py",
    "tests/test_stale.py",
)


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        module = item.nodeid.split("::", 1)[0]
        return LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each module's tests keep their order
    if config.getoption("lanes"):  # for the lanes' own test: every test, the commands that run it, none run
        for item in items:
            commands = [command for command, (_, lanes) in COMMANDS.items() if selected([item], lanes)]
            print(f"LANE {item.nodeid}\t{lane(item)}\t{', '.join(commands)}")
        config.hook.pytest_deselected(items=list(items))
        items[:] = []
        return
    if config.getoption("all_lanes"):
        return
    option = next((option for option, _ in COMMANDS.values() if option and config.getoption(option[2:])), None)
    kept = selected(items, next(lanes for given, lanes in COMMANDS.values() if given == option))
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


def pytest_configure(config):
    """Before anything reads the settings or imports Airflow: isolated state, no outside servers, and
    Airflow's configuration (a few environment variables: Airflow reads them when it is imported)."""
    os.environ.update(
        {
            "STATE_DIR": str(_STATE),
            "PROFILE": "local",
            "SPARK_LOCAL_IP": "127.0.0.1",
            "DATAHUB_TELEMETRY_ENABLED": "false",
            # the machine's own tool settings stay out: no ~/.datahubenv, no ~/.metaflowconfig (the tests
            # that read them give a home of their own)
            "DATAHUB_SKIP_CONFIG": "true",
            "METAFLOW_HOME": str(_STATE / "metaflowconfig"),
        }
    )
    for name in [n for n in os.environ if n.startswith("OPENLINEAGE__")] + [
        "OPENLINEAGE_CONFIG",
        "OPENLINEAGE_DISABLED",
        "OPENLINEAGE_API_KEY",
        "OPENLINEAGE_ENDPOINT",
        "DATAHUB_GMS_TOKEN",
        "DATAHUB_GMS_HOST",
        "DATAHUB_GMS_PORT",
        "DATAHUB_CONN_ID",
        "METAFLOW_PROFILE",
        "DATAHUB_PLATFORM_INSTANCE",
        "DATAHUB_ENV",
        "DATAHUB_GMS_URL",
        "OPENLINEAGE_URL",
        "SPARK_MASTER",
        "S3_BUCKET",
        "AIRFLOW_CONFIG",
        "TLC_BASE_URL",
        "NOAA_BASE_URL",
        "OPENLINEAGE_PARENT_ID",
        "OPENLINEAGE_ROOT_PARENT_ID",
        "PARENT_AIRFLOW_TASK",
    ]:
        os.environ.pop(name, None)
    from nyc_taxi.airflow_adapter.environment import airflow_environment

    os.environ.update(airflow_environment())


def pytest_unconfigure(config):
    shutil.rmtree(_STATE, ignore_errors=True)


# Test modules that read the session's one demo run (the `demo` fixture): on one worker, so it runs once.
DEMO_READERS = ("tests/test_lineage.py", "tests/test_site.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`bash run test`'s workers take a test file at a time (--dist loadfile), its module fixtures run
    once; the demo's readers go to one worker together, and so does each group of team deployments."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False  # modules in collection order (LONGEST_FIRST), not by test count

    all_lanes = config.getoption("all_lanes")  # the chaos run across hosts meets `test_hosts.py`: one group

    class ModulesSharingAWorker(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            if module in DEMO_READERS:
                return "the demo's readers"
            if all_lanes and module in TEAM_DEPLOYMENTS:
                return "the team deployments"
            if module in CHAOS_MISSIONS:
                return "the chaos missions' deployments"
            return "the hosts layouts" if module in HOSTS_LAYOUTS else module

    return ModulesSharingAWorker(config, log)


@pytest.fixture(scope="session")
def site():
    """A fixture copy of the TLC and NOAA sites, served on 127.0.0.1; the session's settings (and every
    process a test starts) fetch the sources from it."""
    from nyc_taxi.core.settings import get_settings
    from nyc_taxi_proving.fixtures.server import FixtureServer

    root = _STATE / "site"
    root.mkdir(parents=True, exist_ok=True)
    with FixtureServer(root) as url:
        os.environ.update({"TLC_BASE_URL": url, "NOAA_BASE_URL": url})
        get_settings.cache_clear()
        yield root
        for name in ("TLC_BASE_URL", "NOAA_BASE_URL"):
            os.environ.pop(name, None)
        get_settings.cache_clear()


@pytest.fixture(scope="session")
def settings(site):
    """The session's settings: its own state directory, sources on the fixture site."""
    from nyc_taxi.airflow_adapter.environment import prepare_directories
    from nyc_taxi.core.lakehouse import lakehouse
    from nyc_taxi.core.settings import get_settings

    settings = get_settings()
    lakehouse(settings).create()
    prepare_directories(settings)
    return settings


@pytest.fixture(scope="session")
def spark(settings):
    """One real local Spark session on the test state's Iceberg catalog, shared by all tests."""
    from nyc_taxi.core.spark import get_spark, stop_spark

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
    from nyc_taxi.core.settings import Settings

    return Settings(
        _env_file=None,
        profile="aws",
        aws_profile="",
        aws_endpoint_url=moto_endpoint,
        aws_region="eu-west-1",
        state_dir=tmp_path,
    )


@pytest.fixture(scope="session")
def airflow_db(settings, airflow_state):
    """An initialised Airflow metadata database in the test state (what dag.test() needs): the session's
    migrated one, copied."""
    airflow_state(settings)
    return settings.airflow_home


@pytest.fixture(scope="session")
def airflow_state(tmp_path_factory):
    """settings -> their Airflow home made ready for `airflow dags test`: its directories, and the
    metadata database `airflow db migrate` makes of an empty home (it names no path), migrated once
    for the session and copied (a migrate costs about 4 s per state directory)."""
    import subprocess
    import sys

    from nyc_taxi.airflow_adapter.environment import airflow_environment, prepare_directories
    from nyc_taxi.core.settings import Settings

    template = Settings(state_dir=tmp_path_factory.mktemp("airflow-template"), profile="local")
    prepare_directories(template)
    env = {**os.environ, "STATE_DIR": str(template.state_dir), **airflow_environment(template)}
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, check=True, capture_output=True, timeout=600
    )
    database = template.airflow_home / "airflow.db"

    def prepare(settings) -> None:
        prepare_directories(settings)
        shutil.copyfile(database, settings.airflow_home / "airflow.db")

    return prepare


@pytest.fixture(scope="session")
def dagbag(airflow_db, spark):
    from airflow.models import DagBag

    from nyc_taxi.airflow_adapter.environment import DAGS_FOLDER

    bag = DagBag(dag_folder=str(DAGS_FOLDER))
    assert bag.import_errors == {}
    return bag


@pytest.fixture
def real_source_defaults(monkeypatch):
    """Settings built in the test see the real public source URLs, not the session's fixture server."""
    for name in ("TLC_BASE_URL", "NOAA_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium driven by Playwright (no browser download), on a fresh empty profile.
    One per test module: while Playwright's sync API is open, the thread's asyncio loop counts as running,
    which later tests in the same process (Airflow's dag.test) must not meet."""
    from playwright.sync_api import sync_playwright

    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium", args=args)
        yield chromium
        chromium.close()


@pytest.fixture
def receiver(tmp_path):
    """mode -> a lineage server process (tests/lineage_receiver.py) on 127.0.0.1, stopped after the test."""
    from lineage_receiver import Receiver

    started = []

    def start(mode: str = "ok") -> Receiver:
        server = Receiver(tmp_path / f"receiver-{len(started)}.jsonl")
        server.start(mode)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """`bash run demo`'s pipeline (`python -m nyc_taxi_proving.cli.demo`) in a directory of its own, run once for
    the tests that read what it recorded: (settings, stdout, images dir).

    While working on those tests, `DEMO_DIR=<dir> bash run test -k lineage` keeps the demo's directory
    (`<dir>/state`, `<dir>/stdout.txt`) and reuses it when it is complete; CI never sets it."""
    import json
    import subprocess
    import sys

    from nyc_taxi.core.settings import Settings

    kept = os.environ.get("DEMO_DIR")
    root = Path(kept) if kept else tmp_path_factory.mktemp("demo")
    stdout = root / "stdout.txt"
    if not (kept and stdout.exists()):
        shutil.rmtree(root / "state", ignore_errors=True)
        from nyc_taxi_proving.fixtures.lineage_server import LineageServer

        env = {**os.environ, "STATE_DIR": str(root / "state")}
        for name in ("TLC_BASE_URL", "NOAA_BASE_URL"):  # the demo serves its own fixture months
            env.pop(name, None)
        # the machine's own lineage servers, which the demo, offline, must not send to (a test reads the count)
        elsewhere = LineageServer(root / "sent-elsewhere.jsonl").start("ok")
        (root / "users-openlineage.yml").write_text(f"transport:\n  type: http\n  url: {elsewhere.url}\n")
        (root / "users-airflow.cfg").write_text(f"[openlineage]\nconfig_path = {root / 'users-openlineage.yml'}\n")
        connection = json.dumps({"conn_type": "datahub-rest", "host": elsewhere.url})
        env |= {"OPENLINEAGE_URL": elsewhere.url, "DATAHUB_GMS_URL": elsewhere.url}
        env |= {"AIRFLOW_CONFIG": str(root / "users-airflow.cfg"), "AIRFLOW_CONN_DATAHUB_REST_DEFAULT": connection}
        try:
            result = subprocess.run(
                [sys.executable, "-m", "nyc_taxi_proving.cli.demo", "--images", str(root / "images")],
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
        finally:
            (root / "sent-elsewhere.count").write_text(str(len(elsewhere.requests())))
            elsewhere.stop()
        assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
        stdout.write_text(result.stdout)
    # the demo served its sources on 127.0.0.1 (a port of its own: one identity whatever the port)
    fixture_site = "http://127.0.0.1:1"
    settings = Settings(
        state_dir=root / "state", profile="local", tlc_base_url=fixture_site, noaa_base_url=fixture_site
    )
    said = stdout.read_text()
    assert re.search(r"warm Spark server: pid \d+, started in", said), "the demo started no warm Spark server"
    return settings, said, root / "images"


@pytest.fixture(scope="session")
def lineage_events():
    """settings -> (job, event type) of every OpenLineage event both tools wrote, sorted; every line
    must be whole JSON (a torn or interleaved line fails)."""

    def events(settings) -> list[tuple[str, str]]:
        import json

        from nyc_taxi.lineage.write.destinations import openlineage_events_dir

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
        return SimpleNamespace(
            url=f"http://127.0.0.1:{server.server_address[1]}",
            requests=requests,
            events=lambda: [body for path, _, body in requests if path == "/api/v1/lineage"],
        )

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
