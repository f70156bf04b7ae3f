"""Where the team profile's services are, for the code that uses them (the lakehouse, Airflow's and
Metaflow's configuration): PostgreSQL, Redis, the object storage's S3 gateway and the Spark master.

They are the ones `bash run team up` runs on this machine (the proving tools' deployment), found through the
record it keeps, ``<state>/team/services.json`` (mode 0600: it holds the generated passwords and the S3
key pair, which are never printed or logged) — or the ones a team gives instead: ``POSTGRES_URL``,
``REDIS_URL``, ``S3_ENDPOINT_URL`` (credentials from the AWS credential chain), ``SPARK_MASTER``.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from nyc_taxi.core.processes import ServiceError, read_record
from nyc_taxi.core.settings import Settings

POSTGRES_JDBC_JAR = Path("/usr/share/java/postgresql.jar")
BUCKET = "nyc-taxi-lakehouse"


def team_dir(settings: Settings) -> Path:
    return settings.state_dir / "team"


def services_record(settings: Settings) -> Path:
    """Ports, generated passwords and keys of the services `team up` runs (mode 0600)."""
    return team_dir(settings) / "services.json"


LOOPBACK = "127.0.0.1"


def address(settings: Settings, program: str) -> str:
    """Where a program of the deployment `team up` runs is reached: its host's address when it runs across
    hosts (the record's ``addresses``), else 127.0.0.1."""
    if settings.profile != "team":
        return LOOPBACK
    return ((read_record(services_record(settings)) or {}).get("addresses") or {}).get(program, LOOPBACK)


def runs_here(settings: Settings, program: str) -> bool:
    """Whether ``program`` of the deployment runs on this host (on one machine: every program does)."""
    return address(settings, program) == this_host(settings)[1] or this_host(settings)[1] == LOOPBACK


def this_host(settings: Settings) -> tuple[str, str]:
    """The name and address of the host this state directory is (the record a host is given says), or of
    this machine (its name, 127.0.0.1)."""
    import socket

    given = ((read_record(services_record(settings)) or {}) if settings.profile == "team" else {}).get("host") or {}
    return given.get("name") or socket.gethostname(), given.get("address") or LOOPBACK


def _recorded(settings: Settings, service: str) -> dict:
    record = (read_record(services_record(settings)) or {}).get(service)
    if record is None:
        raise ServiceError(f"the team profile's {service} is not up: run `bash run team up`")
    return record


# The databases of a deployment's own PostgreSQL, each owned by a role of its name (the superuser creates
# them, and nothing else uses it): Airflow's metadata, on the hosts of Airflow's scheduler, API server, DAG
# processor and triggerer; the Iceberg catalog, on every host that runs tasks.
OWNED_DATABASES = ("airflow", "lakehouse")


@dataclass(frozen=True)
class Postgres:
    settings: Settings

    @property
    def given(self) -> bool:
        return self.settings.postgres_url is not None

    def connection(self, database: str | None = None) -> dict:
        """host, port, user, password for ``database`` (the given server's user for every database; on the
        server `team up` runs, the role of that name that owns it, else the superuser, which only the host
        of PostgreSQL holds: a host without a database's credential gets KeyError naming it)."""
        if self.given:
            url = urlsplit(self.settings.postgres_url.get_secret_value())
            return {"host": url.hostname, "port": url.port or 5432, "user": url.username, "password": url.password}
        recorded = _recorded(self.settings, "postgres")
        roles = recorded.get("roles") or {}
        if database in OWNED_DATABASES:
            if database not in roles:
                raise KeyError(f"this host holds no credential of PostgreSQL's database {database!r}")
            user, password = database, roles[database]
        else:
            if "password" not in recorded:
                raise KeyError("this host holds no credential of PostgreSQL's superuser")
            user, password = recorded["user"], recorded["password"]
        return {
            "host": address(self.settings, "postgres"),
            "port": recorded["port"],
            "user": user,
            "password": password,
        }

    @property
    def airflow_url_file(self) -> Path:
        """Airflow's metadata database URL, for Airflow's ``sql_alchemy_conn_cmd`` (mode 0600)."""
        return team_dir(self.settings) / "airflow-database.url"

    @property
    def celery_results_url_file(self) -> Path:
        """Where an earlier layout kept the Celery executor's results URL (Airflow's database): removed."""
        return team_dir(self.settings) / "celery-results.url"

    def url(self, database: str) -> str:
        """SQLAlchemy's URL of a database (psycopg2), password included: never print it."""
        c = self.connection(database)
        return f"postgresql+psycopg2://{quote(c['user'])}:{quote(c['password'])}@{c['host']}:{c['port']}/{database}"

    def jdbc(self, database: str) -> tuple[str, str, str]:
        """(JDBC URL, user, password) of a database."""
        c = self.connection(database)
        return f"jdbc:postgresql://{c['host']}:{c['port']}/{database}", c["user"], c["password"]

    def connect(self, database: str = "postgres"):
        """A connection to ``database`` with its owner's credential ("postgres": the superuser's)."""
        import psycopg2

        c = self.connection(database)
        return psycopg2.connect(
            host=c["host"], port=c["port"], user=c["user"], password=c["password"], dbname=database, connect_timeout=5
        )

    def has_table(self, database: str, table: str) -> bool:
        db = self.connect(database)
        try:
            with db.cursor() as cursor:
                cursor.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
                return bool(cursor.fetchone()[0])
        finally:
            db.close()


# Airflow's secrets that must be one on every host, each as its file and the option whose command reads it:
# the key the scheduler signs tasks' tokens with and the API server checks them with; the one the API server
# signs its requests for a worker's task log with and the worker's log server checks them with; the key of
# connections and variables in the metadata database.
AIRFLOW_SECRETS = {
    "jwt_secret": "AIRFLOW__API_AUTH__JWT_SECRET_CMD",
    "secret_key": "AIRFLOW__API__SECRET_KEY_CMD",
    "fernet_key": "AIRFLOW__CORE__FERNET_KEY_CMD",
}


def airflow_secret_file(settings: Settings, name: str) -> Path:
    """A secret of Airflow's on this host (mode 0600), for its option's ``_cmd``."""
    return team_dir(settings) / "airflow" / name


def airflow_secrets_here(settings: Settings) -> list[str]:
    """The secrets of Airflow's this host holds: on one machine all three; across hosts those its programs
    use (a host of Celery workers: the key its log server checks requests with; ``across_hosts.SECRETS_OF``
    decides what a host is given)."""
    given = ((read_record(services_record(settings)) or {}).get("airflow")) or {}
    return [name for name in AIRFLOW_SECRETS if name in given]


@dataclass(frozen=True)
class Redis:
    settings: Settings

    @property
    def given(self) -> bool:
        return self.settings.redis_url is not None

    @property
    def broker_url_file(self) -> Path:
        """The broker's URL, password included, for Airflow's ``broker_url_cmd`` (mode 0600)."""
        return team_dir(self.settings) / "celery-broker.url"

    @property
    def results_url_file(self) -> Path:
        """Where the Celery executor keeps its tasks' results (Redis), for Airflow's ``result_backend_cmd``."""
        return team_dir(self.settings) / "celery-results-redis.url"

    def url(self, database: int = 0) -> str:
        if self.given:
            return self.settings.redis_url.get_secret_value()
        record = _recorded(self.settings, "redis")
        return f"redis://:{quote(record['password'])}@{address(self.settings, 'redis')}:{record['port']}/{database}"

    def results_url(self) -> str:
        """Celery's results: a given Redis's own URL, the deployment's database 1 (its broker is database 0)."""
        return self.url() if self.given else self.url(1)


@dataclass(frozen=True)
class ObjectStore:
    """The lake's bucket (warehouse, landing area, Metaflow's datastore) behind the S3 API: SeaweedFS's
    S3 gateway with a generated key pair, or the endpoint given as ``S3_ENDPOINT_URL``."""

    settings: Settings

    @property
    def given(self) -> bool:
        return self.settings.s3_endpoint_url is not None

    @property
    def bucket(self) -> str:
        return self.settings.s3_bucket or BUCKET

    @property
    def credentials_file(self) -> Path:
        """The key pair as an AWS shared credentials file (mode 0600), for the processes that find their
        credentials through the AWS SDK's chain (Metaflow's datastore)."""
        return team_dir(self.settings) / "s3-credentials"

    def endpoint(self) -> str:
        if self.given:
            return self.settings.s3_endpoint_url
        return f"http://{address(self.settings, 'seaweedfs-s3')}:{_recorded(self.settings, 'seaweedfs')['s3_port']}"

    def keys(self) -> tuple[str, str] | None:
        """(access key id, secret key) of the gateway `team up` runs; None for a given endpoint (the chain's)."""
        if self.given:
            return None
        record = _recorded(self.settings, "seaweedfs")
        return record["access_key"], record["secret_key"]

    def client(self, **config):
        import boto3
        from botocore.config import Config

        access, secret = self.keys() or (None, None)
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint(),
            region_name=self.settings.aws_region,
            aws_access_key_id=access,
            aws_secret_access_key=secret,
            config=Config(**config) if config else None,
        )


@dataclass(frozen=True)
class SparkCluster:
    settings: Settings

    @property
    def given(self) -> bool:
        return self.settings.spark_master is not None

    def master(self) -> str | None:
        """The master's URL: the given one, or the cluster `team up` runs (None when there is none)."""
        if self.given:
            return self.settings.spark_master
        record = (read_record(services_record(self.settings)) or {}).get("spark")
        return f"spark://{address(self.settings, 'spark-master')}:{record['port']}" if record else None

    def authentication(self) -> dict[str, str]:
        """What a driver, the master and the worker need to be let in to the cluster `team up` runs: its
        shared secret (Spark's own authentication), and its messages and blocks encrypted with keys
        derived from it. A given cluster's (SPARK_MASTER) come from its spark-defaults.conf."""
        if self.given:
            return {}
        record = _recorded(self.settings, "spark")
        if "secret" not in record:  # a cluster started before it asked for one (`team up` says so)
            return {}
        return {
            "spark.authenticate": "true",
            "spark.authenticate.secret": record["secret"],
            "spark.network.crypto.enabled": "true",
            "spark.network.crypto.saslFallback": "false",  # encrypted, or refused: no plain SASL
        }

    def _state(self) -> dict:
        """The master's own account of its workers and applications (its web UI's JSON endpoint, which
        Spark does not authenticate: on 127.0.0.1 of the master's host)."""
        port = _recorded(self.settings, "spark")["web_port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=5) as answer:
            return json.load(answer)

    def master_alive(self) -> bool:
        """The master answers with its cluster's state, and that state is ALIVE (not a standby or recovering)."""
        try:
            return self._state().get("status") == "ALIVE"
        except OSError:  # its web UI is not up
            return False

    def workers(self) -> list[str]:
        """The addresses of the workers registered and alive."""
        try:
            return [w["host"] for w in self._state().get("workers", []) if w.get("state") == "ALIVE"]
        except OSError:  # its web UI is not up
            return []

    def workers_alive(self) -> int:
        try:
            return int(self._state().get("aliveworkers", 0))
        except OSError:  # its web UI is not up
            return 0

    def applications(self) -> list[dict]:
        """The applications the master ran or runs."""
        state = self._state()
        return state.get("activeapps", []) + state.get("completedapps", [])


@dataclass(frozen=True)
class LineageReceiver:
    """Where a host of the team deployment across hosts ships its lineage: the receiver on control
    (``nyc_taxi.lineage.write.receiver``), with this host's own token. Only the hosts layout runs one:
    on one machine every program writes the same lineage files."""

    settings: Settings

    def _record(self) -> dict:
        return (read_record(services_record(self.settings)) or {}).get("lineage") or {}

    def tokens(self) -> dict[str, str]:
        """Each host's token, by host: all of them on the receiver's host, its own on another."""
        return dict(self._record().get("tokens") or {})

    def elsewhere(self) -> bool:
        """Whether this host ships to a receiver on another host (the hosts layout, from a worker)."""
        if self.settings.profile != "team" or "port" not in self._record():
            return False
        return address(self.settings, "lineage-receiver") not in (LOOPBACK, this_host(self.settings)[1])

    def here(self) -> bool:
        """Whether this host runs the receiver that other hosts ship to (control, across hosts)."""
        if self.settings.profile != "team" or "port" not in self._record():
            return False
        return address(self.settings, "lineage-receiver") == this_host(self.settings)[1] != LOOPBACK

    def url(self) -> str:
        return f"http://{address(self.settings, 'lineage-receiver')}:{self._record()['port']}"

    def token(self) -> str:
        """This host's token."""
        return self.tokens()[this_host(self.settings)[0]]

    def shipper_round(self) -> Path:
        """What this host's lineage shipper found in its last round, and when it ended (JSON)."""
        return self.settings.lineage_dir / "delivery" / "shipper.json"
