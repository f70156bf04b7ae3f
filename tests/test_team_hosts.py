"""The team deployment across the hosts of deployment/hosts.toml, run for real on this machine:
`bash run team up --hosts` makes control, worker-a and worker-b network namespaces and runs each host's
programs under its own supervisord, listening on its address; `team status --hosts` asks each program
from control's network; `team down --delete-data` leaves nothing behind.

The suite's lane holds the short checks that the layout comes up and answers; the system lane runs a
month's two ingestion DAGs on it, and the training the merge's asset event starts: every task on a worker
host, its Spark driver there, its log read through the API server from the worker's log server, and the
tables equal to an independent reading of the published files (faults across hosts:
tests/test_chaos_across_hosts.py)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from team_deployment import assert_the_team_demo_ended_as_the_local_one, network_of, processes_of, team_cli

from nyc_taxi.core.processes import free_port

pytestmark = [
    pytest.mark.team,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None,
        reason="network and mount namespaces take root and iproute2 / util-linux",
    ),
]

PROBES = Path(__file__).with_name("listener_probes.py")


def _left_on_the_machine(network) -> list[str]:
    """What of the deployment's network is on the machine: a namespace by its name, a link or an address
    of its hosts (another test's namespaces may come and go meanwhile: only this deployment's count)."""
    names = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    left = [name for name in names if name.startswith(network.prefix)]
    links = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    links += subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    marks = [network.port(h.name) for h in network.layout.hosts] + [f"{h.address}/" for h in network.layout.hosts]
    return left + [line for line in links.splitlines() if any(mark in line for mark in marks)]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """`team up --hosts` under a state directory of its own; after the module, `team down --delete-data`,
    which must leave no namespace, link, address or process behind: (settings, env, network, said)."""
    from nyc_taxi.core.settings import Settings
    from nyc_taxi.deployment.hosts import Network

    state = tmp_path_factory.mktemp("hosts-state")
    # the session's local-profile Airflow settings stay out, and so do the sources' URLs on this machine's
    # loopback, which no host reaches: each host is given its own (settings.env in its state directory)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and not k.endswith("_BASE_URL")}
    env |= {"PROFILE": "team", "STATE_DIR": str(state), "AIRFLOW_PORT": str(free_port()), "SPARK_SERVER": "false"}
    settings = Settings(profile="team", state_dir=state, airflow_port=int(env["AIRFLOW_PORT"]))
    network = Network(settings)
    up = team_cli(env, "up", "--hosts")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield settings, env, network, up.stdout
    finally:
        down = team_cli(env, "down", "--delete-data")
        print(down.stdout, down.stderr)
    assert down.returncode == 0, down.stdout + down.stderr
    assert network.namespaces() == [] and _left_on_the_machine(network) == []

    assert processes_of(state) == []
    from nyc_taxi.deployment import services
    from nyc_taxi.deployment.across_hosts import host_settings

    for host in network.layout.hosts:  # PostgreSQL's data, under its user's home when root, removed too
        assert not services.Postgres(host_settings(settings, network, host.name), {}).directory.exists()


def _status(env, *flags: str) -> dict[tuple[str, str], dict]:
    said = team_cli(env, "status", *flags)
    assert said.returncode == 0, said.stdout + said.stderr
    rows = [line.split() for line in said.stdout.splitlines()[1:] if line.strip()]
    return {(r[0], r[1]): {"state": r[2], "answers": r[3], "pid": int(r[4])} for r in rows if len(r) == 6}


def test_every_program_runs_on_its_host_under_the_hosts_own_supervisord_and_answers(hosts):
    from nyc_taxi.deployment.across_hosts import processes

    _, env, network, _ = hosts
    status = _status(env, "--hosts")
    assert _status(env) == status  # `team status` finds the hosts layout running by itself
    expected = {(h.name, name) for h in network.layout.hosts for name in processes(h)}
    assert set(status) == expected and len(expected) >= 16, status
    assert all(p["state"] == "RUNNING" and p["answers"] == "yes" for p in status.values()), status
    # each process is in its host's network namespace, a child of that host's supervisord
    for (host, _), program in status.items():
        assert (
            str(program["pid"])
            in subprocess.run(
                ["ip", "netns", "pids", network.namespace(host)], capture_output=True, text=True, check=True
            ).stdout.split()
        )


def _listeners(network, host: str) -> set[tuple[str, int, str]]:
    """(address, port, command) of every listening TCP socket in the host's network namespace."""
    listed = subprocess.run(
        ["ip", "netns", "exec", network.namespace(host), "ss", "-Hltnp"], capture_output=True, text=True, check=True
    ).stdout
    found = set()
    for line in listed.splitlines():
        address, _, port = line.split()[3].rpartition(":")
        command = re.search(r'users:\(\("([^"]+)"', line).group(1)  # its name may hold spaces
        found.add((address.strip("[]").removeprefix("::ffff:"), int(port), command))
    return found


def test_each_program_listens_on_its_hosts_address_or_its_loopback_and_nowhere_else(hosts):
    """Every listener on its host's address or its loopback; but a worker's task-log server, which Airflow
    opens on every interface (it has no setting for an address): on a host whose only interfaces are its
    link and its loopback, that is the same two addresses, and it answers only requests the API server
    signed (the refusal test below)."""
    from nyc_taxi.airflow_adapter.environment import WORKER_LOG_SERVER_PORT

    _, _, network, _ = hosts
    for host in network.layout.hosts:
        listeners = _listeners(network, host.name)
        log_server = {(a, p, c) for a, p, c in listeners if p == WORKER_LOG_SERVER_PORT}
        assert {address for address, _, _ in listeners - log_server} <= {host.address, "127.0.0.1"}, (host, listeners)
        facing = {command for address, _, command in listeners if address == host.address}
        if host.name == "control":
            assert {"postgres", "redis-server", "weed", "java"} <= facing, listeners
            assert any(c.startswith("airflow") for c in facing) and not log_server, listeners
        else:
            assert {"weed", "java"} <= facing, listeners
            assert {a for a, _, _ in log_server} <= {"0.0.0.0", "::"} and log_server, listeners
            interfaces = subprocess.run(
                ["ip", "-n", network.namespace(host.name), "-o", "addr"], capture_output=True, text=True, check=True
            ).stdout
            found = {line.split()[3].split("/")[0] for line in interfaces.splitlines()}
            # IPv4: its address and loopback; IPv6: loopback, and the link's own (fe80::/10, the bridge only)
            assert {a for a in found if ":" not in a} == {host.address, "127.0.0.1"}, interfaces
            assert all(a == "::1" or a.startswith("fe80:") for a in found if ":" in a), interfaces


def _probe(network, host: str, kind: str, address: str, port: int, *more: str) -> str:
    """A client on ``host``'s network with no credentials: what the listener answered."""
    import json

    done = subprocess.run(
        ["ip", "netns", "exec", network.namespace(host), sys.executable, str(PROBES), kind, address, str(port), *more],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_client_on_a_worker_host_without_the_credentials_is_refused_by_control_and_the_other_worker(hosts):
    """From worker-b's network, with nothing of the deployment's credentials: control's PostgreSQL, Redis,
    Airflow API, Spark master, SeaweedFS master (gRPC and HTTPS), filer (gRPC), S3 gateway and lineage
    receiver, and worker-a's volume server, Spark worker and task-log server, each refuse."""
    from nyc_taxi.airflow_adapter.environment import WORKER_LOG_SERVER_PORT
    from nyc_taxi.core import team
    from nyc_taxi.core.processes import read_record
    from nyc_taxi.deployment.across_hosts import host_settings
    from nyc_taxi.deployment.services import ObjectStorage

    settings, _, network, _ = hosts
    record = read_record(team.services_record(settings))
    control, worker = network.layout.host("control").address, network.layout.host("worker-a").address
    ca = str(ObjectStorage(host_settings(settings, network, "worker-b"), record).authority.certificate)
    weed = record["seaweedfs"]
    said = {
        "postgres": _probe(network, "worker-b", "postgres", control, record["postgres"]["port"]),
        "redis": _probe(network, "worker-b", "redis", control, record["redis"]["port"]),
        "airflow": _probe(network, "worker-b", "airflow", control, settings.airflow_port),
        "spark master": _probe(network, "worker-b", "spark", control, record["spark"]["port"]),
        "spark worker": _probe(network, "worker-b", "spark", worker, record["spark"]["worker_port"]),
        "seaweedfs master grpc": _probe(network, "worker-b", "grpc", control, weed["master_grpc_port"], ca),
        "seaweedfs master https": _probe(network, "worker-b", "https-master", control, weed["master_port"], ca),
        "seaweedfs volume https": _probe(network, "worker-b", "https-volume", worker, weed["volume_port"], ca),
        "seaweedfs filer grpc": _probe(network, "worker-b", "grpc", control, weed["filer_grpc_port"], ca),
        "s3": _probe(network, "worker-b", "s3", control, weed["s3_port"]),
        "worker-a's log server": _probe(network, "worker-b", "log-server", worker, WORKER_LOG_SERVER_PORT),
        "lineage receiver": _probe(network, "worker-b", "lineage-receiver", control, record["lineage"]["port"]),
    }
    assert "password authentication failed" in said["postgres"], said
    assert said["redis"].startswith("-NOAUTH"), said
    assert said["airflow"].startswith("401"), said
    assert all("network.crypto.AuthRpcHandler" in said[f"spark {d}"] for d in ("master", "worker")), said
    assert all("CERTIFICATE_REQUIRED" in said[k] for k in said if k.startswith("seaweedfs")), said
    assert said["s3"].startswith("403") and "AccessDenied" in said["s3"], said
    assert said["worker-a's log server"].startswith("403"), said  # no token the API server signed
    assert said["lineage receiver"].startswith("401"), said  # no host's token


def test_a_host_is_given_only_the_secrets_its_programs_use_and_the_authoritys_key_stays_with_the_operator(hosts):
    """A worker host holds no JWT secret or Fernet key of Airflow's (only the key its log server checks
    requests with), no filer JWT key, no S3 identities file, no other host's lineage token and no key of the
    certificate authority; control holds what its programs use. Every secret file is 0600."""
    from nyc_taxi.core import team
    from nyc_taxi.core.processes import read_record

    settings, _, network, _ = hosts
    vault = read_record(team.services_record(settings))
    for host in network.layout.hosts:
        own = network.directory(host.name)
        given = read_record(own / "team" / "services.json")
        airflow_files = sorted(p.name for p in (own / "team" / "airflow").iterdir())
        security = (own / "team" / "seaweedfs" / "security.toml").read_text()
        assert not list(own.rglob("ca.key")), host
        tokens = given["lineage"]["tokens"]  # a worker ships its lineage with its own token; the receiver knows all
        assert tokens == (vault["lineage"]["tokens"] if host.name == "control" else {host.name: tokens[host.name]})
        assert len(set(vault["lineage"]["tokens"].values())) == len(network.layout.hosts)
        if host.name == "control":
            assert given["airflow"] == vault["airflow"] and airflow_files == ["fernet_key", "jwt_secret", "secret_key"]
            assert "jwt.filer_signing" in security and (own / "team" / "seaweedfs" / "s3-identities.json").is_file()
        else:
            assert set(given["airflow"]) == {"secret_key"} and airflow_files == ["secret_key"], given["airflow"]
            assert "jwt_filer_write_key" not in given["seaweedfs"] and "jwt.filer_signing" not in security
            assert given["seaweedfs"]["jwt_volume_write_key"] == vault["seaweedfs"]["jwt_volume_write_key"]
            assert not (own / "team" / "seaweedfs" / "s3-identities.json").exists()
            leaked = [
                vault["airflow"]["jwt_secret"],
                vault["airflow"]["fernet_key"],
                vault["seaweedfs"]["jwt_filer_read_key"],
                *(t for name, t in vault["lineage"]["tokens"].items() if name != host.name),
            ]
            texts = [p.read_bytes().decode(errors="replace") for p in own.rglob("*") if p.is_file()]
            assert not [secret for secret in leaked for text in texts if secret in text], host
        private = [own / "team" / "services.json", own / "team" / "seaweedfs" / "security.toml"]
        private += [*(own / "team" / "airflow").iterdir(), *(own / "team" / "seaweedfs" / "tls").glob("*.key")]
        assert all(p.stat().st_mode & 0o077 == 0 for p in private), host


def test_a_program_on_a_host_sees_only_its_own_state_directory_by_construction(hosts):
    """Every process of every host looks through its mount namespace (/proc/PID/root) at the state
    directory and finds only its own host's; its open files and working directory are outside another
    host's and the operator's state."""
    import psutil

    settings, _, network, _ = hosts
    state = settings.state_dir.resolve()
    seen = 0
    for host in network.layout.hosts:
        pids = subprocess.run(
            ["ip", "netns", "pids", network.namespace(host.name)], capture_output=True, text=True, check=True
        ).stdout.split()
        for pid in map(int, pids):
            try:
                view = Path(f"/proc/{pid}/root{state}")
                assert sorted(p.name for p in view.iterdir()) == ["hosts"], pid
                assert [p.name for p in (view / "hosts").iterdir()] == [host.name], pid
                process = psutil.Process(pid)
                paths = [Path(f.path) for f in process.open_files()] + [Path(process.cwd())]
            except (FileNotFoundError, ProcessLookupError, psutil.NoSuchProcess):
                continue  # ended meanwhile
            own = network.directory(host.name).resolve()
            assert not [p for p in paths if p.is_relative_to(state) and not p.is_relative_to(own)], (host, paths)
            seen += 1
    assert seen >= 16


def _errors(network) -> list[str]:
    """The errors of every task log on the hosts (what a failed run's assertion shows)."""
    found = []
    for host in network.layout.hosts:
        for path in (network.directory(host.name) / "airflow" / "logs").glob("dag_id=*/**/*.log"):
            for line in path.read_text().splitlines():
                if '"level":"error"' in line:
                    event = json.loads(line)
                    said = event.get("error_detail") or event.get("event")
                    found.append(f"{host.name} {path.parent.parent.name} {path.parent.name}: {said}"[:1500])
    return found


@pytest.mark.system
def test_the_team_demo_runs_across_the_hosts_and_ends_as_on_one_machine(hosts):
    """`PROFILE=team bash run demo --hosts` on the layout up: the sources served on control's address, every
    run on the worker hosts through control's scheduler, the lineage read on control from what the workers
    shipped, as tests/test_team_demo.py checks it on one machine; each host given the sources' URLs only
    while the demo serves them."""
    from nyc_taxi.airflow_adapter.rest_api import RestApi
    from nyc_taxi.core.settings import state_settings_file
    from nyc_taxi.deployment.across_hosts import host_settings

    settings, env, network, _ = hosts
    done = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.demo", "--hosts"], env=env, capture_output=True, text=True, timeout=3600
    )
    assert_the_team_demo_ended_as_the_local_one(done)
    workers = {h.address for h in network.layout.hosts if h.name != "control"}
    with network_of(network.namespace("control")):
        api = RestApi(host_settings(settings, network, "control"))
        training = api.runs("train_forecast_model")
        hostnames = {
            ti["hostname"] for run in training for ti in api.task_instances("train_forecast_model", run["dag_run_id"])
        }
    assert hostnames and hostnames <= workers, hostnames
    assert not any(state_settings_file(network.directory(h.name)).exists() for h in network.layout.hosts)


MONTHS = ((2024, 7),)
ROWS = 20_000


@pytest.mark.system
def test_a_lake_file_found_missing_is_told_from_the_filers_own_history_of_its_path(hosts):
    """What the DAG test below prints when a file of the lake is missing or wrong tells a file deleted
    after it was written: the store's answer now and later, and the filer's record of its creation and of
    its deletion, in that order."""
    import uuid

    from team_deployment import missing_lake_file_story

    from nyc_taxi.core import team as services
    from nyc_taxi.deployment.across_hosts import host_settings

    settings, _, network, _ = hosts
    with network_of(network.namespace("control")):
        store = services.ObjectStore(host_settings(settings, network, "control"))
        key = f"warehouse/story/{uuid.uuid4()}-m0.avro"
        store.client().put_object(Bucket=store.bucket, Key=key, Body=b"written, then deleted")
        store.client().delete_object(Bucket=store.bucket, Key=key)
        story = missing_lake_file_story(network, FileNotFoundError(f"Cannot open s3://{store.bucket}/{key}"))
    lines = story.splitlines()
    assert [line for line in lines if line.startswith("HEAD ")] == [
        f"HEAD {store.bucket}/{key} after {wait} s more: An error occurred (404) when calling the HeadObject "
        "operation: Not Found"
        for wait in (0, 20)
    ], story
    history = lines[lines.index(f"the filer's history of /buckets/{store.bucket}/{key}:") + 1 :][:2]
    path = f"/buckets/{store.bucket}/{key}"
    assert [line.split(" ", 1)[1].split(",")[0] for line in history] == [
        f"created {path} 21 bytes",
        f"deleted {path} 21 bytes",
    ], story
    assert "its chunks deleted" in history[1], story
    # the gateway's log names the request that deleted it, and so do the lines logged about then
    assert any("DeleteObjectHandler" in line and key in line for line in lines), story
    meanwhile = lines[lines.index(next(line for line in lines if line.startswith("lines logged within"))) :]
    assert any("DeleteObjectHandler" in line for line in meanwhile), story


@pytest.mark.system
def test_a_months_dags_and_its_training_run_on_the_worker_hosts_and_the_tables_equal_the_published_files(
    hosts, tmp_path
):
    import pyarrow.parquet as pq
    from team_deployment import in_network, missing_lake_file_story, settings_given

    from nyc_taxi.airflow_adapter.environment import WORKER_LOG_SERVER_PORT
    from nyc_taxi.airflow_adapter.rest_api import RestApi
    from nyc_taxi.chaos import mission
    from nyc_taxi.core.settings import state_settings_file
    from nyc_taxi.deployment.across_hosts import host_settings
    from nyc_taxi.fixtures.server import FixtureServer

    settings, env, network, _ = hosts
    control = host_settings(settings, network, "control")
    workers = {h.address: h.name for h in network.layout.hosts if h.name != "control"}
    site = tmp_path / "site"
    files = mission.publish(site, ROWS, MONTHS)
    with network_of(network.namespace("control")):
        # the sources' site on control's address; every worker host is given its URL in its own settings
        server = FixtureServer(site, host=network.layout.host("control").address)
        url = server.start()
        try:
            for name in workers.values():
                state_settings_file(network.directory(name)).write_text(f"TLC_BASE_URL={url}\nNOAA_BASE_URL={url}\n")
            api = RestApi(control)
            started = dt.datetime.now(dt.UTC)
            runs = [(dag, api.trigger(dag, conf)) for step in mission.steps(MONTHS)[:1] for dag, conf in step.runs]
            done = {dag: api.finished(dag, run, 1800) for dag, run in runs}
            assert {dag: r["state"] for dag, r in done.items()} == dict.fromkeys(done, "success"), _errors(network)

            def trainings():  # those the merge's asset event started (not a scheduled run's, from before)
                ours = [
                    r for r in api.runs("train_forecast_model") if dt.datetime.fromisoformat(r["run_after"]) >= started
                ]
                return ours if ours and all(r["state"] in ("success", "failed") for r in ours) else None

            training = api.wait(trainings, 1800)
            assert [(r["run_type"], r["state"]) for r in training] == [("asset_triggered", "success")], training
            ran = [(dag, ti) for dag, run in [*runs, ("train_forecast_model", training[0]["dag_run_id"])]
                   for ti in api.task_instances(dag, run)]  # fmt: skip
            assert {ti["hostname"] for _, ti in ran} <= set(workers) and all(
                ti["state"] == "success" for _, ti in ran
            ), ran
            # a task's log, read through the API server from the log server of the worker that ran it
            dag, ti = next((dag, ti) for dag, ti in ran if ti["task_id"] == "download_published_files")
            run = next(r for d, r in runs if d == dag)
            log = api.call(
                f"/api/v2/dags/{dag}/dagRuns/{quote(run, safe='')}/taskInstances/{ti['task_id']}/logs/1?full_content=true"
            )
            events = [e.get("event", "") for e in log["content"]]
            assert f"http://{ti['hostname']}:{WORKER_LOG_SERVER_PORT}/log/dag_id={dag}/" in " ".join(events), events[:5]
            assert len(events) > 10, events
            # the lake, read from control's network (a process of its own there): each month's trips and
            # weather as published, and the training's forecast the same zone's count a week earlier
            try:
                read = in_network(
                    network.namespace("control"), "team_deployment:lake_as_published",
                    settings_given(control), [str(f) for f in files], str(site), MONTHS, True, env=env,
                )  # fmt: skip
                assert read == sum(pq.ParquetFile(f).metadata.num_rows for f in files) > 0, read  # the files' own count
            except AssertionError as error:  # a file of the lake missing or wrong: all that tells how
                raise AssertionError(f"{error}\n{missing_lake_file_story(network, error)}") from error
        finally:
            server.stop()
    _lineage_arrived_on_control_once(settings, network)
    _the_flows_run_is_read_on_every_host(hosts, f"airflow_dag_run:train_forecast_model/{training[0]['dag_run_id']}")


_RUNS_OF_THE_FLOW = """
import json, os
from nyc_taxi.metaflow_adapter.environment import metaflow_environment
os.environ.update(metaflow_environment())
from metaflow import Flow, namespace
namespace(None)
print(json.dumps([[run.id, sorted(run.tags), run.successful] for run in Flow("TrainForecastModelFlow")]))
"""


def _the_flows_run_is_read_on_every_host(hosts, tag: str) -> None:
    """The training's flow ran on one worker host; Metaflow's client on every host reads the same run,
    successful (Metaflow's home is one directory of the filer, mounted on each host), and no host's own
    directory holds it (it is in the mount, not beside it)."""
    _, env, network, _ = hosts
    seen = {}
    for host in network.layout.hosts:
        command = network.command(host.name, [sys.executable, "-c", _RUNS_OF_THE_FLOW])
        read = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert read.returncode == 0, read.stderr[-3000:]
        seen[host.name] = [(run_id, ok) for run_id, tags, ok in json.loads(read.stdout.splitlines()[-1]) if tag in tags]
    assert len(seen["control"]) == 1 and seen["control"][0][1] is True, seen
    assert all(runs == seen["control"] for runs in seen.values()), seen
    for host in network.layout.hosts:  # under the mount point, as the machine sees it: nothing
        assert not list((network.directory(host.name) / "metaflow").glob("**/TrainForecastModelFlow")), host.name


def _lineage_arrived_on_control_once(settings, network) -> None:
    """Every record of every worker host's lineage files, in control's own files once (each host's shipper
    sends them to the receiver), and control's readers see the tasks that ran on the workers."""
    from team_deployment import wait_for

    from nyc_taxi.deployment.across_hosts import host_settings
    from nyc_taxi.lineage.read.runs import Runs
    from nyc_taxi.lineage.write import delivery
    from nyc_taxi.lineage.write.receiver import stored_path

    control = host_settings(settings, network, "control")

    def plain(records: list[dict]) -> list[dict]:  # but what DataHub's emitter stamps on each send
        return [{k: v for k, v in r.items() if k != "systemMetadata"} for r in records]

    jobs = set()
    for host in (h for h in network.layout.hosts if h.name != "control"):
        own = host_settings(settings, network, host.name)
        left = wait_for(lambda own=own: [p for p in delivery.status(own) if p.shipped < p.total], lambda x: not x, 120)
        assert left == [], left
        for server in (delivery.OpenLineageServer, delivery.DataHubServer):
            for path in server(own).files():
                sent = server(own).read(path)
                stored = stored_path(control, host.name, path.name, delivery.file_head(sent))
                assert plain(server(control).read(stored)) == plain(sent), path
                jobs |= {r["job"]["name"] for r in sent if "job" in r}
    assert len(jobs) > 3 and jobs <= {r.job for r in Runs.read(control)}, jobs
