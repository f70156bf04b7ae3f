"""`bash run team up --hosts`, `team status --hosts`, `team down`: the programs of ``supervisord.conf`` on
the hosts of ``hosts.toml`` (``hosts.py`` makes them network namespaces of this machine), each host with
its own supervisord, its own state directory and the configuration it is given.

- **What a host is given** (the deployment's operator writes it into ``<state>/hosts/<host>/``, 0600):
  the record of ports and of the secrets its programs use (``SECRETS_OF``), with the address of every
  program (a program on several hosts: this host's own where it runs here) and the host's own name and
  address; its SeaweedFS certificate and
  key (the authority's key stays with the operator, in ``<state>/team/``); its programs' files
  (``security.toml``, Spark's ``cluster.conf``, Redis's configuration) and the URL files Airflow reads;
  Airflow's secrets its programs there use, the same on every host.
  A host's programs find nothing of another host's directory, nor of the operator's, at its path (a
  root process that goes looking through /proc still can: there is no PID namespace).
- **Its supervisord** runs in the host's namespaces (``Network.command``) with ``supervisord.conf`` and
  the host's values: every program listens on the host's address (``HOST_ADDRESS``) and reaches the
  others at theirs (``ADDRESS_<PROGRAM>``). Spark's web UIs stay on the host's 127.0.0.1.
- **The operator** (`team up --hosts` itself) runs in control's network namespace, with the machine's
  files: from there it reaches every host by address, as a machine of the team's network would, and
  drives each supervisord through its Unix socket. Services start in order as on one machine, each
  once every program of the one before answers, on every host that runs it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys

from nyc_taxi.core import team
from nyc_taxi.core.processes import ServiceError, machine_lock, read_record, write_private
from nyc_taxi.core.settings import Settings
from nyc_taxi_proving.deployment.hosts import Host, Network
from nyc_taxi_proving.deployment.object_storage import SEAWEEDFS_CERTIFICATE, ObjectStorage
from nyc_taxi_proving.deployment.postgres import Postgres
from nyc_taxi_proving.deployment.service import wait_until
from nyc_taxi_proving.deployment.supervisor import Supervisor, program_sections

CONTROL = "control"  # the host of the operator's network and of the services every other host uses
OPERATOR = "NYC_TAXI_HOSTS_OPERATOR"  # set in the operator's process once it runs in control's network namespace


def processes(host: Host) -> list[str]:
    """supervisord's names of the host's programs (a program: each of its processes; or a process by name)."""
    return [name for name, section in program_sections().items() if section in host.programs or name in host.programs]


def host_settings(settings: Settings, network: Network, host: str) -> Settings:
    """A host's own settings: its state directory is its whole state."""
    return settings.model_copy(update={"state_dir": network.directory(host)})


# The secrets only some programs use (a path in the record), and those programs: a host running none of
# them is not given it. The rest (the Iceberg catalog's role, Redis's password, the S3 key pair, Spark's
# secret) every host's tasks or programs use: the catalog is in PostgreSQL, Celery's broker and results are
# in Redis, tasks write the lake and run Spark drivers. PostgreSQL's superuser is its own host's alone, and
# Airflow's database's role is the hosts' that run Airflow's components (no Celery worker needs it: its tasks
# report to the API server).
AIRFLOW_CONTROL = ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
SECRETS_OF = {
    ("postgres", "password"): ("postgres",),
    ("postgres", "roles", "airflow"): AIRFLOW_CONTROL,
    ("airflow", "jwt_secret"): AIRFLOW_CONTROL,  # the scheduler signs tasks' tokens, the API server checks them
    ("airflow", "fernet_key"): AIRFLOW_CONTROL,  # connections and variables in the metadata database
    # task-log requests: every Airflow process of supervisord.conf
    ("airflow", "secret_key"): tuple(name for name in program_sections() if name.startswith("airflow-")),
    ("seaweedfs", "jwt_volume_write_key"): ("seaweedfs-master", "seaweedfs-volume", "seaweedfs-filer"),
    ("seaweedfs", "jwt_filer_write_key"): ("seaweedfs-filer", "seaweedfs-s3"),
    ("seaweedfs", "jwt_filer_read_key"): ("seaweedfs-filer", "seaweedfs-s3"),
}


def given_record(record: dict, network: Network, host: Host) -> dict:
    """What ``host`` is given of the deployment's record: the ports, the secrets its programs use (not
    those only others use: ``SECRETS_OF``; of the lineage tokens, its own, or all on the receiver's host), where each program runs (its own programs on itself), and
    the host's own name and address."""
    addresses, names = {}, {}
    for other in sorted(network.layout.hosts, key=lambda h: h.name == host.name):  # its own last: they win
        for name in processes(other):
            addresses[name], names[name] = other.address, other.name
    kept = json.loads(
        json.dumps({k: v for k, v in record.items() if k not in ("addresses", "hosts", "runs_on", "host", "network")})
    )
    own = set(processes(host))
    for (*where, secret), users in SECRETS_OF.items():
        if not own & set(users):
            part = kept
            for key in where:
                part = part.get(key, {})
            part.pop(secret, None)
    if "lineage-receiver" not in own and "tokens" in kept.get(
        "lineage", {}
    ):  # a host's own token; all on the receiver's
        kept["lineage"]["tokens"] = {n: t for n, t in kept["lineage"]["tokens"].items() if n == host.name}
    itself = {"name": host.name, "address": host.address}
    runs_on = {name: sorted(h.name for h in network.layout.hosts if name in processes(h)) for name in names}
    placed = {"addresses": addresses, "hosts": names, "runs_on": runs_on, "host": itself}
    return kept | placed | {"network": str(network.layout.network())}


def in_control(
    settings: Settings, argv: list[str], make: bool = True, module: str = "nyc_taxi_proving.cli.team"
) -> int | None:
    """Run this command (``module`` with ``argv``) again as the operator, in control's network namespace
    (with the machine's files), after making the hosts (``make``; else they must be there); None when this
    process already is the operator."""
    if os.environ.get(OPERATOR):
        return None
    network = Network(settings)
    if make:
        with machine_lock("team-up", "waiting for another deployment's `team up` on this machine to finish"):
            network.up()
    elif network.namespace(CONTROL) not in network.namespaces():
        raise ServiceError("the hosts layout is not up: bash run team up --hosts")
    control = network.namespace(network.layout.host(CONTROL).name)
    command = ["ip", "netns", "exec", control, sys.executable, "-m", module, *argv]
    return subprocess.run(command, env={**os.environ, OPERATOR: "1"}).returncode


def up(settings: Settings) -> list[str]:
    """Every service, in order, on every host that runs one of its programs, each once all answer."""
    from nyc_taxi_proving.deployment import services

    network = Network(settings)
    with machine_lock("team-up", "waiting for another deployment's `team up` on this machine to finish"):
        said = [f"hosts: {line}" for line in network.up()]
        said.append(services.drivers_class_archive(settings))  # in the environment every host runs from
        started = running(settings)
        orphaned = [
            h.name
            for h in network.layout.hosts
            if Postgres(host_settings(settings, network, h.name), {}).orphaned_data()
        ]
        if orphaned and not team.services_record(settings).is_file():
            raise ServiceError(
                f"{', '.join(orphaned)} holds a PostgreSQL cluster but {team.services_record(settings)} is gone (the "
                f"state directory was removed, its PostgreSQL data was not): STATE_DIR={settings.state_dir} bash run "
                "team down --delete-data removes that data"
            )
        record = services._record(settings, started)
        tokens = record["lineage"].setdefault("tokens", {})  # each host's, to ship its lineage to control
        for host in network.layout.hosts:
            tokens.setdefault(host.name, secrets.token_urlsafe(32))
        write_private(team.services_record(settings), record)
        hosts = [(host, host_settings(settings, network, host.name)) for host in network.layout.hosts]
        authority = ObjectStorage(settings, record).authority
        for host, own in hosts:
            write_private(team.services_record(own), given_record(record, network, host))
            if any(p.startswith("seaweedfs-") or p == "metaflow-metadata" for p in host.programs):
                tls = ObjectStorage(own, record).authority.directory  # the host's own, named by it
                addresses = sorted({team.LOOPBACK, host.address})
                authority.issue(SEAWEEDFS_CERTIFICATE, addresses, into=tls, common_name=host.name)
        said += _start(settings, network, hosts)
    return said


def _start(settings: Settings, network: Network, hosts: list, only: str | None = None) -> list[str]:
    """Each host's supervisord (``only``: that host's alone), then every service in order on the hosts
    that run it, each once all its programs answer; what runs where."""
    from nyc_taxi_proving.deployment import services

    said = []
    for host, own in hosts:
        supervisor = Supervisor(own)
        if not supervisor.running() and only in (None, host.name):
            supervisor.start(
                services.environment(own, read_record(team.services_record(own))),
                wrap=lambda argv, name=host.name: network.command(name, argv),
            )
    for service in services.SERVICES:
        placed = [(h, own, [p for p in processes(h) if p in service.programs]) for h, own in hosts]
        placed = [(h, own, names) for h, own, names in placed if names]
        first = service(hosts[0][1], read_record(team.services_record(hosts[0][1])))
        if first.given:
            raise ServiceError(f"{service.name} given ({service.given_by}): the hosts layout runs every service")
        starting = [(h, own, names) for h, own, names in placed if only in (None, h.name)]
        for h, own, names in starting:
            on_host = service(own, read_record(team.services_record(own)))
            on_host.prepare_on(first_host=h is placed[0][0])
            Supervisor(own).start_programs(names)
        for h, own, names in starting:
            on_host = service(own, read_record(team.services_record(own)))
            wait_until(
                lambda s=on_host, n=names: all(s.answers(p) for p in n),
                180,
                f"{service.name} on {h.name}",
                services.logs_dir(own) / f"{names[-1]}.log",
            )
        for h, own in hosts:  # what every host's clients read: URL files, credentials
            if only in (None, h.name):
                service(own, read_record(team.services_record(own))).after()
        if starting:
            said.append(
                f"{service.name}: " + "; ".join(f"{', '.join(n)} on {h.name} ({h.address})" for h, _, n in starting)
            )
    return said


def new_authority(settings: Settings) -> list[str]:
    """Every SeaweedFS certificate the deployment's authority issued revoked: every host's supervisord
    stopped (its programs read their certificates when they start; the hosts stay), the authority and every
    host's certificate removed, then `up` again, which makes a new authority and issues each host a new
    certificate. A certificate
    taken from a host is refused from then on by every listener that asks for one (gRPC and HTTPS alike:
    SeaweedFS keeps no revocation list). The data stays."""

    network, said = Network(settings), []
    for host in sorted(network.layout.hosts, key=lambda h: h.name == CONTROL):  # as `down` stops them
        supervisor = Supervisor(host_settings(settings, network, host.name))
        if supervisor.running():
            supervisor.stop()
            said.append(f"{host.name}: stopped (every program, then supervisord)")
    directories = [ObjectStorage(settings, {}).authority.directory]
    directories += [
        ObjectStorage(host_settings(settings, network, h.name), {}).authority.directory for h in network.layout.hosts
    ]
    for directory in directories:
        if directory.exists():
            shutil.rmtree(directory)
            said.append(f"removed {directory}")
    return said + up(settings)


def boot(settings: Settings, host: str) -> list[str]:
    """A host that was lost (every process killed, its disk kept) started again as `up` starts it: its
    supervisord, then its programs service by service, each once it answers; the other hosts as they are."""
    network = Network(settings)
    network.layout.host(host)
    hosts = [(h, host_settings(settings, network, h.name)) for h in network.layout.hosts]
    return _start(settings, network, hosts, only=host)


def running(settings: Settings) -> bool:
    """Whether a host's supervisord runs (by its socket: no namespace is entered or made)."""
    network = Network(settings)
    return any(Supervisor(host_settings(settings, network, h.name)).running() for h in network.layout.hosts)


def status(settings: Settings) -> list[str]:
    """Each host's programs: state, whether it answers (asked from control's network), pid, uptime."""
    from nyc_taxi_proving.deployment import services

    network = Network(settings)
    lines = [f"{'host':<10}{'program':<24}{'state':<10}{'answers':<9}{'pid':>8}{'uptime':>10}"]
    for host in network.layout.hosts:
        own = host_settings(settings, network, host.name)
        supervisor = Supervisor(own)
        if not supervisor.running():
            lines.append(f"{host.name:<10}{'(supervisord)':<24}{'down':<10}")
            continue
        infos = {p["name"]: p for p in supervisor.programs()}
        for name in processes(host):
            info = infos.get(name, {})
            running = info.get("statename") == "RUNNING"
            answers = ("yes" if services.answering(own, name) else "no") if running else "-"
            uptime = info["now"] - info["start"] if running else 0
            clock = f"{uptime // 3600}:{uptime % 3600 // 60:02d}:{uptime % 60:02d}" if uptime else "-"
            lines.append(
                f"{host.name:<10}{name:<24}{info.get('statename', '?'):<10}{answers:<9}{info.get('pid') or '-':>8}{clock:>10}"
            )
    return lines


def down(settings: Settings, delete_data: bool = False) -> list[str]:
    """The whole deployment down, on the hosts and on this machine: each host's supervisord stopped (its
    programs in reverse order, PostgreSQL with its fast shutdown), then this machine's deployment and
    whatever still runs in the hosts (killed, their namespaces removed); with ``delete_data``, every
    host's data and directory too."""
    from nyc_taxi_proving.deployment import services

    network, said = Network(settings), []
    for host in sorted(network.layout.hosts, key=lambda h: h.name == CONTROL):  # workers' tasks first, control last
        supervisor = Supervisor(host_settings(settings, network, host.name))
        if supervisor.running():
            supervisor.stop()
            said.append(f"{host.name}: stopped (every program, then supervisord)")
    said += services.down(settings, delete_data)
    if delete_data:
        for path in data_directories(settings):
            if path.exists():
                shutil.rmtree(path)
                said.append(f"removed {path}")
        for host in network.layout.hosts:
            shutil.rmtree(network.directory(host.name), ignore_errors=True)
    return said


def data_directories(settings: Settings) -> list:
    """Where the deployment's services keep their data, on this machine and on every host (PostgreSQL's,
    as root, outside the state directory)."""
    from nyc_taxi_proving.deployment import services

    network = Network(settings)
    own = [host_settings(settings, network, host.name) for host in network.layout.hosts]
    return [path for each in (settings, *own) for path in services.data_directories(each)]
