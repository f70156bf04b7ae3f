"""A new month as a task attached to a warm Spark server sees it (`bash run spark-server`): the server
is started, one task stages and merges a month the lake already holds (what a running server has done
before the next month arrives), then a fresh process downloads, stages and merges a new month; timed
from that process's start, Python's imports included."""

from __future__ import annotations

import json
import subprocess
import sys
import time

# Runs in a fresh process, as an Airflow task would: the steps of the taxi DAG, one after another.
TASK = """
import json, sys, time
started = time.perf_counter()
from nyc_taxi.core.spark import get_spark
from nyc_taxi.ingest import taxi
year, month = int(sys.argv[1]), int(sys.argv[2])
taxi.download_published_file(year, month)
taxi.stage_landed_file(year, month)
taxi.merge_into_raw(year, month)
print(json.dumps({"total_s": time.perf_counter() - started, "application": get_spark().sparkContext.applicationId}))
"""


def _task(env: dict, year: int, month: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", TASK, str(year), str(month)], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(env: dict, settings, known: tuple[int, int], new: tuple[int, int]) -> dict:
    from nyc_taxi.core import spark_server

    started = time.perf_counter()
    record = spark_server.start(settings)
    figures = {"server_start_s": time.perf_counter() - started}
    try:
        figures["known_month"] = _task(env, *known)
        figures["new_month"] = _task(env, *new)
    finally:
        spark_server.stop(settings)
    figures["attached"] = figures["new_month"]["application"] == record["application_id"]
    return figures


def rows(figures: dict) -> list[tuple[str, float]]:
    if not figures["attached"]:
        raise RuntimeError("the new month's task did not attach to the Spark server: its figure would be a cold one")
    new, duckdb_s = figures["new_month"]["total_s"], figures["duckdb_s"]
    return [
        ("warm server: server start-up (once), s", figures["server_start_s"]),
        ("warm server: a month the lake holds, first task, s", figures["known_month"]["total_s"]),
        ("warm server: new month, process start → merged, s", new),
        ("warm server: new month: DuckDB reference, s", duckdb_s),
        ("RATIO new month, task on a warm server / DuckDB  (target <= 2.5)", new / duckdb_s),
    ]
