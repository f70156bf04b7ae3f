"""Real Spark on real Iceberg tables: tables created from the registry (pyiceberg), written and MERGEd
by Spark, read back by pyiceberg."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from pyiceberg.transforms import DayTransform, MonthTransform, YearTransform

from nyc_taxi.core import datasets as registry
from nyc_taxi.core.catalog import load_catalog
from nyc_taxi.core.naming import iceberg_identifier, spark_table, table_location
from nyc_taxi.core.tables import ensure_tables

pytestmark = pytest.mark.spark

ICEBERG_TYPE = {
    "INT": "int",
    "BIGINT": "long",
    "DOUBLE": "double",
    "STRING": "string",
    "DATE": "date",
    "TIMESTAMP_NTZ": "timestamp",
    "TIMESTAMP": "timestamptz",
}
TRANSFORM = {"days": DayTransform, "months": MonthTransform, "years": YearTransform}
INGESTED_AT = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)  # of every row this module writes
TEST_FILE = "lakehouse-test.parquet"  # marks this module's rows; other tests share the tables


@pytest.fixture(scope="module")
def tables(spark):
    ensure_tables()
    assert ensure_tables() == []  # idempotent
    return load_catalog()


def _in_a_fresh_process(probe: str) -> list[str]:
    """What ``probe`` prints, run by a new Python process (a process has one SparkSession)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.split()


@pytest.mark.guards
def test_one_spark_session_per_process_and_a_new_one_after_stop():
    """In a fresh process: asking twice gives the same session (one JVM application); after stop_spark
    the next ask starts a new one."""
    probe = (
        "from nyc_taxi.core.spark import get_spark, stop_spark\n"
        "a = get_spark(); b = get_spark(); first = a.sparkContext.applicationId\n"
        "print(a is b, b.sparkContext.applicationId == first)\n"
        "stop_spark(); c = get_spark()\n"
        "print(c is not a, c.sparkContext.applicationId != first, c.sql('SELECT 1').first()[0])\n"
    )
    assert _in_a_fresh_process(probe) == ["True", "True", "True", "True", "1"]


def test_a_session_started_in_the_background_is_the_one_get_spark_returns():
    """start_spark() while the caller does other work, then get_spark(): one session, one JVM, the
    quick compiler tier it was asked for, and it answers from the caller's thread."""
    probe = (
        "import psutil, threading\n"
        "from nyc_taxi.core.spark import get_spark, start_spark\n"
        "start_spark(small=True); started = [t.name for t in threading.enumerate()]\n"
        "s = get_spark(small=True)\n"
        "jvms = [p for p in psutil.Process().children(recursive=True) if p.name() == 'java']\n"
        "options = s.sparkContext.getConf().get('spark.driver.extraJavaOptions')\n"
        "print('spark-start' in started, s is get_spark(), len(jvms), 'TieredStopAtLevel=1' in options,\n"
        "      s.sql('SELECT 1').first()[0])\n"
    )
    assert _in_a_fresh_process(probe) == ["True", "True", "1", "True", "1"]


@pytest.mark.parametrize("table", list(registry.TABLES.values()), ids=lambda t: t.name)
def test_tables_are_created_from_the_registry(tables, table):
    iceberg = tables.load_table(iceberg_identifier(table))
    fields = iceberg.schema().fields
    assert [f.name for f in fields] == table.column_names
    assert [str(f.field_type) for f in fields] == [ICEBERG_TYPE[c.type] for c in table.columns]
    assert [f.required for f in fields] == [not c.nullable for c in table.columns]
    assert [f.doc for f in fields] == [c.doc for c in table.columns]
    spec = [(type(p.transform), iceberg.schema().find_field(p.source_id).name) for p in iceberg.spec().fields]
    expected = [(TRANSFORM[t.split("(")[0]], t.split("(")[1].rstrip(")")) for t in table.partitioned_by]
    assert spec == expected
    assert iceberg.location().removeprefix("file:") == table_location(table)  # Hadoop writes local paths as file:/...
    assert iceberg.properties.get("nyc_taxi.primary-key", "") == ",".join(table.primary_key)


def test_a_table_created_with_older_properties_is_given_the_registrys(tables):
    """As a table created by an older version is: ensure_tables sets the properties the registry now
    declares (a write setting, the description), in a metadata commit that adds no snapshot; the table's
    format stays as created, and a property the registry does not declare stays; a second call commits
    nothing."""
    import pyarrow as pa

    from nyc_taxi.core.tables import DEFAULT_PROPERTIES, iceberg_schema

    # unpartitioned, so that pyiceberg can write its one row
    probe = dataclasses.replace(
        registry.WEATHER_RAW, name="lakehouse_test_properties", description="now", partitioned_by=()
    )
    identifier = iceberg_identifier(probe)
    older = {"format-version": "1", "write.parquet.dict-size-bytes": "2097152", "comment": "then", "kept": "yes"}
    schema = iceberg_schema(probe)
    created = tables.create_table(identifier, schema, location=table_location(probe), properties=older)
    try:
        row = {
            "county_code": "36061",
            "date": dt.date(2024, 1, 1),
            "source_status": "scaled",
            "ingested_at": INGESTED_AT,
        }
        created.append(pa.Table.from_pylist([row], schema=schema.as_arrow()))
        created = tables.load_table(identifier)
        assert ensure_tables([probe]) == []
        table = tables.load_table(identifier)
        assert table.properties["write.parquet.dict-size-bytes"] == DEFAULT_PROPERTIES["write.parquet.dict-size-bytes"]
        assert table.properties["comment"] == "now"
        assert table.properties["nyc_taxi.primary-key"] == "county_code,date"
        assert table.properties["kept"] == "yes"
        assert table.format_version == 1  # and not asked to become 2 (Java's Iceberg would upgrade it):
        assert table.properties.get("format-version") == created.properties.get("format-version")
        assert table.metadata.snapshots == created.metadata.snapshots and len(table.metadata.snapshots) == 1
        assert table.scan().to_arrow().num_rows == 1
        assert table.metadata_location != created.metadata_location  # one commit ...
        assert ensure_tables([probe]) == []
        assert tables.load_table(identifier).metadata_location == table.metadata_location  # ... and no other
    finally:
        tables.drop_table(identifier)


def _trip(key: str, pickup: dt.datetime, fare: float) -> dict:
    row = {c.name: None for c in registry.YELLOW_TAXI_RAW.columns}
    row |= {
        "row_key": key,
        "source_file": TEST_FILE,
        "ingested_at": INGESTED_AT,
        "vendor_id": 2,
        "pickup_datetime": pickup,
        "dropoff_datetime": pickup + dt.timedelta(minutes=9),
        "pickup_location_id": 132,
        "dropoff_location_id": 161,
        "fare_amount": fare,
    }
    return row


def _frame(spark, rows):
    schema = ", ".join(f"{c.name} {c.type}" for c in registry.YELLOW_TAXI_RAW.columns)
    return spark.createDataFrame(rows, schema)


def test_spark_write_and_merge_are_read_by_pyiceberg_at_the_same_snapshot(spark, tables):
    raw = registry.YELLOW_TAXI_RAW
    first = [_trip("a", dt.datetime(2024, 1, 5, 8, 0), 10.0), _trip("b", dt.datetime(2024, 1, 6, 23, 59), 20.0)]
    _frame(spark, first).writeTo(spark_table(raw)).append()
    first_snapshot = spark.sql(f"SELECT snapshot_id FROM {spark_table(raw)}.refs WHERE name = 'main'").first()[0]

    batch = [_trip("b", dt.datetime(2024, 1, 6, 23, 59), 25.0), _trip("c", dt.datetime(2024, 1, 31, 1, 30), 30.0)]
    _frame(spark, batch).createOrReplaceTempView("batch")
    merge = f"""
        MERGE INTO {spark_table(raw)} t USING batch s ON t.row_key = s.row_key
        WHEN MATCHED AND t.fare_amount IS DISTINCT FROM s.fare_amount THEN UPDATE SET *
        WHEN NOT MATCHED THEN INSERT *"""
    spark.sql(merge)
    spark_snapshot = spark.sql(
        f"SELECT snapshot_id FROM {spark_table(raw)}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()[0]

    table = tables.load_table(iceberg_identifier(raw))
    assert table.current_snapshot().snapshot_id == spark_snapshot
    mine = table.scan(row_filter=f"source_file == '{TEST_FILE}'").to_arrow()
    rows = sorted(mine.select(["row_key", "pickup_datetime", "fare_amount"]).to_pylist(), key=lambda r: r["row_key"])
    assert rows == [
        {"row_key": "a", "pickup_datetime": dt.datetime(2024, 1, 5, 8, 0), "fare_amount": 10.0},
        {"row_key": "b", "pickup_datetime": dt.datetime(2024, 1, 6, 23, 59), "fare_amount": 25.0},
        {"row_key": "c", "pickup_datetime": dt.datetime(2024, 1, 31, 1, 30), "fare_amount": 30.0},
    ]
    # Local wall-clock timestamps stay what they were (no time-zone shift on the way in or out).
    assert spark.sql(f"SELECT max(pickup_datetime) FROM {spark_table(raw)} WHERE source_file = '{TEST_FILE}'").first()[
        0
    ] == dt.datetime(2024, 1, 31, 1, 30)

    spark.sql(merge)  # the same batch again: nothing to change
    again = tables.load_table(iceberg_identifier(raw)).scan(row_filter=f"source_file == '{TEST_FILE}'").to_arrow()
    assert {r["row_key"]: r["fare_amount"] for r in again.to_pylist()} == {"a": 10.0, "b": 25.0, "c": 30.0}
    # Time travel to the first write still shows the old fare.
    old = spark.sql(
        f"SELECT fare_amount FROM {spark_table(raw)} VERSION AS OF {first_snapshot} WHERE row_key = 'b'"
    ).first()[0]
    assert old == 20.0


def test_pyiceberg_appends_are_seen_by_spark(spark, tables):
    """The two engines share one catalog: a commit by one is visible to the other at once."""
    import pyarrow as pa

    weather = registry.WEATHER_RAW
    table = tables.load_table(iceberg_identifier(weather))
    row = {
        "county_code": "30061",
        "county_name": "NY: New York County",
        "date": dt.date(1999, 1, 2),
        "tmax_c": 3.0,
        "tmin_c": -1.0,
        "tavg_c": 1.0,
        "prcp_mm": 0.0,
        "source_status": "scaled",
        "ingested_at": INGESTED_AT,
    }
    table.append(pa.Table.from_pylist([row], schema=table.schema().as_arrow()))
    got = spark.sql(f"SELECT county_code, date, tavg_c FROM {spark_table(weather)} WHERE year(date) = 1999").collect()
    assert [tuple(r) for r in got] == [("30061", dt.date(1999, 1, 2), 1.0)]


@pytest.mark.guards
def test_a_sql_merge_commits_the_summary_properties_it_was_given_and_only_that_commit(spark, tables):
    """commit_properties reaches Iceberg's thread-local commit metadata (core/snapshots.py): the MERGE
    run inside it carries the properties in its snapshot summary; a commit after it does not."""
    from nyc_taxi.core.snapshots import commit_properties

    raw = registry.YELLOW_TAXI_RAW
    _frame(spark, [_trip("p1", dt.datetime(2024, 3, 1, 8, 0), 10.0)]).createOrReplaceTempView("props_batch")
    merge = f"""
        MERGE INTO {spark_table(raw)} t USING props_batch s ON t.row_key = s.row_key
        WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"""
    with commit_properties(spark, {"nyc-taxi.month": "2024-03", "nyc-taxi.rows-added": "1"}):
        spark.sql(merge)
    summary = tables.load_table(iceberg_identifier(raw)).current_snapshot().summary
    assert (summary.get("nyc-taxi.month"), summary.get("nyc-taxi.rows-added")) == ("2024-03", "1")
    _frame(spark, [_trip("p1", dt.datetime(2024, 3, 1, 8, 0), 11.0)]).createOrReplaceTempView("props_batch")
    spark.sql(merge)
    assert tables.load_table(iceberg_identifier(raw)).current_snapshot().summary.get("nyc-taxi.month") is None


def test_a_sessions_passwords_and_keys_reach_spark_but_not_its_jvms_command_line(tmp_path):
    """PySpark hands a session's configuration to spark-submit as command-line arguments, which every
    user of the machine can read: the keys Spark treats as secret go through a 0600 properties file
    instead, removed once the session is up, and arrive intact (Java's escaping of the separators, the
    comment marks, white space and characters beyond ASCII, one beyond U+FFFF too); spark-defaults.conf's
    settings still apply; a session started again in the process gets the new secrets."""
    secret = "p@ss w=rd:#!\\é\t😀" + "x" * 8
    probe = (
        "import json, os, sys, psutil\n"
        "from nyc_taxi.core import spark_jvm\n"
        "from nyc_taxi.core.spark import get_spark, stop_spark\n"
        "conf = spark_jvm.session_conf\n"
        "def with_secrets(value):\n"
        "    spark_jvm.session_conf = lambda *a, **k: {**conf(*a, **k), 'spark.test.password': value,"
        " 'spark.hadoop.fs.test.access.key': 'AKIA' + value}\n"
        "with_secrets(sys.argv[1])\n"
        "spark = get_spark()\n"
        "seen = [spark.conf.get('spark.test.password'), spark.sparkContext.getConf().get('spark.hadoop.fs.test.access.key'),"
        " spark.sparkContext.getConf().get('spark.test.from.defaults', None)]\n"
        "lines = []\n"
        "for p in psutil.Process().children(recursive=True):\n"
        "    try: lines.append(' '.join(p.cmdline()))\n"
        "    except psutil.Error: pass  # exited meanwhile (spark-submit's own launcher)\n"
        "files = [f for f in os.listdir(os.environ['TMPDIR']) if f.startswith('nyc-taxi-spark-')]\n"
        "submit_args = os.environ.get('PYSPARK_SUBMIT_ARGS')\n"
        "stop_spark(); with_secrets('another')\n"
        "again = get_spark().conf.get('spark.test.password')\n"
        "print(json.dumps({'seen': seen, 'jvm': lines, 'files': files, 'submit_args': submit_args, 'again': again}))\n"
    )
    import json
    import os
    import subprocess
    import sys

    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.test.from.defaults  yes\n")
    env = {**os.environ, "TMPDIR": str(tmp_path), "SPARK_CONF_DIR": str(conf_dir)}
    result = subprocess.run([sys.executable, "-c", probe, secret], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["seen"] == [secret, "AKIA" + secret, "yes"]  # both reached the session, intact; defaults too
    assert any("SparkSubmit" in line for line in found["jvm"])  # the driver's JVM, whose command line we read
    assert not any("x" * 8 in line or "spark.test.password" in line for line in found["jvm"])
    assert found["files"] == [] and found["submit_args"] is None  # the file is gone, the environment as it was
    assert found["again"] == "another"
