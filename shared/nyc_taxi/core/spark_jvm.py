"""A Spark JVM of this process's own: its configuration, its start, and the class-data-sharing archive
that makes the start cheaper.

local[*] unless ``SPARK_MASTER`` (or ``spark.master`` in spark-defaults.conf) names a cluster.
Iceberg's Spark runtime jar comes from the locked PyPI package ``snowpark-connect-deps-iceberg``
(no Maven download); the local catalog's SQLite JDBC driver from Debian's libxerial-sqlite-jdbc-java.

Start-up matters: every Airflow task and every Spark step of the flow is a fresh process. The jars go on
the driver JVM's own class path, and the driver maps a class-data-sharing archive of the classes a session
loads (Java's AppCDS: Spark, Scala, Iceberg, the JDBC driver) instead of loading and verifying them again.
An archive holds one class path: `bash run setup` builds the local profile's (``python -m
nyc_taxi.core.spark_jvm``), `bash run team up` the team profile's drivers' (``--profile team``), each once
per JVM and set of jars. A cluster's executors start without one. Spark's web UI is off unless
``SPARK_UI=true``. `bash run bench startup` measures each.
Which session a process gets (this, or one of a warm Spark server's) is ``nyc_taxi.core.spark``'s choice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import tempfile
from pathlib import Path

from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.settings import Settings, get_settings

ICEBERG_RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.9.2.jar"


def iceberg_runtime_jar() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("snowpark_connect_deps_iceberg")
    jar = Path(spec.origin).parent / "jars" / ICEBERG_RUNTIME_JAR if spec and spec.origin else Path(ICEBERG_RUNTIME_JAR)
    if not jar.is_file():
        raise FileNotFoundError(
            f"{jar} is missing: run `bash run setup` (uv sync installs snowpark-connect-deps-iceberg==1.0.1)"
        )
    return jar


def master(settings: Settings) -> str | None:
    """Where sessions run: SPARK_MASTER, else the profile's cluster, else (None) local[*]."""
    return settings.spark_master or lakehouse(settings).spark_master()


def is_local(settings: Settings) -> bool:
    url = master(settings)
    return not url or url.startswith("local")


def _jars(settings: Settings) -> list[str]:
    return [str(iceberg_runtime_jar()), *lakehouse(settings).spark_jars()]


def driver_class_path(settings: Settings) -> list[str]:
    """What the driver JVM's class path holds before Spark's own jars (``spark.driver.extraClassPath``)."""
    return [*_jars(settings), *lakehouse(settings).spark_class_path()]


def class_archive(jars: list[str]) -> Path:
    """Where the class-data-sharing archive for this JVM, this Spark and this class path before Spark's
    jars is (it may not exist). Its name changes with any of them, so a stale archive is never used."""
    import hashlib
    import shutil
    import sys

    import pyspark

    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home, "bin", "java") if java_home else Path(shutil.which("java") or "java")
    java = java.resolve() if java.exists() else java
    libjvm = next(java.parent.parent.glob("lib/server/libjvm.so"), java)
    parts = [pyspark.__version__, str(java), str(libjvm.stat().st_size) if libjvm.exists() else "?"]
    # a jar's size and time, as Java checks them: a jar replaced in place is another archive's
    parts += [f"{jar}:{Path(jar).stat().st_size}:{Path(jar).stat().st_mtime_ns}" for jar in jars if Path(jar).exists()]
    digest = hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]
    return Path(sys.prefix) / "spark-class-archive" / f"{digest}.jsa"


# A JVM that compiles hot code with its quick tier only (C1) starts real work sooner: the flow's Spark
# steps (a window of zone-hours, a few thousand forecasts) finish about a third sooner; a month of
# trips (millions of rows) takes twice as long. Measured by `bash run bench ingest` and `bench flow`.
QUICK_JIT = "-XX:TieredStopAtLevel=1"


def session_conf(settings: Settings, java_options: tuple[str, ...] = (), small: bool = False) -> dict[str, str]:
    lake = lakehouse(settings)
    jars, local, class_path = _jars(settings), is_local(settings), lake.spark_class_path()
    options = ["-Duser.timezone=UTC", *lake.java_options(), *java_options, *([QUICK_JIT] if small else [])]
    driver, driver_jars = list(options), driver_class_path(settings)
    archive = class_archive(driver_jars)
    if archive.is_file() and not java_options:  # the driver's alone: an executor's class path is another
        driver += [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds*=off"]  # "cds" logs would go to task logs
    catalog = f"spark.sql.catalog.{settings.catalog_name}"
    conf = {
        "spark.app.name": "nyc-taxi",
        # on the driver JVM's class path (in the class archive; the driver runs in this process in every
        # mode used here, and classes Python looks up by name must be on its own loader)
        "spark.driver.extraClassPath": ":".join(driver_jars),
        "spark.ui.enabled": str(settings.spark_ui).lower(),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.defaultCatalog": settings.catalog_name,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(settings.spark_shuffle_partitions),
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.driver.extraJavaOptions": " ".join(driver),
        "spark.executor.extraJavaOptions": " ".join(options),
        "spark.ui.showConsoleProgress": "false",
        catalog: "org.apache.iceberg.spark.SparkCatalog",
        f"{catalog}.warehouse": lake.warehouse,
        **lake.spark_catalog_conf(catalog),
        **lake.spark_storage_conf(),
    }
    if not local:
        conf["spark.jars"] = ",".join(jars)  # a cluster's executors get them from the driver
    if class_path:
        conf["spark.executor.extraClassPath"] = ":".join(class_path)
    if settings.spark_extra_packages:
        conf["spark.jars.packages"] = settings.spark_extra_packages
    if url := master(settings):
        conf["spark.master"] = url
        conf |= lake.spark_cluster_conf()
    return conf


# The keys Spark itself treats as secret (the default of spark.redaction.regex): redacted in its UI and
# event log, and kept off the JVM's command line here.
SECRET_KEY = re.compile(r"(?i)secret|password|token|access[.]key")


def new_session(
    settings: Settings,
    java_options: tuple[str, ...] = (),
    small: bool = False,
    overrides: dict[str, str | None] | None = None,
):
    """A Spark session with ``session_conf``; ``overrides`` replace its keys (None: leaves one out)."""
    from pyspark.sql import SparkSession

    # py4j logs every socket at INFO, into task logs and into closed streams at exit.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    lakehouse(settings).prepare_catalog()
    if is_local(settings) or "://127.0.0.1:" in (master(settings) or ""):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a driver on this machine listens on it only
    conf = session_conf(settings, java_options, small)
    for key, value in (overrides or {}).items():
        if value is None:
            conf.pop(key, None)
        else:
            conf[key] = value
    secrets = {key: value for key, value in conf.items() if SECRET_KEY.search(key)}
    from pyspark import SparkContext

    # PySpark's internals (no public API says whether this process's JVM runs; core/spark_server.py reads
    # the same attribute to attach): a session started again in a process whose JVM runs (after
    # stop_spark) gets its configuration through that JVM, with no command line; the first one launches
    # the JVM, with its secrets in a file. tests/test_lakehouse.py starts both.
    launches = SparkContext._gateway is None
    builder = SparkSession.builder
    for key, value in conf.items():
        if key not in secrets or not launches:
            builder = builder.config(key, value)
    with _properties_file(secrets if launches else {}):
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


@contextlib.contextmanager
def _properties_file(properties: dict[str, str]):
    """``properties`` for the JVM PySpark is about to launch, in a 0600 file spark-submit reads
    (``--properties-file``, through PYSPARK_SUBMIT_ARGS), removed once the session is up. PySpark passes
    a session's configuration to spark-submit as ``--conf key=value`` arguments, which every user of the
    machine can read in the process list: passwords and keys must not be among them. spark-submit reads
    one properties file and then no spark-defaults.conf: that file's settings, and those of a properties
    file PYSPARK_SUBMIT_ARGS already names, come first in this one."""
    if not properties:
        yield
        return
    for key, value in properties.items():
        if value != value.strip(_JAVA_TRIMMED):  # spark-submit trims a file's values (Java's String.trim)
            raise ValueError(f"{key} begins or ends with white space, which Spark's properties file loses")
    before = os.environ.get("PYSPARK_SUBMIT_ARGS")
    arguments = shlex.split(before or "pyspark-shell")
    inherited = []
    named = [i for i, a in enumerate(arguments) if a == "--properties-file" or a.startswith("--properties-file=")]
    for at in reversed(named):  # spark-submit reads the last one named: ours, with theirs in it
        given = arguments[at].partition("=")[2] or arguments[at + 1]
        if not Path(given).is_file():
            raise FileNotFoundError(f"PYSPARK_SUBMIT_ARGS names a properties file that does not exist: {given}")
        inherited.insert(0, Path(given))
        del arguments[at : at + (1 if "=" in arguments[at] else 2)]
    if not named:
        conf_dir = os.environ.get("SPARK_CONF_DIR") or str(
            Path(os.environ.get("SPARK_HOME") or _pyspark_home()) / "conf"
        )
        inherited.append(Path(conf_dir) / "spark-defaults.conf")
    fd, path = tempfile.mkstemp(prefix="nyc-taxi-spark-", suffix=".properties")  # 0600
    with os.fdopen(fd, "w", encoding="latin-1") as out:
        for file in inherited:
            if file.is_file():
                out.write(file.read_text(encoding="latin-1") + "\n")
        out.writelines(f"{_escaped(key)}={_escaped(value)}\n" for key, value in properties.items())
    os.environ["PYSPARK_SUBMIT_ARGS"] = shlex.join(["--properties-file", path, *arguments])
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = before
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


_JAVA_TRIMMED = "".join(map(chr, range(33)))  # what Java's String.trim removes: U+0000 to the space


def _pyspark_home() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent)


def _escaped(text: str) -> str:
    """A Java properties file's escaping (java.util.Properties.load): backslashes, separators, comment
    marks and white space, and every character beyond printable ASCII as \\uXXXX (UTF-16: a character
    beyond U+FFFF as its two surrogates)."""
    out = []
    for char in text:
        if char in "\\=:#! \t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}.get(char, "\\" + char))
        elif not " " < char < "\x7f":
            units = char.encode("utf-16-be")
            out += [f"\\u{int.from_bytes(units[i : i + 2], 'big'):04x}" for i in range(0, len(units), 2)]
        else:
            out.append(char)
    return "".join(out)


# ---- the class-data-sharing archive ------------------------------------------------------------------

# What a session of this project does, so that the archive holds the classes the real work loads:
# an Iceberg table partitioned by day, inserts, a MERGE, time travel, metadata tables, parquet and CSV
# files read with their _metadata, a DataFrame from Python rows written with writeTo.
_WORKLOAD = [
    "CREATE TABLE {t} (k STRING, ts TIMESTAMP_NTZ, v DOUBLE, n BIGINT) USING iceberg PARTITIONED BY (days(ts))"
    " TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='copy-on-write')",
    "INSERT INTO {t} SELECT CAST(id AS STRING), TIMESTAMP_NTZ'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, id),"
    " id * 1.5, id FROM range(50)",
    "MERGE INTO {t} t USING (SELECT CAST(id AS STRING) AS k, TIMESTAMP_NTZ'2024-01-02 00:00:00' AS ts, 2.0 AS v,"
    " id AS n FROM range(40, 60)) s ON t.k = s.k WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    "SELECT count(*), sum(xxhash64(k, v, isnull(v))) FROM {t} WHERE ts >= TIMESTAMP_NTZ'2024-01-01 00:00:00'",
    "SELECT date_trunc('HOUR', ts) AS h, count(ts) FROM {t} GROUP BY 1",
    "SELECT snapshot_id FROM {t}.snapshots",
    "SELECT count(*) FROM {t}.files",
]


def build_class_archive(settings: Settings | None = None) -> Path | None:
    """Build the class-data-sharing archive for the drivers of these settings' profile if it is missing
    (`bash run setup`, `bash run team up`): a local JVM with their class path runs a representative session
    and writes the classes it loaded at its exit. No service is needed: another profile's class path is
    exercised on a catalog of files of its own."""
    import subprocess
    import sys
    import tempfile

    settings = settings or get_settings()
    class_path = driver_class_path(settings)
    archive = class_archive(class_path)
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=archive.parent) as tmp:
        dump = Path(tmp) / archive.name
        env = {**os.environ, "STATE_DIR": str(Path(tmp) / "state"), "PROFILE": "local", "SPARK_MASTER": ""}
        env["SPARK_LOCAL_IP"] = "127.0.0.1"  # a local JVM, in whatever network namespace `up` runs
        subprocess.run(
            [sys.executable, "-m", "nyc_taxi.core.spark_jvm", "--exercise", str(dump), ":".join(class_path)],
            env=env,
            check=True,
            capture_output=True,
            timeout=600,
        )
        if not dump.is_file():
            return None
        os.replace(dump, archive)
    return archive


def _exercise(dump: str, class_path: str) -> None:
    import tempfile

    settings = get_settings()  # the local profile, in a state directory of its own
    options = (f"-XX:ArchiveClassesAtExit={dump}", "-Xlog:cds*=off")
    table = f"{settings.catalog_name}.{settings.database}.class_archive_workload"
    with tempfile.TemporaryDirectory() as tmp:
        if class_path == ":".join(driver_class_path(settings)):
            lakehouse(settings).create()
            session = new_session(settings, options)
        else:  # another profile's drivers: their class path, and a catalog of files (Iceberg's hadoop type)
            catalog = f"spark.sql.catalog.{settings.catalog_name}"
            overrides = dict.fromkeys(k for k in session_conf(settings, options) if k.startswith(f"{catalog}."))
            overrides |= {
                "spark.driver.extraClassPath": class_path,
                "spark.master": "local[*]",
                "spark.jars.packages": None,  # offline: the drivers' own jars only
                f"{catalog}.type": "hadoop",
                f"{catalog}.warehouse": f"file://{tmp}/warehouse",
            }
            session = new_session(settings, options, overrides=overrides)
            session.sql(f"CREATE NAMESPACE IF NOT EXISTS {settings.catalog_name}.{settings.database}")
        for statement in _WORKLOAD:
            session.sql(statement.format(t=table)).collect()
        frame = session.createDataFrame([("a", 1.0), ("b", None)], "k STRING, v DOUBLE")
        frame.write.parquet(f"{tmp}/p")
        frame.write.csv(f"{tmp}/c")
        session.read.parquet(f"{tmp}/p").selectExpr("*", "_metadata.file_name", "_metadata.row_index").collect()
        session.read.csv(f"{tmp}/c", schema="k STRING, v STRING", header=False, mode="FAILFAST").collect()
        session.sql(f"SELECT k, ts, v, n FROM {table}").writeTo(table).overwritePartitions()
        session.stop()  # the JVM writes the archive as it exits


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="build the drivers' class-data-sharing archive if it is missing")
    parser.add_argument("--profile", help="the profile whose drivers it is for (default: the settings')")
    parser.add_argument("--exercise", nargs=2, metavar=("DUMP", "CLASS_PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.exercise:
        _exercise(*args.exercise)
    else:
        chosen = get_settings()
        chosen = chosen.model_copy(update={"profile": args.profile}) if args.profile else chosen
        built = build_class_archive(chosen)
        print(f"class-data-sharing archive: {built}" if built else "no class-data-sharing archive (the JVM wrote none)")
