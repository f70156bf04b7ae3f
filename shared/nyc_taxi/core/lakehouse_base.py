"""What every profile's lakehouse is (``Lakehouse``), and what they share; ``lakehouse`` chooses one."""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nyc_taxi.core.settings import Settings

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
