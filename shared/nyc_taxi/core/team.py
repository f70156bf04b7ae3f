"""The team profile's services on this machine: PostgreSQL (Airflow's metadata database, Celery's
results and the Iceberg JDBC catalog), Redis (the Celery executor's broker) and a Spark standalone
cluster (a master and a worker), each from its package (Debian's PostgreSQL and Redis, pyspark's own
``spark-class``), listening on 127.0.0.1 only. Airflow's own processes are the Airflow adapter's
(``nyc_taxi.airflow_adapter.deployment``).

What a service needs to be found is recorded under ``<state>/team/`` (mode 0600: the passwords are
generated at first start and are never printed or logged). A team that runs its own gives
``POSTGRES_URL``, ``REDIS_URL`` or ``SPARK_MASTER`` instead, and ``up`` starts only what is not given.

PostgreSQL refuses to run as root. As root, the server runs as Debian's ``postgres`` user with its data
under that user's home (a tree under a 0700 home such as /root is not reachable for it).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from nyc_taxi.core.processes import (
    ServiceError,
    alive,
    free_port,
    listening,
    read_record,
    spawn,
    stop_process,
    wait_until,
    write_private,
    write_private_text,
)
from nyc_taxi.core.settings import Settings

POSTGRES_JDBC_JAR = Path("/usr/share/java/postgresql.jar")
POSTGRES_USER = "nyc_taxi"
DATABASES = ("airflow", "lakehouse")  # Airflow's metadata; the Iceberg catalog
WORKER_CORES, WORKER_MEMORY = 4, "6g"  # more cores than the machine: JVM threads wait on I/O and locks too


def team_dir(settings: Settings) -> Path:
    return settings.state_dir / "team"


def _port_again(record: dict | None) -> int:
    """The port a service had, if it is free: what already runs (Airflow's components, a task) finds it
    where it was when it comes back; else a free one."""
    port = (record or {}).get("port")
    return port if port and not listening(port) else free_port()


def _serving(record: dict | None) -> bool:
    """Whether the one-process service a record names runs and listens."""
    return bool(record) and alive(record.get("pid", 0)) and listening(record["port"])


# ---- PostgreSQL -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Postgres:
    settings: Settings

    @property
    def record(self) -> Path:
        return team_dir(self.settings) / "postgres.json"

    @property
    def given(self) -> bool:
        return self.settings.postgres_url is not None

    def _connection(self) -> dict:
        """host, port, user, password of the server (a given one's or the one `up` started)."""
        if self.given:
            url = urlsplit(self.settings.postgres_url.get_secret_value())
            return {"host": url.hostname, "port": url.port or 5432, "user": url.username, "password": url.password}
        record = read_record(self.record)
        if record is None:
            raise ServiceError("the team profile's PostgreSQL is not up: run `bash run team up`")
        return record

    @property
    def airflow_url_file(self) -> Path:
        """Airflow's metadata database URL, for Airflow's ``sql_alchemy_conn_cmd`` (mode 0600)."""
        return team_dir(self.settings) / "airflow-database.url"

    @property
    def celery_results_url_file(self) -> Path:
        """Where the Celery executor keeps its task results (Airflow's database), for ``result_backend_cmd``."""
        return team_dir(self.settings) / "celery-results.url"

    def _write_airflow_url(self) -> None:
        write_private_text(self.airflow_url_file, self.url("airflow"))
        write_private_text(self.celery_results_url_file, "db+" + self.url("airflow"))

    def url(self, database: str) -> str:
        """SQLAlchemy's URL of a database (psycopg2), password included: never print it."""
        c = self._connection()
        return f"postgresql+psycopg2://{quote(c['user'])}:{quote(c['password'])}@{c['host']}:{c['port']}/{database}"

    def jdbc(self, database: str) -> tuple[str, str, str]:
        """(JDBC URL, user, password) of a database."""
        c = self._connection()
        return f"jdbc:postgresql://{c['host']}:{c['port']}/{database}", c["user"], c["password"]

    # -- the server this project starts --
    @property
    def _as_postgres(self) -> bool:
        return os.geteuid() == 0

    @property
    def data_dir(self) -> Path:
        if self._as_postgres:
            import pwd

            home = Path(pwd.getpwnam("postgres").pw_dir)
            key = hashlib.sha256(str(self.settings.state_dir.resolve()).encode()).hexdigest()[:12]
            return home / "nyc-taxi" / key
        return team_dir(self.settings) / "postgres"

    def _bin(self, name: str) -> str:
        found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parts[-3]))
        if found:
            return str(found[-1])
        if shutil.which(name):
            return shutil.which(name)
        raise ServiceError(f"PostgreSQL's {name} is missing: install Debian's postgresql (bash run setup does)")

    def _run(self, *command: str, **kwargs) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", "postgres", "--"] if self._as_postgres else []
        return subprocess.run([*prefix, *command], capture_output=True, text=True, **kwargs)

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess:
        return self._run(self._bin("pg_ctl"), "-D", str(self.data_dir / "data"), *args)

    def running(self) -> bool:
        return (self.data_dir / "data" / "postmaster.pid").is_file() and self._pg_ctl("status").returncode == 0

    def up(self) -> str:
        team_dir(self.settings).mkdir(parents=True, exist_ok=True)
        if self.given:
            self._check()
            self._write_airflow_url()
            return "PostgreSQL: given (POSTGRES_URL)"
        record = read_record(self.record)
        if record and self.running():
            self._write_airflow_url()
            return f"PostgreSQL: running on 127.0.0.1:{record['port']}"
        fresh = not (self.data_dir / "data" / "PG_VERSION").is_file()
        if fresh:
            record = {"host": "127.0.0.1", "user": POSTGRES_USER, "password": secrets.token_urlsafe(24)}
            self._initdb(record)
        elif record is None:
            raise ServiceError(
                f"{self.data_dir} holds a PostgreSQL cluster but {self.record} is gone (the state directory was "
                f"removed, its PostgreSQL data was not): STATE_DIR={self.settings.state_dir} bash run team down "
                "--delete-data removes that data"
            )
        record["port"] = _port_again(record)
        write_private(self.record, record)
        log = self.data_dir / "server.log"
        options = f"-c listen_addresses=127.0.0.1 -p {record['port']} -k {self.data_dir}"
        started = self._pg_ctl("-o", options, "-l", str(log), "-w", "-t", "60", "start")
        if started.returncode != 0:
            raise ServiceError(f"PostgreSQL did not start: {started.stderr.strip()} {self._tail(log)}")
        if fresh:
            self._create_databases()
        self._check()
        self._write_airflow_url()
        return f"PostgreSQL: started on 127.0.0.1:{record['port']} (data {self.data_dir / 'data'})"

    def _tail(self, log: Path) -> str:
        result = self._run("tail", "-n", "20", str(log))
        return result.stdout.strip()

    def _initdb(self, record: dict) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._as_postgres:
            shutil.chown(self.data_dir, "postgres", "postgres")
            shutil.chown(self.data_dir.parent, "postgres", "postgres")
        self.data_dir.chmod(0o700)
        password_file = self.data_dir / ".password"
        fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(record["password"])
        if self._as_postgres:
            shutil.chown(password_file, "postgres", "postgres")
        try:
            created = self._run(
                self._bin("initdb"),
                "-D",
                str(self.data_dir / "data"),
                "-U",
                record["user"],
                "-A",
                "scram-sha-256",
                f"--pwfile={password_file}",
                "-E",
                "UTF8",
                "--locale=C",
            )
        finally:
            password_file.unlink(missing_ok=True)
        if created.returncode != 0:
            raise ServiceError(f"initdb failed: {created.stderr.strip()[-2000:]}")

    def _connect(self, database: str = "postgres"):
        import psycopg2

        c = self._connection()
        return psycopg2.connect(
            host=c["host"], port=c["port"], user=c["user"], password=c["password"], dbname=database, connect_timeout=5
        )

    def has_table(self, database: str, table: str) -> bool:
        db = self._connect(database)
        try:
            with db.cursor() as cursor:
                cursor.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
                return bool(cursor.fetchone()[0])
        finally:
            db.close()

    def _create_databases(self) -> None:
        db = self._connect()
        db.autocommit = True
        with db.cursor() as cursor:
            for name in DATABASES:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cursor.fetchone() is None:
                    cursor.execute(f'CREATE DATABASE "{name}"')
        db.close()

    def _check(self) -> None:
        try:
            self._connect().close()
        except Exception as error:
            raise ServiceError(f"PostgreSQL does not answer: {str(error).strip().splitlines()[0]}") from None
        if self.given:
            self._create_databases()

    def down(self, delete_data: bool = False) -> str:
        if self.given:
            return "PostgreSQL: given (left running)"
        said = "PostgreSQL: not running"
        if self.running():
            self._pg_ctl("-m", "fast", "-w", "stop")
            said = "PostgreSQL: stopped"
        if delete_data and self.data_dir.exists():
            shutil.rmtree(self.data_dir)
            self.record.unlink(missing_ok=True)
            said += f"; removed {self.data_dir}"
        return said

    def status(self) -> str:
        if self.given:
            return "PostgreSQL: given (POSTGRES_URL)"
        record = read_record(self.record)
        return f"PostgreSQL: running on 127.0.0.1:{record['port']}" if record and self.running() else "PostgreSQL: down"


# ---- Redis (the Celery executor's broker) ------------------------------------------------------------


@dataclass(frozen=True)
class Redis:
    settings: Settings

    @property
    def directory(self) -> Path:
        return team_dir(self.settings) / "redis"

    @property
    def record(self) -> Path:
        return team_dir(self.settings) / "redis.json"

    @property
    def given(self) -> bool:
        return self.settings.redis_url is not None

    @property
    def broker_url_file(self) -> Path:
        """The broker's URL, password included, for Airflow's ``broker_url_cmd`` (mode 0600)."""
        return team_dir(self.settings) / "celery-broker.url"

    def url(self) -> str:
        if self.given:
            return self.settings.redis_url.get_secret_value()
        record = read_record(self.record)
        if record is None:
            raise ServiceError("the team profile's Redis is not up: run `bash run team up`")
        return f"redis://:{quote(record['password'])}@127.0.0.1:{record['port']}/0"

    def up(self) -> str:
        team_dir(self.settings).mkdir(parents=True, exist_ok=True)
        if self.given:
            write_private_text(self.broker_url_file, self.url())
            return "Redis: given (REDIS_URL)"
        record = read_record(self.record)
        if _serving(record):
            return f"Redis: running on 127.0.0.1:{record['port']}"
        server = shutil.which("redis-server")
        if not server:
            raise ServiceError("redis-server is missing: install Debian's redis-server (bash run setup does)")
        record = {"port": _port_again(record), "password": (record or {}).get("password") or secrets.token_urlsafe(24)}
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "redis.conf"  # the password in a 0600 file, not on a command line
        write_private_text(
            config,
            f"bind 127.0.0.1\nport {record['port']}\nrequirepass {record['password']}\ndir {self.directory}\n"
            f'logfile {self.directory / "redis.log"}\nprotected-mode yes\nsave ""\nappendonly no\n',
        )
        pid = spawn([server, str(config)], dict(os.environ), self.directory / "redis.out")
        record["pid"] = pid
        write_private(self.record, record)
        wait_until(lambda: listening(record["port"]) or not alive(pid), 30, "Redis", self.directory / "redis.log")
        if not alive(pid):
            raise ServiceError(f"Redis exited: {(self.directory / 'redis.log').read_text()[-2000:]}")
        write_private_text(self.broker_url_file, self.url())
        return f"Redis: started on 127.0.0.1:{record['port']}"

    def down(self) -> str:
        if self.given:
            return "Redis: given (left running)"
        record = read_record(self.record)
        if not _serving(record):
            return "Redis: not running"
        stop_process(record["pid"])
        return "Redis: stopped"

    def status(self) -> str:
        if self.given:
            return "Redis: given (REDIS_URL)"
        record = read_record(self.record)
        return f"Redis: running on 127.0.0.1:{record['port']}" if _serving(record) else "Redis: down"


# ---- object storage over the S3 API -------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectStore:
    """The lake's bucket (warehouse, landing area, Metaflow's datastore) behind the S3 API: moto's S3
    server on 127.0.0.1 with a generated key pair, or the endpoint given as ``S3_ENDPOINT_URL``. moto
    keeps objects in its process's memory: ``down`` saves them under the state directory and ``up``
    puts them back (a server that died loses them)."""

    settings: Settings

    @property
    def record(self) -> Path:
        return team_dir(self.settings) / "s3.json"

    @property
    def given(self) -> bool:
        return self.settings.s3_endpoint_url is not None

    @property
    def bucket(self) -> str:
        return self.settings.s3_bucket or "nyc-taxi-lakehouse"

    @property
    def credentials_file(self) -> Path:
        """The key pair as an AWS shared credentials file (mode 0600), for the processes that find their
        credentials through the AWS SDK's chain (Metaflow's datastore)."""
        return team_dir(self.settings) / "s3-credentials"

    def endpoint(self) -> str:
        if self.given:
            return self.settings.s3_endpoint_url
        return f"http://127.0.0.1:{self._record()['port']}"

    def keys(self) -> tuple[str, str] | None:
        """(access key id, secret key) of the server `up` started; None for a given endpoint (the chain's)."""
        if self.given:
            return None
        record = self._record()
        return record["access_key"], record["secret_key"]

    def _record(self) -> dict:
        record = read_record(self.record)
        if record is None:
            raise ServiceError("the team profile's object storage is not up: run `bash run team up`")
        return record

    def client(self):
        import boto3

        access, secret = self.keys() or (None, None)
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint(),
            region_name=self.settings.aws_region,
            aws_access_key_id=access,
            aws_secret_access_key=secret,
        )

    def up(self) -> str:
        team_dir(self.settings).mkdir(parents=True, exist_ok=True)
        if not self.given:
            record = read_record(self.record)
            if not _serving(record):
                record = {
                    "port": _port_again(record),
                    "access_key": (record or {}).get("access_key") or secrets.token_hex(10).upper(),
                    "secret_key": (record or {}).get("secret_key") or secrets.token_urlsafe(30),
                }
                log = team_dir(self.settings) / "s3.log"
                command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(record["port"])]
                record["pid"] = spawn(command, dict(os.environ), log)
                write_private(self.record, record)
                wait_until(lambda: listening(record["port"]) or not alive(record["pid"]), 60, "moto's S3 server", log)
                if not alive(record["pid"]):
                    raise ServiceError(f"moto's S3 server exited: {log.read_text()[-2000:]}")
            access, secret = self.keys()
            write_private_text(
                self.credentials_file, f"[default]\naws_access_key_id = {access}\naws_secret_access_key = {secret}\n"
            )
        s3 = self.client()
        if self.bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
            s3.create_bucket(Bucket=self.bucket)
        if not self.given and self.saved.is_dir():
            self._restore()
        where = "given" if self.given else "moto's S3 server"
        return f"object storage: s3://{self.bucket} on {self.endpoint()} ({where})"

    def down(self, delete_data: bool = False) -> str:
        if self.given:
            return "object storage: given (left running)"
        record = read_record(self.record)
        if not _serving(record):
            return "object storage: not running"
        if delete_data:
            shutil.rmtree(self.saved, ignore_errors=True)
        else:
            self._save()
        stop_process(record["pid"])
        return "object storage: stopped" + ("" if delete_data else f" (its objects saved to {self.saved})")

    # moto keeps its objects in memory: `down` saves them to disk and `up` puts them back
    @property
    def saved(self) -> Path:
        return team_dir(self.settings) / "s3-objects"

    def _save(self) -> None:
        s3, kept = self.client(), self.saved.with_name(self.saved.name + ".partial")
        shutil.rmtree(kept, ignore_errors=True)
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            for item in page.get("Contents", []):
                path = kept / item["Key"]
                path.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(self.bucket, item["Key"], str(path))
        shutil.rmtree(self.saved, ignore_errors=True)
        kept.mkdir(parents=True, exist_ok=True)
        kept.rename(self.saved)

    def _restore(self) -> None:
        s3 = self.client()
        for path in sorted(p for p in self.saved.rglob("*") if p.is_file()):
            s3.upload_file(str(path), self.bucket, path.relative_to(self.saved).as_posix())
        shutil.rmtree(self.saved)

    def status(self) -> str:
        if self.given:
            return f"object storage: given ({self.settings.s3_endpoint_url})"
        record = read_record(self.record)
        return f"object storage: running on 127.0.0.1:{record['port']}" if _serving(record) else "object storage: down"


# ---- the Spark standalone cluster --------------------------------------------------------------------


@dataclass(frozen=True)
class SparkCluster:
    settings: Settings

    @property
    def directory(self) -> Path:
        return team_dir(self.settings) / "spark"

    @property
    def record(self) -> Path:
        return self.directory / "cluster.json"

    @property
    def given(self) -> bool:
        return self.settings.spark_master is not None

    def master(self) -> str | None:
        """The master's URL: the given one, or the cluster `up` started (None when it is down)."""
        if self.given:
            return self.settings.spark_master
        record = read_record(self.record)
        return f"spark://127.0.0.1:{record['port']}" if record and self._running(record) else None

    def _running(self, record: dict) -> bool:
        return all(alive(pid) for pid in record["pids"]) and listening(record["port"])

    def workers_alive(self) -> int:
        record = read_record(self.record)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{record['web_port']}/json/", timeout=5) as answer:
                return int(json.load(answer).get("aliveworkers", 0))
        except OSError:  # its web UI is not up yet
            return 0

    def applications(self) -> list[dict]:
        """The applications the master ran or runs (its JSON endpoint)."""
        record = read_record(self.record)
        with urllib.request.urlopen(f"http://127.0.0.1:{record['web_port']}/json/", timeout=5) as answer:
            state = json.load(answer)
        return state.get("activeapps", []) + state.get("completedapps", [])

    def _spawn(self, name: str, *args: str) -> int:
        import pyspark

        home = Path(pyspark.__file__).parent
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1"}
        env["SPARK_WORKER_DIR"] = str(self.directory / "work")
        # an application that asks for no number of cores gets half the worker's: two tasks run at once
        env["SPARK_MASTER_OPTS"] = f"-Dspark.deploy.defaultCores={WORKER_CORES // 2}"
        return spawn([str(home / "bin" / "spark-class"), *args], env, self.directory / f"{name}.log")

    def up(self) -> str:
        if self.given:
            return f"Spark: given ({self.settings.spark_master})"
        record = read_record(self.record)
        if record and self._running(record):
            return f"Spark: master running on spark://127.0.0.1:{record['port']}"
        self.down()
        self.directory.mkdir(parents=True, exist_ok=True)
        port, web_port, worker_web_port = free_port(), free_port(), free_port()
        master = self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web_port)),
        )
        record = {"port": port, "web_port": web_port, "pids": [master]}
        write_private(self.record, record)
        wait_until(lambda: listening(port) or not alive(master), 90, "Spark's master", self.directory / "master.log")
        worker = self._spawn(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            f"spark://127.0.0.1:{port}",
            *("--host", "127.0.0.1", "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY),
            *("--webui-port", str(worker_web_port)),
        )
        record["pids"].append(worker)
        write_private(self.record, record)
        wait_until(lambda: self.workers_alive() > 0, 90, "Spark's worker", self.directory / "worker.log")
        return f"Spark: master started on spark://127.0.0.1:{port} with one worker ({WORKER_CORES} cores)"

    def down(self) -> str:
        if self.given:
            return "Spark: given (left running)"
        record = read_record(self.record)
        if not record:
            return "Spark: not running"
        for pid in reversed(record["pids"]):
            stop_process(pid)
        self.record.unlink(missing_ok=True)
        return "Spark: stopped"

    def status(self) -> str:
        if self.given:
            return f"Spark: given ({self.settings.spark_master})"
        master = self.master()
        return f"Spark: master running on {master}" if master else "Spark: down"


# ---- the profile's services together ----------------------------------------------------------------


def services(settings: Settings) -> tuple[Postgres, Redis, ObjectStore, SparkCluster]:
    return Postgres(settings), Redis(settings), ObjectStore(settings), SparkCluster(settings)


def up(settings: Settings) -> list[str]:
    return [service.up() for service in services(settings)]


def down(settings: Settings, delete_data: bool = False) -> list[str]:
    postgres, redis, objects, spark = services(settings)
    return [spark.down(), objects.down(delete_data), redis.down(), postgres.down(delete_data)]


def status(settings: Settings) -> list[str]:
    return [service.status() for service in services(settings)]
