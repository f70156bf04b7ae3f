"""The team deployment across the hosts of deployment/hosts.toml, run for real on this machine:
`bash run team up --hosts` makes control, worker-a and worker-b network namespaces and runs each host's
programs under its own supervisord, listening on its address; `team status --hosts` asks each program
from control's network; `team down --delete-data` leaves nothing behind.

The suite's lane holds this short check that the layout comes up and answers; what runs on it (DAG runs,
faults across hosts) is not yet built (docs/operations.md#across-hosts)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from team_deployment import team_cli

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
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
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
    import psutil

    from nyc_taxi.deployment.supervisor import MARKER

    left = []
    for process in psutil.process_iter():
        try:
            if str(state) in process.environ().get(MARKER, ""):
                left.append(process.cmdline())
        except psutil.Error:
            continue
    assert left == []
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
    assert set(status) == expected and len(expected) >= 18, status
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
    _, _, network, _ = hosts
    for host in network.layout.hosts:
        listeners = _listeners(network, host.name)
        assert {address for address, _, _ in listeners} <= {host.address, "127.0.0.1"}, (host, listeners)
        facing = {command for address, _, command in listeners if address == host.address}
        if host.name == "control":
            assert {"postgres", "redis-server", "weed", "java"} <= facing, listeners
            assert any(c.startswith("airflow") for c in facing), listeners
        else:
            assert {"weed", "java"} <= facing, listeners


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
    Airflow API, Spark master, SeaweedFS master (gRPC and HTTPS) and S3 gateway, and worker-a's volume
    server and Spark worker, each refuse."""
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
    }
    assert "password authentication failed" in said["postgres"], said
    assert said["redis"].startswith("-NOAUTH"), said
    assert said["airflow"].startswith("401"), said
    assert "Expected SaslMessage" in said["spark master"] and "Expected SaslMessage" in said["spark worker"], said
    assert all("CERTIFICATE_REQUIRED" in said[k] for k in said if k.startswith("seaweedfs")), said
    assert said["s3"].startswith("403") and "AccessDenied" in said["s3"], said


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
    assert seen >= 18
