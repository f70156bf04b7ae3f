"""The warm Spark server (`bash run spark-server`): fresh processes of its state directory attach to it
instead of starting a JVM, write and read the same Iceberg catalog through it, and leave it running;
processes with other Spark settings, or after it stops, start their own JVM."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from nyc_taxi.core import spark_server
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.settings import Settings

# the system lane's: the suite's demo runs its tasks and steps on a warm Spark server
pytestmark = [pytest.mark.spark, pytest.mark.guards, pytest.mark.system]

# A task's view of Spark, in a fresh process: which application answers, whether a JVM is its own child.
PROBE = """
import json, sys, psutil
from nyc_taxi.core.settings import get_settings
from nyc_taxi.core.spark import get_spark, stop_spark
spark = get_spark()
table = f"{get_settings().catalog_name}.{get_settings().database}.server_probe"
spark.sql(f"CREATE TABLE IF NOT EXISTS {table} (writer STRING) USING iceberg")
spark.sql(f"INSERT INTO {table} VALUES ('{sys.argv[1]}')")
view_before = spark.catalog.tableExists("probe_view")  # a temporary view another task left behind?
spark.sql("SELECT 1 AS one").createOrReplaceTempView("probe_view")
writers = sorted(r.writer for r in spark.sql(f"SELECT writer FROM {table}").collect())
jvms = [p for p in psutil.Process().children(recursive=True) if p.name() == "java"]
# A weak reference to this task's session, where a later task can find it: the JVM's system properties.
spark._jvm.System.getProperties().put(f"probe.{sys.argv[1]}", spark._jvm.java.lang.ref.WeakReference(spark._jsparkSession))
print(json.dumps({"application": spark.sparkContext.applicationId, "own_jvm": len(jvms), "writers": writers,
                  "view_before": view_before}))
stop_spark()
"""


# In a task attached later: is an earlier task's session gone from the server's JVM once it is collected?
RELEASED = """
import json, sys, time
from nyc_taxi.core.spark import get_spark
jvm = get_spark()._jvm
session = jvm.System.getProperties().get(sys.argv[1])
for _ in range(10):
    jvm.System.gc()
    if session.get() is None:
        break
    time.sleep(0.2)
print(json.dumps(session.get() is None))
"""


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """A state directory of its own: the server must not serve the other tests' processes."""
    settings = Settings(_env_file=None, state_dir=tmp_path_factory.mktemp("spark-server-state"))
    lakehouse(settings).create()
    yield settings
    spark_server.stop(settings)


def _tasks(settings: Settings, writers: list[str], **env: str) -> list[dict]:
    """Fresh processes running PROBE at the same time, one per writer."""
    running = [
        subprocess.Popen(
            [sys.executable, "-c", PROBE, writer],
            env={**os.environ, "STATE_DIR": str(settings.state_dir), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for writer in writers
    ]
    results = []
    for process in running:
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-3000:]
        results.append({**json.loads(stdout.strip().splitlines()[-1]), "stderr": stderr})
    return results


def _run(settings: Settings, code: str, *args: str) -> str:
    env = {**os.environ, "STATE_DIR": str(settings.state_dir)}
    result = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def _task(settings: Settings, writer: str, **env: str) -> dict:
    return _tasks(settings, [writer], **env)[0]


def test_tasks_attach_to_the_running_server_and_leave_it_running(state):
    with ThreadPoolExecutor(2) as pool:  # two starts at once: one server per state directory
        record, again = pool.map(lambda _: spark_server.start(state), range(2))
    assert again == record and spark_server.start(state) == record
    connection = spark_server.connection_path(state)
    assert stat.S_IMODE(connection.stat().st_mode) == 0o600  # its secret: for its owner only
    assert record["secret"] not in spark_server.log_path(state).read_text()

    first = _task(state, "first")
    second = _task(state, "second")
    # Both ran on the server's application, without a JVM of their own, on one catalog.
    assert first["application"] == second["application"] == record["application_id"]
    assert first["own_jvm"] == second["own_jvm"] == 0
    assert first["writers"] == ["first"]
    assert second["writers"] == ["first", "second"]
    assert not second["view_before"]  # a session of its own: the first task's temporary view is not in it
    # What a task held in the server is let go of: its session (and with it the session's state) ...
    # (not the first task's: threads it made the JVM start keep a reference to the session they started in)
    assert json.loads(_run(state, RELEASED, "probe.second")) is True
    assert spark_server.running(state) == record  # detaching left it running
    both = _tasks(state, ["third", "fourth"])  # at once, as two Airflow tasks of a LocalExecutor would
    assert {t["application"] for t in both} == {record["application_id"]}
    assert all(t["own_jvm"] == 0 for t in both)
    # ... and the connections of its Iceberg catalog (each session opens its own): as many files open after
    # three more tasks as before them
    java = next(p for p in psutil.Process(record["pid"]).children(recursive=True) if p.name() == "java")
    catalog = str(state.state_dir / "catalog")
    open_before = sorted(f.path for f in java.open_files() if f.path.startswith(catalog))
    for writer in ("fifth", "sixth", "seventh"):
        _task(state, writer)
    assert sorted(f.path for f in java.open_files() if f.path.startswith(catalog)) == open_before

    # Other Spark settings, or the server switched off: a JVM of the process's own, same catalog.
    other = _task(state, "other", SPARK_DRIVER_MEMORY="3g")
    assert other["application"] != record["application_id"] and other["own_jvm"] == 1
    assert "started for other Spark settings" in other["stderr"]
    alone = _task(state, "alone", SPARK_SERVER="false")
    assert alone["application"] != record["application_id"] and alone["own_jvm"] == 1
    assert alone["writers"] == ["alone", "fifth", "first", "fourth", "other", "second", "seventh", "sixth", "third"]

    assert spark_server.stop(state)
    assert spark_server.running(state) is None and not connection.exists()
    after = _task(state, "after")
    assert after["application"] != record["application_id"] and after["own_jvm"] == 1
    assert not spark_server.stop(state)


# A task whose write takes 10 s at least (each of its 80 rows sleeps 250 ms in the JVM, on two cores).
SLOW_WRITE = """
from nyc_taxi.core.settings import get_settings
from nyc_taxi.core.spark import get_spark
spark = get_spark()
table = f"{get_settings().catalog_name}.{get_settings().database}.server_probe"
print("writing", flush=True)
spark.sql(f"INSERT INTO {table} SELECT 'killed' FROM range(0, 80, 1, 2) "
          "WHERE reflect('java.lang.Thread', 'sleep', bigint(250)) IS NULL")
print("written", flush=True)
"""

# Another task's view of the server's context: how many of its jobs run now.
ACTIVE_JOBS = """
import json
from nyc_taxi.core.spark import get_spark
print(json.dumps(len(get_spark().sparkContext.statusTracker().getActiveJobsIds())))
"""


@pytest.mark.parametrize("ending", [signal.SIGKILL, signal.SIGINT], ids=["killed", "interrupted"])
def test_a_task_ended_while_its_job_runs_on_the_server_commits_nothing_and_the_server_serves_on(state, ending):
    """An attached task ended mid-write would, unlike a task with its own JVM, leave its job running in
    the server, to commit after Airflow marked it failed and retried it. Killed (SIGKILL: nothing of its
    own runs), the server cancels the jobs of a process that ended; interrupted (Ctrl-C: Python's exit
    runs), the process cancels its own as it lets go of the server. Either way nothing is committed."""
    from nyc_taxi.core.catalog import load_catalog

    record = spark_server.start(state)
    _task(state, "before")  # the table, written once through the server

    def table():
        return load_catalog(state).load_table(f"{state.database}.server_probe")

    snapshots = [s.snapshot_id for s in table().snapshots()]
    env = {**os.environ, "STATE_DIR": str(state.state_dir)}
    writer = subprocess.Popen([sys.executable, "-c", SLOW_WRITE], env=env, stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "writing"
    deadline = time.monotonic() + 60
    while json.loads(_run(state, ACTIVE_JOBS)) == 0:  # its job has started on the server
        assert time.monotonic() < deadline and writer.poll() is None, "the slow write never ran"
    entry = spark_server.clients_path(state) / str(writer.pid)
    assert entry.is_file()
    writer.send_signal(ending)
    assert writer.wait(60) != 0 and writer.stdout.read() == ""  # ended before its write returned
    time.sleep(15)  # longer than what was left of the job (a cancelled job's running tasks end first)
    assert json.loads(_run(state, ACTIVE_JOBS)) == 0  # nothing left running; the snapshots below: nothing committed
    assert [s.snapshot_id for s in table().snapshots()] == snapshots  # nothing committed
    assert not entry.exists()  # the server (killed) or the process (interrupted) took it away
    assert spark_server.running(state) == record and _task(state, "after")["own_jvm"] == 0
    spark_server.stop(state)


def test_a_record_left_by_a_dead_server_is_not_attached_to(tmp_path):
    settings = Settings(_env_file=None, state_dir=tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    path = spark_server.connection_path(settings)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"pid": int(dead.stdout), "port": 1, "secret": "x", "fingerprint": "y", "started": 0}))
    assert spark_server.running(settings) is None
    assert spark_server.attach(settings) is None
