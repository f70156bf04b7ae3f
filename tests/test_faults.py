"""Lineage delivery that loses nothing, whatever the servers do; secrets that never leak.

A lineage server of our own (tests/lineage_receiver.py, a process on 127.0.0.1 that speaks
OpenLineage's endpoint and DataHub GMS's ingestion endpoint and logs every request) is live, killed
in the middle of a DAG run (a closed port from then on), answers 500 for a while, or accepts
connections and never answers. Each time the weather DAG runs for real (`airflow dags test`) with
the tools' own settings pointing at it (the live server: an openlineage.yml named by Airflow's
`[openlineage] config_path` and a `datahub_rest_default` connection; the others: OPENLINEAGE_URL and
DATAHUB_GMS_URL), and:
- the DAG succeeds, and the extra time lineage can cost is bounded by what the server's own log
  shows: each end of a task tries at most one record per server, each try at most the request timeout;
- the local files are complete: event for event the same as a live run's (run ids and times aside);
- once the server answers again, one `bash run lineage-replay` delivers every record exactly once,
  in order, and a second delivers nothing.
"""

from __future__ import annotations

import ast
import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from lineage_receiver import (
    DATAHUB_INGEST_PATH,
    OPENLINEAGE_PATH,
    Receiver,
    closed_port,
    local_lineage,
    local_records,
    received_records,
)

from nyc_taxi_proving.fixtures.site import add_weather_month

pytestmark = [pytest.mark.airflow, pytest.mark.faults]

DAG_TASKS = 4  # create_tables, download, stage, merge: each ships at its end, and the DAG run at its end


# ---- runs and what they left ---------------------------------------------------------------------------


def _run_weather_dag(site, airflow_state, state: Path, month: str = "2023-06", **variables: str) -> SimpleNamespace:
    """`airflow dags test ingest_weather_data` in its own state directory, with these environment
    variables (lineage settings, credentials) set as a user's shell would have them; the month is
    published first, unless it is one the fixture site never publishes."""
    from nyc_taxi.airflow_adapter.environment import airflow_process_environment
    from nyc_taxi.core.settings import Settings

    settings = Settings(
        state_dir=state,
        **{name.lower(): value for name, value in variables.items() if name.lower() in Settings.model_fields},
    )
    airflow_state(settings)
    env = airflow_process_environment(settings, {**os.environ, "STATE_DIR": str(state), **variables})
    if month == "2023-06":
        add_weather_month(site, 2023, 6, n_counties=60)
    started = time.monotonic()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow",
            "dags",
            "test",
            "ingest_weather_data",
            "--conf",
            json.dumps({"month": month}),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    took = time.monotonic() - started
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "DagRunState.SUCCESS" in output or "state=success" in output.lower(), output[-3000:]
    return SimpleNamespace(took=took, output=output, env=env, settings=settings, state=state)


def _replay(env: dict, **urls: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.replay"], env={**env, **urls}, capture_output=True, text=True, timeout=600
    )


# Values that name the run or the moment, not what happened: left out when two runs are compared.
_VOLATILE = [
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:?\d{2}|Z)?"), "<time>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}%3A\d{2}%3A\d{2}(\.\d+)?(%2B\d{2}%3A\d{2})?"), "<time>"),  # in a URL
    (re.compile(r"manual__<time>"), "<airflow run>"),
    (re.compile(r"\b\d{13,20}\b"), "<id>"),  # Iceberg snapshot ids, epoch milliseconds
    (re.compile(r"\b[0-9a-f]{40}\b"), "<sha>"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "<run hash>"),  # DataHub's DataProcessInstance id, a hash of the run id
]
_VOLATILE_KEYS = {
    "duration",
    "pid",
    "lastObserved",
    "runId",
    "start_date",
    "end_date",
    "queued_dttm",
    "queued_at",
    "timestampMillis",
    "lastUpdatedTimestamp",
    "time",
    "eventTime",
    "created",
    "numAffectedRows",
    # a written file's size: its rows carry the load's time (ingested_at), which compresses to a byte more
    # or less from one run to the next (the system lane at b976f3b: 5,895 bytes against 5,894), in
    # OpenLineage's output statistics and in DataHub's dataset profile (at a718864: 6,013 against 6,012)
    "bytes",
    "sizeInBytes",
}


def normalised(value, state: Path):
    """A record with the state directory, ids and times replaced: two runs of the same work compare equal."""
    if isinstance(value, dict):
        return {k: "<volatile>" if k in _VOLATILE_KEYS else normalised(v, state) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [normalised(v, state) for v in value]
    if isinstance(value, str):
        if value[:1] in "{[":
            try:
                return normalised(json.loads(value), state)  # JSON inside a string (DataHub aspects, Airflow facets)
            except ValueError:
                pass
            try:  # a Python set printed by Airflow (DAG tags): its order is the hash seed's
                items = ast.literal_eval(value)
                return sorted((normalised(i, state) for i in items), key=repr) if isinstance(items, list) else value
            except (ValueError, SyntaxError):
                pass
        text = value.replace(str(state), "<state>")
        for pattern, placeholder in _VOLATILE:
            text = pattern.sub(placeholder, text)
        return text
    if isinstance(value, float):
        return "<number>"
    return value


def _same_files(run, reference) -> None:
    """Event for event and record for record, the run's local files are the reference run's."""
    mine, theirs = local_lineage(run.settings), local_lineage(reference.settings)
    assert len(mine.openlineage) == len(theirs.openlineage) and len(mine.datahub) == len(theirs.datahub)
    for ours, ref in zip(mine.openlineage, theirs.openlineage, strict=True):
        assert normalised(ours, run.state) == normalised(ref, reference.state), ours["job"]["name"]

    # DataHub's plugin writes a DAG's tags in the order of a Python set: the same records, in any order
    def records(local, state) -> list[str]:
        return sorted(json.dumps(normalised(r, state), sort_keys=True) for r in local.datahub)

    assert records(mine, run.state) == records(theirs, reference.state)


# ---- the live reference --------------------------------------------------------------------------------

SECRETS = {"DATAHUB_GMS_TOKEN": "dh-" + secrets.token_hex(16), "OPENLINEAGE_API_KEY": "ol-" + secrets.token_hex(16)}


def users_lineage_settings(root: Path, url: str) -> dict[str, str]:
    """Lineage configured as a team that runs Airflow with both integrations has it: an openlineage.yml
    named by Airflow's ``[openlineage] config_path`` (an HTTP transport with an API key) and the DataHub
    plugin's documented connection, ``datahub_rest_default`` (its password the token)."""
    config = root / "openlineage.yml"
    auth = {"type": "api_key", "apiKey": SECRETS["OPENLINEAGE_API_KEY"]}
    config.write_text(json.dumps({"transport": {"type": "http", "url": url, "auth": auth}}))
    connection = {"conn_type": "datahub-rest", "host": url, "password": SECRETS["DATAHUB_GMS_TOKEN"]}
    return {
        "AIRFLOW__OPENLINEAGE__CONFIG_PATH": str(config),
        "AIRFLOW_CONN_DATAHUB_REST_DEFAULT": json.dumps(connection),
    }


@pytest.fixture(scope="module")
def live(site, airflow_state, tmp_path_factory):
    """The weather DAG with a live server taking both record kinds, with a token and an API key, named the
    way each tool's own settings name a server (``users_lineage_settings``)."""
    root = tmp_path_factory.mktemp("live")
    server = Receiver(root / "receiver.jsonl").start("ok")
    try:
        run = _run_weather_dag(site, airflow_state, root / "state", **users_lineage_settings(root, server.url))
        run.during = SimpleNamespace(
            openlineage=[r["body"] for r in server.accepted(OPENLINEAGE_PATH)], datahub=received_records(server)
        )
        run.replay = _replay(run.env)
        run.again = _replay(run.env)
        run.server = server
        print(f"ingest_weather_data with a live lineage server: {run.took:.0f} s")
        yield run
    finally:
        server.stop()


def test_a_live_server_receives_every_local_record_once_in_order(live):
    local = local_lineage(live.settings)
    assert len(local.openlineage) >= 2 * DAG_TASKS and len(local.datahub) > 50
    # the tasks shipped as they ended: what arrived during the run is the start of the local files, in order
    assert live.during.openlineage == local.openlineage[: len(live.during.openlineage)]
    assert live.during.datahub == local_records(local.datahub)[: len(live.during.datahub)]
    assert len(live.during.openlineage) >= 2 * DAG_TASKS  # every task's START and COMPLETE, at least
    # with what the end of the DAG run left for the next shipping, the server has everything, once
    assert live.replay.returncode == 0, live.replay.stderr
    assert [r["body"] for r in live.server.accepted(OPENLINEAGE_PATH)] == local.openlineage
    assert received_records(live.server) == local_records(local.datahub)
    assert "openlineage: 0 records sent" in live.again.stdout and "datahub: 0 records sent" in live.again.stdout
    status = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.replay", "--status"], env=live.env, capture_output=True, text=True
    )
    pending = [line.split()[1] for line in status.stdout.splitlines()]
    assert pending and set(pending) == {"0"}, status.stdout


def test_tokens_reach_the_server_and_no_file_or_output(live):
    headers = {(r["path"], r["headers"].get("Authorization")) for r in live.server.requests()}
    assert {h for p, h in headers if p == OPENLINEAGE_PATH} == {f"Bearer {SECRETS['OPENLINEAGE_API_KEY']}"}
    assert {h for p, h in headers if p == DATAHUB_INGEST_PATH} == {f"Bearer {SECRETS['DATAHUB_GMS_TOKEN']}"}
    assert _files_containing(live.state, SECRETS) == []
    assert [
        name for name, value in SECRETS.items() if value in live.output + live.replay.stdout + live.replay.stderr
    ] == []


def test_with_openlineage_disabled_no_event_is_made_or_sent_and_the_dag_succeeds(
    site, airflow_state, tmp_path, receiver
):
    """OPENLINEAGE_DISABLED=true (OpenLineage's own switch), with an openlineage.yml naming a live server:
    the DAG run succeeds, Airflow's provider makes no event and nothing is sent; DataHub's records go on."""
    server = receiver("ok")
    settings = users_lineage_settings(tmp_path, server.url)
    run = _run_weather_dag(site, airflow_state, tmp_path / "state", "2099-01", OPENLINEAGE_DISABLED="true", **settings)
    assert not [r for r in server.requests() if r["path"] == OPENLINEAGE_PATH]
    assert local_lineage(run.settings).openlineage == []
    assert [r for r in server.requests() if r["path"] == DATAHUB_INGEST_PATH and r["status"] in (200, 201)]


def _files_containing(root: Path, needles: dict[str, str]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{name} in {path}" for name, value in needles.items() if value.encode() in data]
    return found


# ---- servers that misbehave ------------------------------------------------------------------------------

FAULTS = {
    # takes the first tasks' records, then the process is gone: from then on every try meets a closed port
    "killed mid-run, then a closed port": "die-after:25",
    "500, then 200": "fail-first:4",  # refuses the first two tasks' shipping, then takes everything
    "never answers": "hang",  # accepts connections, never answers
}
# The user's setting of the request timeout (2 s by default), for the run against the server that
# never answers: what is asserted (at most one try per server at each end of a task, each one cut off)
# does not depend on its length, so a shorter one proves the same and waits less. Replays, against a
# server that answers again, use the default.
HUNG_REQUEST_TIMEOUT = {"LINEAGE_REQUEST_TIMEOUT": "0.5"}


@pytest.mark.system  # the lineage delivery's long proofs: a whole DAG run per misbehaving server
@pytest.mark.parametrize("fault", FAULTS)
def test_a_misbehaving_server_costs_no_record_and_bounded_time(site, airflow_state, tmp_path, receiver, live, fault):
    mode = FAULTS[fault]
    server = receiver(mode)
    run = _run_weather_dag(
        site,
        airflow_state,
        tmp_path / "state",
        OPENLINEAGE_URL=server.url,
        DATAHUB_GMS_URL=server.url,
        **(HUNG_REQUEST_TIMEOUT if mode == "hang" else {}),
    )
    print(f"ingest_weather_data, lineage server {fault}: {run.took:.0f} s (live: {live.took:.0f} s)")

    # bounded time, from the server's own log: at each end of a task (and of the DAG run) at most one
    # failed try per server, each cut off by the request timeout (hung) or refused at once
    timeout = run.settings.lineage_request_timeout
    failed = [r for r in server.requests() if r["status"] not in (200, 201)]
    assert len(failed) <= 2 * (DAG_TASKS + 1), failed
    if mode == "hang":
        assert len(failed) >= 1  # it was tried, and given up on
        print(f"  hung requests: {len(failed)}, at most {len(failed) * timeout:.1f} s added")
    if mode.startswith("die-after"):  # it really died mid-run: every later try met a closed port
        took = int(mode.split(":")[1])
        assert server.process.poll() is not None and len(server.requests()) == took
        local = local_lineage(run.settings)
        assert took < len(local.openlineage) + len(local.datahub)
    assert re.search(r"lineage records sent to .*kept for later", run.output)  # said, as a warning

    # nothing lost: the local files are the live run's, event for event
    _same_files(run, live)

    # the server answers again: one replay delivers every record exactly once, a second nothing
    if not mode.startswith("fail-first"):  # that one came back by itself
        server.stop()
        server.start("ok")
    env = {name: value for name, value in run.env.items() if name not in HUNG_REQUEST_TIMEOUT}
    first, again = _replay(env), _replay(env)
    assert first.returncode == 0, first.stderr
    local = local_lineage(run.settings)
    assert [r["body"] for r in server.accepted(OPENLINEAGE_PATH)] == local.openlineage
    assert received_records(server) == local_records(local.datahub)
    assert "openlineage: 0 records sent" in again.stdout and "datahub: 0 records sent" in again.stdout


def test_datahub_push_to_a_server_that_is_down_fails_clearly(live):
    """`bash run datahub-push` (DataHub's own pipeline: file source → REST sink) to nothing: a clear error."""
    result = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.datahub", "push"],
        capture_output=True,
        text=True,
        env={**live.env, "DATAHUB_GMS_URL": f"http://127.0.0.1:{closed_port()}"},
        timeout=300,
    )
    assert result.returncode != 0
    assert "127.0.0.1" in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert _files_containing(live.state, SECRETS) == []


@pytest.mark.spark
def test_the_fixture_server_and_spark_listen_on_127_0_0_1_only(spark, settings, listening_sockets):
    """The test process serves the fixture sites and drives a local Spark JVM (py4j, driver RPC, block
    manager, Spark UI): every socket they listen on is on this machine only."""
    listeners = listening_sockets(os.getpid())
    fixture_port = int(settings.tlc_base_url.rsplit(":", 1)[1].split("/")[0])
    assert any(port == fixture_port for _, _, port in listeners), listeners
    assert sum("java" in name for name, _, _ in listeners) >= 3, listeners
    assert {address for _, address, _ in listeners} == {"127.0.0.1"}, listeners
