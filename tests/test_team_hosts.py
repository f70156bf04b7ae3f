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


# The operator's credentials for lineage servers beyond the deployment: a DataHub token and an OpenLineage key
# (no server named with them: nothing sent), the DataHub plugin's connection with its password, and an
# OpenLineage transport with its key in Airflow's settings (both to ports nothing listens on: control's shipper
# keeps their records pending)
DATAHUB_CONNECTION = "AIRFLOW_CONN_DATAHUB_REST_DEFAULT"
THEIR_DATAHUB_CONNECTION = "AIRFLOW_CONN_THEIR_DATAHUB"  # one no `conn_id` names, a DataHub connection by its type
OPERATORS_CREDENTIALS = {
    "DATAHUB_GMS_TOKEN": "dh-operator-" + os.urandom(8).hex(),
    "OPENLINEAGE_API_KEY": "ol-operator",
    **{
        name: json.dumps(
            {"conn_type": "datahub-rest", "host": f"http://127.0.0.1:{free_port()}", "password": os.urandom(8).hex()}
        )
        for name in (DATAHUB_CONNECTION, THEIR_DATAHUB_CONNECTION)
    },
}
OPERATORS_TRANSPORT_KEY = "ol-transport-" + os.urandom(8).hex()
OPERATORS_TRANSPORT = {
    "type": "http",
    "url": f"http://127.0.0.1:{free_port()}",
    "auth": {"type": "api_key", "apiKey": OPERATORS_TRANSPORT_KEY},
}


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """`team up --hosts` under a state directory of its own; after the module, `team down --delete-data`,
    which must leave no namespace, link, address or process behind: (settings, env, network, said)."""
    from nyc_taxi.core.settings import Settings
    from nyc_taxi_proving.deployment.hosts import Network

    state = tmp_path_factory.mktemp("hosts-state")
    # the session's local-profile Airflow settings stay out, and so do the sources' URLs on this machine's
    # loopback, which no host reaches: each host is given its own (settings.env in its state directory)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and not k.endswith("_BASE_URL")}
    env |= {"PROFILE": "team", "STATE_DIR": str(state), "AIRFLOW_PORT": str(free_port()), "SPARK_SERVER": "false"}
    env |= OPERATORS_CREDENTIALS  # the operator's lineage credentials: control's, never a worker's
    env |= {"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(OPERATORS_TRANSPORT)}
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
    from nyc_taxi_proving.deployment import services
    from nyc_taxi_proving.deployment.across_hosts import host_settings

    for host in network.layout.hosts:  # PostgreSQL's data, under its user's home when root, removed too
        assert not services.Postgres(host_settings(settings, network, host.name), {}).directory.exists()


def _status(env, *flags: str) -> dict[tuple[str, str], dict]:
    said = team_cli(env, "status", *flags)
    assert said.returncode == 0, said.stdout + said.stderr
    rows = [line.split() for line in said.stdout.splitlines()[1:] if line.strip()]
    return {(r[0], r[1]): {"state": r[2], "answers": r[3], "pid": int(r[4])} for r in rows if len(r) == 6}


def test_every_program_runs_on_its_host_under_the_hosts_own_supervisord_and_answers(hosts):
    from nyc_taxi_proving.deployment.across_hosts import processes

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


def _command_line(network, host: str, port: int) -> str:
    """The whole command line of the process listening on ``port`` in the host: what an unknown socket is."""
    listed = subprocess.run(
        ["ip", "netns", "exec", network.namespace(host), "ss", "-Hltnp", f"sport = :{port}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pid = re.search(r"pid=(\d+)", listed).group(1)
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


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


def _kinds(record: dict, settings) -> dict[int, str]:
    """Each port of the deployment as the probe that asks it without credentials (``listener_probes.py``)."""
    from nyc_taxi.airflow_adapter.environment import WORKER_LOG_SERVER_PORT

    weed, spark = record["seaweedfs"], record["spark"]
    return {
        record["postgres"]["port"]: "postgres",
        record["redis"]["port"]: "redis",
        settings.airflow_port: "airflow",
        spark["port"]: "spark",
        spark["worker_port"]: "spark",
        weed["master_port"]: "https-master",
        weed["volume_port"]: "https-volume",
        weed["filer_port"]: "https-filer",
        weed["s3_port"]: "s3",
        **{weed[f"{part}_grpc_port"]: "grpc" for part in ("master", "volume", "filer", "s3")},
        record["lineage"]["port"]: "lineage-receiver",
        WORKER_LOG_SERVER_PORT: "log-server",
    }


# what each kind of listener answers a client without the deployment's credentials
REFUSED = {
    "postgres": lambda said: "password authentication failed" in said,  # the role hosts may use, a guess
    "redis": lambda said: said.startswith("-NOAUTH"),
    "airflow": lambda said: said.startswith("401"),
    "spark": lambda said: "network.crypto.AuthRpcHandler" in said,
    "grpc": lambda said: "CERTIFICATE_REQUIRED" in said,
    "https-master": lambda said: "CERTIFICATE_REQUIRED" in said,
    "https-volume": lambda said: "CERTIFICATE_REQUIRED" in said,
    "https-filer": lambda said: "CERTIFICATE_REQUIRED" in said,
    "s3": lambda said: said.startswith("403") and "AccessDenied" in said,
    "log-server": lambda said: said.startswith("403"),  # no token the API server signed
    "lineage-receiver": lambda said: said.startswith("401"),  # no host's token
}


def test_every_socket_any_host_listens_on_refuses_a_client_without_credentials_from_another_host(hosts):
    """Every TCP socket each host listens on (read inside the host: ``ss``), asked from another host's
    network with nothing of the deployment's credentials: each refuses, as its kind does. A socket on a
    host's loopback only is reachable from no other host (Spark's web UIs, which do not authenticate, and the
    loopback twin SeaweedFS opens beside each of its listeners). A
    port the probes do not know fails the test: a new listener is probed, or this test says why not."""
    from nyc_taxi.core import team
    from nyc_taxi.core.processes import read_record
    from nyc_taxi_proving.deployment.across_hosts import host_settings
    from nyc_taxi_proving.deployment.object_storage import ObjectStorage

    settings, _, network, _ = hosts
    record = read_record(team.services_record(settings))
    kinds, said, unprobed = _kinds(record, settings), {}, []
    for host in network.layout.hosts:
        other = next(h.name for h in network.layout.hosts if h.name not in (host.name, "control"))
        ca = str(ObjectStorage(host_settings(settings, network, other), record).authority.certificate)
        for address, port, command in sorted(_listeners(network, host.name)):
            if address == "127.0.0.1":  # SeaweedFS opens a loopback twin beside each of its listeners
                known = (record["spark"]["web_port"], record["spark"]["worker_web_port"], *kinds)
                assert port in known, (host.name, port, command, _command_line(network, host.name, port))
                continue
            if port not in kinds:
                unprobed.append(f"{host.name} {address}:{port} ({command})")
                continue
            reached = host.address if address in ("0.0.0.0", "::") else address
            said[(host.name, port, kinds[port])] = _probe(network, other, kinds[port], reached, port, ca)
    assert unprobed == [], unprobed
    refused = {key: answer for key, answer in said.items() if REFUSED[key[2]](answer)}
    assert said == refused, {k: v for k, v in said.items() if k not in refused}
    assert {kind for _, _, kind in said} == set(REFUSED), said  # every kind of listener was asked
    assert len(said) >= 14, said


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


def test_from_a_worker_host_no_postgresql_connection_is_a_superuser_or_reaches_airflows_database(hosts):
    """With every file worker-a holds (its record: the Iceberg catalog's role), from its network: the catalog's
    database lets that role in, which is no superuser, creates no role or database and owns only the
    catalog's database; Airflow's database refuses it, and nothing on the host is a credential of Airflow's
    role or of the superuser (no URL file of Airflow's database either). Control holds Airflow's role, and
    the superuser is PostgreSQL's own host's alone."""
    from nyc_taxi.core import team
    from nyc_taxi.core.processes import read_record

    settings, _, network, _ = hosts
    vault = read_record(team.services_record(settings))
    own = network.directory("worker-a")
    given = read_record(own / "team" / "services.json")
    assert set(given["postgres"]["roles"]) == {"lakehouse"} and "password" not in given["postgres"], given["postgres"]
    control = read_record(network.directory("control") / "team" / "services.json")
    assert set(control["postgres"]["roles"]) == {"airflow", "lakehouse"} and "password" in control["postgres"]
    secrets = [vault["postgres"]["password"], vault["postgres"]["roles"]["airflow"]]
    texts = [p.read_bytes().decode(errors="replace") for p in own.rglob("*") if p.is_file()]
    assert not [secret for secret in secrets for text in texts if secret in text]
    assert not (own / "team" / "airflow-database.url").exists()
    probe = (
        "import json, psycopg2\nfrom nyc_taxi.core import team\nfrom nyc_taxi.core.settings import Settings\n"
        "c = team.Postgres(Settings(profile='team')).connection('lakehouse')\nsaid = {}\n"
        "for database in ('lakehouse', 'airflow', 'postgres'):\n"
        "    try:\n"
        "        db = psycopg2.connect(host=c['host'], port=c['port'], user=c['user'], password=c['password'],"
        " dbname=database, connect_timeout=5)\n"
        "        cur = db.cursor()\n"
        "        cur.execute('SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user')\n"
        "        said[database] = list(cur.fetchone())\n"
        "        cur.execute('SELECT datname FROM pg_database WHERE pg_get_userbyid(datdba) = current_user')\n"
        "        said[database] += [r[0] for r in cur.fetchall()]\n"
        "    except psycopg2.OperationalError as error:\n"
        "        said[database] = str(error).strip().splitlines()[0]\n"
        "print(json.dumps(said))"
    )
    ran = subprocess.run(network.command("worker-a", [sys.executable, "-c", probe]), capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-3000:]
    said = json.loads(ran.stdout.strip().splitlines()[-1])
    assert said["lakehouse"] == [False, False, False, "lakehouse"], said
    assert "no pg_hba.conf entry" in said["airflow"] and "no pg_hba.conf entry" in said["postgres"], said


def test_a_worker_host_sees_no_postgresql_socket_or_data_of_controls(hosts):
    """PostgreSQL runs on control (as root: as Debian's postgres user, its data and socket under that user's
    home): in each worker's mount namespace that home is an empty, read-only directory, so no path around the
    network reaches control's PostgreSQL; on control it holds the cluster."""
    import pwd

    _, _, network, _ = hosts
    home = pwd.getpwnam("postgres").pw_dir
    listing = f"import os; print(sorted(os.listdir({home!r})))"
    seen = {
        host: subprocess.run(network.command(host, [sys.executable, "-c", listing]), capture_output=True, text=True)
        for host in ("worker-a", "worker-b", "control")
    }
    for worker in ("worker-a", "worker-b"):
        assert seen[worker].returncode == 0 and seen[worker].stdout.strip() == "[]", seen[worker]
        sockets = subprocess.run(
            network.command(worker, ["sh", "-c", f"find {home} /tmp -name '.s.PGSQL.*' 2>/dev/null; true"]),
            capture_output=True,
            text=True,
        )
        assert sockets.stdout.strip() == "", (worker, sockets.stdout)
    assert "nyc-taxi" in seen["control"].stdout, seen["control"]


def test_a_worker_host_holds_no_lineage_credential_of_the_operators_and_no_other_hosts_shared_memory(hosts):
    """The operator's DataHub token and OpenLineage keys reach control's programs (its shipper sends on with
    them) and no worker's: not in the environment of a worker's programs, nor in a file of its state
    directory. Each host's /dev/shm is its own: a file the machine's holds is seen by no host."""
    _, env, network, _ = hosts
    status = _status(env, "--hosts")

    def environment_of(host: str, program: str) -> str:
        return Path(f"/proc/{status[(host, program)]['pid']}/environ").read_bytes().decode(errors="replace")

    control = environment_of("control", "lineage-shipper")
    assert all(value in control for value in OPERATORS_CREDENTIALS.values())
    # nor through control's API server, whose execution API hands any connection it reads to any task's token
    for connection in (DATAHUB_CONNECTION, THEIR_DATAHUB_CONNECTION):
        assert f"{connection}=" in environment_of("control", "airflow-scheduler")
        assert f"{connection}=" not in environment_of("control", "airflow-api-server")
    secrets = [*OPERATORS_CREDENTIALS.values(), OPERATORS_TRANSPORT_KEY]
    workers = sorted({host for host, _ in status if host != "control"})
    assert workers == ["worker-a", "worker-b"]
    for host, program in ((h, p) for h, p in status if h in workers):
        held = environment_of(host, program)
        assert [v for v in secrets if v in held] == [], (host, program)

    def files_holding(host: str) -> list[str]:  # nor in a file of the host's own (its mounts and data aside)
        found = []
        for top, directories, names in os.walk(network.directory(host)):
            directories[:] = [d for d in directories if not os.path.ismount(os.path.join(top, d))]
            for path in (Path(top) / n for n in names):
                if path.is_file() and not path.is_symlink() and path.stat().st_size < 1_000_000:
                    found += [str(path)] if any(v.encode() in path.read_bytes() for v in secrets) else []
        return found

    # the transport of the operator's Airflow settings is handed on to control's programs alone
    assert [path for host in workers for path in files_holding(host)] == []
    assert any(p.endswith("airflow-openlineage-transport.json") for p in files_holding("control"))
    marker = Path("/dev/shm") / f"nyc-taxi-machine-{os.getpid()}"
    marker.write_text("the machine's")
    try:
        for host in ("control", *workers):
            seen = subprocess.run(network.command(host, ["ls", "-a", "/dev/shm"]), capture_output=True, text=True)
            assert seen.returncode == 0 and marker.name not in seen.stdout, (host, seen.stdout, seen.stderr)
    finally:
        marker.unlink()


def _certificate_name(path: Path) -> str:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    certificate = x509.load_pem_x509_certificate(path.read_bytes())
    return certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


def test_each_host_holds_a_certificate_of_its_own_and_a_volume_server_lets_in_only_the_hosts_that_need_it(hosts):
    """Each host's SeaweedFS certificate is its own (its own key, its host's name); worker-b's, presented to
    worker-a's volume server over gRPC, is refused (only control's programs talk to a volume server there),
    and control's is let in."""
    settings, _, network, _ = hosts
    tls = {h.name: network.directory(h.name) / "team" / "seaweedfs" / "tls" for h in network.layout.hosts}
    assert {h: _certificate_name(d / "seaweedfs.crt") for h, d in tls.items()} == {h: h for h in tls}
    assert len({(d / "seaweedfs.key").read_bytes() for d in tls.values()}) == len(tls)
    from nyc_taxi.core import team
    from nyc_taxi.core.processes import read_record

    record = read_record(team.services_record(settings))
    worker, port = network.layout.host("worker-a").address, record["seaweedfs"]["volume_grpc_port"]
    ca = str(tls["worker-b"] / "ca.crt")
    refused = _probe(network, "worker-b", "with-certificate-grpc", worker, port, ca, str(tls["worker-b"]))
    let_in = _probe(network, "control", "with-certificate-grpc", worker, port, ca, str(tls["control"]))
    assert refused.startswith("refused") or refused.endswith(": 0 bytes"), refused  # the handshake, or hung up on
    assert let_in.startswith("spoke h2") and not let_in.endswith(": 0 bytes"), let_in


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
    from nyc_taxi_proving.deployment.across_hosts import host_settings

    settings, env, network, _ = hosts
    done = subprocess.run(
        [sys.executable, "-m", "nyc_taxi_proving.cli.demo", "--hosts"],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
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
    from nyc_taxi_proving.deployment.across_hosts import host_settings

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
    from nyc_taxi.core.settings import state_settings_file
    from nyc_taxi_proving.chaos import mission
    from nyc_taxi_proving.deployment.across_hosts import host_settings
    from nyc_taxi_proving.fixtures.server import FixtureServer

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

    from nyc_taxi.lineage.read.runs import Runs
    from nyc_taxi.lineage.write import delivery
    from nyc_taxi.lineage.write.receiver import stored_path
    from nyc_taxi_proving.deployment.across_hosts import host_settings

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


@pytest.mark.system
def test_a_certificate_taken_from_a_host_is_refused_everywhere_once_a_new_authority_is_made(hosts, tmp_path):
    """worker-a's certificate and key, as an attacker on it would take them; `team new-authority --hosts`
    (the documented revocation: a new authority, every host a new certificate): the taken one is refused by
    the master, the filer and the volume servers, over gRPC and HTTPS, while worker-a's new one is let in and
    every program answers again. Last in the module: the deployment goes on with the new authority."""
    from nyc_taxi.core import team
    from nyc_taxi.core.processes import read_record

    settings, env, network, _ = hosts
    tls = network.directory("worker-a") / "team" / "seaweedfs" / "tls"
    taken = tmp_path / "taken"
    shutil.copytree(tls, taken)
    rotated = team_cli(env, "new-authority", "--hosts")
    assert rotated.returncode == 0, rotated.stdout + rotated.stderr
    assert (tls / "ca.crt").read_bytes() != (taken / "ca.crt").read_bytes()
    record = read_record(team.services_record(settings))
    weed, control, worker_b = (
        record["seaweedfs"],
        network.layout.host("control").address,
        network.layout.host("worker-b").address,
    )
    ca = str(tls / "ca.crt")  # the servers' new authority: what is checked is the client's certificate
    asked = {
        "master grpc": ("grpc", control, weed["master_grpc_port"]),
        "master https": ("https-master", control, weed["master_port"]),
        "filer grpc": ("grpc", control, weed["filer_grpc_port"]),
        "filer https": ("https-filer", control, weed["filer_port"]),
        "volume https": ("https-volume", worker_b, weed["volume_port"]),
        "volume grpc (from control's new one)": ("grpc", worker_b, weed["volume_grpc_port"]),
    }
    old = {
        name: _probe(network, "worker-a", f"with-certificate-{kind}", address, port, ca, str(taken))
        for name, (kind, address, port) in asked.items()
        if not name.startswith("volume grpc")
    }
    assert all(said.startswith("refused") or said.endswith(": 0 bytes") for said in old.values()), old
    control_tls = network.directory("control") / "team" / "seaweedfs" / "tls"
    new = {
        name: _probe(
            network,
            "worker-a" if "control" not in name else "control",
            f"with-certificate-{kind}",
            address,
            port,
            ca,
            str(tls if "control" not in name else control_tls),
        )
        for name, (kind, address, port) in asked.items()
    }
    assert all(said == "200" or said.startswith("spoke h2") for said in new.values()), new
    status = _status(env, "--hosts")
    assert all(p["state"] == "RUNNING" and p["answers"] == "yes" for p in status.values()), status
