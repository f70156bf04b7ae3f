"""The one SparkSession of a process: Iceberg extensions and the lakehouse's catalog.

local[*] unless ``SPARK_MASTER`` (or ``spark.master`` in spark-defaults.conf) names a cluster.
Iceberg's Spark runtime jar comes from the locked PyPI package ``snowpark-connect-deps-iceberg``
(no Maven download); the local catalog's SQLite JDBC driver from Debian's libxerial-sqlite-jdbc-java.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.settings import Settings, get_settings

ICEBERG_RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.9.2.jar"

_lock = threading.Lock()
_session = None


def iceberg_runtime_jar() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("snowpark_connect_deps_iceberg")
    jar = Path(spec.origin).parent / "jars" / ICEBERG_RUNTIME_JAR if spec and spec.origin else Path(ICEBERG_RUNTIME_JAR)
    if not jar.is_file():
        raise FileNotFoundError(
            f"{jar} is missing: run `bash run setup` (uv sync installs snowpark-connect-deps-iceberg==1.0.1)"
        )
    return jar


def session_conf(settings: Settings) -> dict[str, str]:
    lake = lakehouse(settings)
    java_opts = " ".join(["-Duser.timezone=UTC", *lake.java_options()])
    catalog = f"spark.sql.catalog.{settings.catalog_name}"
    conf = {
        "spark.app.name": "nyc-taxi",
        "spark.jars": ",".join([str(iceberg_runtime_jar()), *lake.spark_jars()]),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.defaultCatalog": settings.catalog_name,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(settings.spark_shuffle_partitions),
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.ui.showConsoleProgress": "false",
        catalog: "org.apache.iceberg.spark.SparkCatalog",
        f"{catalog}.warehouse": lake.warehouse,
        **lake.spark_catalog_conf(catalog),
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
        lakehouse(settings).prepare_catalog()
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
