"""The team profile's deployment for the tests that run it (tests/test_team_profile.py, the suite's lane;
tests/test_team_system.py, the system lane): one deployment per module, brought up by `bash run team up`
under a state directory of its own and down (its services' data removed) after the module; and what those
tests read of it. A pytest plugin (tests/conftest.py loads it)."""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import json
import os
import re
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
        [sys.executable, "-m", "nyc_taxi_proving.cli.team", *args], env=env, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def lineage_server(tmp_path_factory):
    """The lineage server the deployment delivers to (OpenLineage events and DataHub records)."""
    from nyc_taxi_proving.fixtures.lineage_server import LineageServer

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
    from nyc_taxi_proving.deployment.supervisor import Supervisor

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


def raw_holds_exactly(settings, taxi_file: Path) -> int:
    """raw's rows of the file equal an independent reading of it: nothing lost, nothing doubled; how many."""
    from nyc_taxi.core.catalog import load_table

    raw = load_table(registry.YELLOW_TAXI_RAW, settings).scan(row_filter=f"source_file == '{taxi_file.name}'")
    rows = raw.to_arrow()
    assert comparable(rows).equals(comparable(expected_taxi_rows(taxi_file)))
    return rows.num_rows


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
    thread it starts. Not a thread a pool started before (pyiceberg's readers, Arrow's IO threads), which
    stays in the machine's network; and a thread a pool starts meanwhile stays in this namespace after it,
    even once the layout is gone. What reads the lake runs through ``in_network`` instead."""
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


_CALL = """
import json, sys
from importlib import import_module
sys.path.insert(0, sys.argv[1])
module, name = sys.argv[2].split(":")
print(json.dumps(getattr(import_module(module), name)(*json.load(sys.stdin)), default=str))
"""


def in_network(namespace: str, call: str, *args, env: dict | None = None):
    """``call`` ("module:function" of the tests' own modules) with ``args`` (JSON's) in a process of its
    own in ``namespace``'s network, every thread of it there; what it returns. A reading of the lake from
    a pool's thread that ``network_of`` left in the machine's own network would leave through the machine's
    route: here an egress proxy answers every address of the hosts' range with an empty 404, which readers
    report as a file that does not exist. ``env``: the deployment's environment (this session's stays out).
    A failure is an AssertionError with the end of what it said."""
    command = ["ip", "netns", "exec", namespace, sys.executable, "-c", _CALL, str(Path(__file__).parent), call]
    try:  # the arguments on stdin: a host's settings hold its secrets, which no command line shows
        done = subprocess.run(command, input=json.dumps(args), capture_output=True, text=True, timeout=900, env=env)
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(f"{call} in {namespace}'s network: no answer in {expired.timeout} s") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise AssertionError(f"{call} in {namespace}'s network: exit {done.returncode}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def thread_networks(threads: int) -> list[int]:
    """The network namespace (its inode) of this thread and of each of a pool's ``threads`` threads."""
    from concurrent.futures import ThreadPoolExecutor

    def network() -> int:
        time.sleep(0.1)  # each task held a moment: the pool starts a thread for each
        return os.stat("/proc/thread-self/ns/net").st_ino

    with ThreadPoolExecutor(threads) as pool:
        return [network(), *pool.map(lambda _: network(), range(threads))]


def settings_given(settings) -> dict:
    """A host's settings as ``in_network`` passes them on (JSON's; its secrets as they are, never printed)."""
    from pydantic import SecretStr

    fields = {k: v.get_secret_value() if isinstance(v, SecretStr) else v for k, v in settings if v is not None}
    return json.loads(json.dumps(fields, default=str))


def lake_as_published(settings: dict, taxi_files: list[str], site: str, months: list, forecasts: bool) -> int:
    """Run by ``in_network`` on a host of the hosts layout (``settings``: its own, as ``settings_given``):
    raw holds each published taxi file's rows exactly, weather_raw each month's published weather and, with
    ``forecasts``, the forecast from each month's end is the seasonal-naive count a week earlier; the rows
    of raw it read."""
    from expected_loads import expected_actuals, seasonal_naive

    from nyc_taxi.core.settings import Settings

    settings, files, read = Settings(_env_file=None, **settings), [Path(f) for f in taxi_files], 0
    for taxi_file in files:
        read += raw_holds_exactly(settings, taxi_file)
    for year, month in months:
        check_weather(settings, Path(site), year, month)
        if forecasts:
            as_of = dt.datetime(year + month // 12, month % 12 + 1, 1)
            counted = expected_actuals(files, as_of - dt.timedelta(days=28), as_of)
            assert forecasts_of(settings, as_of) == seasonal_naive(counted, as_of, 24), as_of
    return read


def processes_of(state: Path) -> list[list[str]]:
    """Every process left on the machine that runs for the deployment of ``state`` (by the marker its
    supervisord gives every program): what `team down` must leave none of."""
    import psutil

    from nyc_taxi_proving.deployment.supervisor import MARKER

    left = []
    for process in psutil.process_iter():
        try:
            if str(state) in process.environ().get(MARKER, ""):
                left.append(process.cmdline())
        except psutil.Error:
            continue
    return left


# what a commit that Iceberg believed failed, and cleaned up after, leaves in the logs
_COMMIT_TROUBLE = re.compile(
    r"CommitFailedException|ValidationException|UncheckedSQLException|CommitStateUnknown|SQLSTATE|"
    r"Retrying task after failure|Failed to commit"
)
_PROGRAM_ENDED = re.compile(r" (exited|gave up|stopped): ")  # supervisord's words for a program's end
_SEAWEEDFS_ERROR = re.compile(r"^[EF]\d{4} ")  # glog's error and fatal lines
_LOGGED_AT = re.compile(r"(?:^[IWEF]\d{4} |\d{4}-\d\d-\d\d[T ])(\d\d:\d\d:\d\d)")  # glog's, ISO's
NEAR_S = 3
_LAKE_FILE = re.compile(r"(?:s3a?://)?([\w.-]+/[\w./=-]*[0-9a-f]{8}-[0-9a-f-]{27}[\w.-]*)")


def missing_lake_file_story(network, error: Exception, most: int = 40) -> str:
    """For a lake file found missing or wrong on the hosts layout, everything that can tell how it came
    about, gathered before the module's state is removed: whether the object reads now and 20 s later
    (there all along: a reader outside the hosts' network, docs/operations.md#across-hosts; or gone); the
    filer's own history of the path (each create, update and delete, with its time and chunks: deleted, or
    never written); every program's end on every host (supervisord); the lines of every host's logs that
    name the file, tell of a commit's trouble, are SeaweedFS's errors or were logged about its deletion.
    Called in the network of control. Nothing it fails to gather hides the error: each part says what it
    could not read."""
    from nyc_taxi.core import team as services
    from nyc_taxi.core.processes import read_record
    from nyc_taxi_proving.deployment.across_hosts import host_settings
    from nyc_taxi_proving.deployment.object_storage import ObjectStorage
    from nyc_taxi_proving.deployment.services import weed_binary

    here, there = os.stat("/proc/thread-self/ns/net").st_ino, os.stat(f"/run/netns/{network.namespace('control')}")
    assert here == there.st_ino, (
        "the story is told from control's network (network_of): elsewhere a HEAD meets the machine's route"
    )
    said, found = [], _LAKE_FILE.search(str(error))
    control = host_settings(network.settings, network, "control")
    if found:
        bucket, _, key = found.group(1).partition("/")
        store = services.ObjectStore(control)
        for wait in (0, 20):
            time.sleep(wait)
            try:
                head = store.client().head_object(Bucket=bucket, Key=key)
                said.append(
                    f"HEAD {bucket}/{key} after {wait} s more: {head['ContentLength']} bytes, {head['LastModified']}"
                )
            except Exception as failed:
                said.append(f"HEAD {bucket}/{key} after {wait} s more: {failed}")
        try:
            record = read_record(services.services_record(control))["seaweedfs"]
            filer = f"{services.address(control, 'seaweedfs-filer')}:{record['filer_port']}.{record['filer_grpc_port']}"
            directory = str(ObjectStorage(control, {}).directory)  # where weed reads security.toml
            weed = [weed_binary(), "filer.meta.tail", f"-filer={filer}", f"-pathPrefix=/buckets/{bucket}/{key}",
                    "-timeAgo=24h", "-untilTimeAgo=1ms"]  # fmt: skip
            # it follows the log on after its last event: 30 s is the whole history of a module's run
            tail = network.command("control", ["sh", "-c", 'cd "$0" && exec timeout 30 "$@"', directory, *weed])
            history = subprocess.run(tail, capture_output=True, text=True, timeout=60)
            said.append(f"the filer's history of /buckets/{bucket}/{key}:")
            said.extend(_filer_events(history.stdout) or [f"(no event) {history.stderr[-500:]}"])
        except Exception as failed:
            said.append(f"the filer's history could not be read: {failed}")
    else:
        said.append("the error names no lake file")
    deletions = [line.split(" ", 1)[0] for line in said if re.match(r"\d\d:\d\d:\d\d\.\d+ deleted ", line)]
    naming, ended, trouble, weed_errors, meanwhile = [], [], [], [], []
    for host in network.layout.hosts:
        for folder, _, names in os.walk(network.directory(host.name)):
            for name in sorted(n for n in names if n.endswith(".log") and not n[0].isdigit()):  # not LevelDB's
                try:
                    with open(os.path.join(folder, name), errors="replace") as lines:
                        for line in lines:
                            where = f"{host.name} {name}: {line.strip()[:300]}"
                            if found and found.group(1).rsplit("/", 1)[-1] in line:
                                naming.append(where)
                            elif name.startswith("supervisord") and _PROGRAM_ENDED.search(line):
                                ended.append(where)
                            elif _COMMIT_TROUBLE.search(line):
                                trouble.append(where)
                            elif name.startswith("seaweedfs") and _SEAWEEDFS_ERROR.match(line):
                                weed_errors.append(where)
                            if (at := _LOGGED_AT.search(line)) and any(_near(at.group(1), t) for t in deletions):
                                meanwhile.append(where)
                except OSError:
                    continue
    for title, lines in (("lines naming the file", naming), ("programs that ended", ended),
                         ("a commit's trouble", trouble), ("SeaweedFS's errors", weed_errors),
                         (f"lines logged within {NEAR_S} s of its deletion", meanwhile)):  # fmt: skip
        said.append(f"{title}: {len(lines)}")
        said.extend(lines[: most * (2 if lines is meanwhile else 1)])
    return "\n".join(said)


def _filer_events(text: str) -> list[str]:
    """`weed filer.meta.tail`'s events (JSON objects one after another), one line each: the time, what
    happened to which name, its size and its chunks (volume,key: on which volume the bytes are)."""
    decoder, events, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) >= 0:
        try:
            event, at = decoder.raw_decode(text, at)
        except ValueError:
            at += 1
            continue
        notification = event.get("eventNotification") or {}
        old, new = notification.get("oldEntry"), notification.get("newEntry")
        kind = "created" if new and not old else "deleted" if old and not new else "updated"
        entry = new or old or {}
        chunks = [f"{c['fid']['volumeId']},{c['fid'].get('fileKey')}" for c in entry.get("chunks", []) if c.get("fid")]
        when = dt.datetime.fromtimestamp(int(event.get("tsNs", 0)) / 1e9)  # local, as glog and supervisord log
        events.append(
            f"{when:%H:%M:%S.%f} {kind} {event.get('directory')}/{entry.get('name')} "
            f"{(entry.get('attributes') or {}).get('fileSize')} bytes, chunks {' '.join(chunks) or '-'}"
            + (
                f", into {notification['newParentPath']}"
                if notification.get("newParentPath") not in (None, "", event.get("directory"))
                else ""
            )
            + (", its chunks deleted" if kind == "deleted" and notification.get("deleteChunks") else "")
        )
    return events


def _near(logged: str, deleted: str) -> bool:
    """Whether a log line's time of day (hh:mm:ss, local: Airflow's UTC lines match on a machine in UTC)
    lies within NEAR_S seconds of a deletion's, across midnight too."""
    seconds = [sum(int(x) * f for x, f in zip(t[:8].split(":"), (3600, 60, 1), strict=True)) for t in (logged, deleted)]
    apart = abs(seconds[0] - seconds[1])
    return min(apart, 86400 - apart) <= NEAR_S
