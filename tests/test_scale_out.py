"""Scale-out for real: a Spark standalone master and one worker on 127.0.0.1 (pyspark's own
`spark-class`), the project pointed at it with SPARK_MASTER only; a merge and the actuals computation
there give exactly what an independent computation from the published file gives (the same
expectations every local-mode test is held to)."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from expected_loads import actuals_rows, comparable, expected_actuals, expected_taxi_rows, table_actuals

from nyc_taxi.core import datasets as registry
from nyc_taxi.core.processes import free_port
from nyc_taxi_proving.fixtures.site import add_taxi_month

pytestmark = [pytest.mark.spark, pytest.mark.scale_out]

# Runs in a fresh process (a process has one SparkSession, and its master is fixed at start).
JOB = """
import datetime as dt, json, sys
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.settings import get_settings
from nyc_taxi.core.spark import get_spark
from nyc_taxi.core.tables import ensure_tables
from nyc_taxi.forecast import steps
from nyc_taxi.ingest import taxi

settings = get_settings()
lakehouse(settings).create()
ensure_tables(None, settings)
taxi.download_published_file(2024, 10, settings)
taxi.stage_landed_file(2024, 10, settings)
taxi.merge_into_raw(2024, 10, settings)
steps.compute_actuals(dt.datetime(2024, 10, 20), 7, 24, settings)
spark = get_spark(settings)
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
print(json.dumps({"master": spark.sparkContext.master, "executors": executors}))
"""


def _wait_for(url_port: int, process, log: Path, what: str) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", url_port)) == 0:
                return
        assert process.poll() is None, f"{what} exited:\n{log.read_text()[-3000:]}"
        time.sleep(1)
    raise AssertionError(f"{what} did not listen on 127.0.0.1:{url_port}:\n{log.read_text()[-3000:]}")


@pytest.fixture
def standalone_cluster(tmp_path):
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    port, web, worker_web = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
        "SPARK_HOME": str(spark_class.parent.parent),
    }
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    master = subprocess.Popen(
        [
            str(spark_class),
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(web),
        ],
        env=env,
        stdout=master_log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    worker = None
    try:
        _wait_for(port, master, master_log, "master")
        worker = subprocess.Popen(
            [
                str(spark_class),
                "org.apache.spark.deploy.worker.Worker",
                f"spark://127.0.0.1:{port}",
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "2g",
                "--webui-port",
                str(worker_web),
            ],
            env=env,
            stdout=worker_log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        while "Registering worker" not in master_log.read_text():
            assert worker.poll() is None and time.monotonic() < deadline, worker_log.read_text()[-3000:]
            time.sleep(1)
        yield f"spark://127.0.0.1:{port}", (master.pid, worker.pid)
    finally:
        for process in (worker, master):
            if process is not None:
                process.terminate()
                process.wait(timeout=60)


def _run(master: str, state: Path) -> dict:
    env = {**os.environ, "STATE_DIR": str(state), "SPARK_MASTER": master}
    result = subprocess.run([sys.executable, "-c", JOB], env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-5000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_merge_and_actuals_on_a_standalone_cluster_equal_an_independent_computation(
    standalone_cluster, site, tmp_path, listening_sockets
):
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.core.settings import Settings

    url, pids = standalone_cluster
    path = add_taxi_month(site, 2024, 10, rows=20_000, seed=10)
    cluster = _run(url, tmp_path / "cluster-state")
    assert cluster == {"master": url, "executors": 1}  # really on the cluster
    listeners = listening_sockets(*pids)  # master and worker: RPC and web UIs
    assert len(listeners) >= 4 and {address for _, address, _ in listeners} == {"127.0.0.1"}, listeners

    settings = Settings(state_dir=tmp_path / "cluster-state", profile="local")
    raw = load_table(registry.YELLOW_TAXI_RAW, settings).scan().to_arrow()
    assert raw.num_rows == 20_000 and comparable(raw).equals(comparable(expected_taxi_rows(path)))
    # 7 days back from 2024-10-20 and 24 hours ahead: every hour for every zone active in the window
    expected = expected_actuals([path], dt.datetime(2024, 10, 13), dt.datetime(2024, 10, 21))
    actuals = load_table(registry.YELLOW_RIDES_HOURLY_ACTUALS, settings).scan().to_arrow().to_pylist()
    assert table_actuals(actuals) == actuals_rows(expected)
