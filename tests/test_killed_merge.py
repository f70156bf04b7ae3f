"""A Spark JVM killed hard (SIGKILL) in the middle of a MERGE into yellow_taxi_raw: the table keeps its
previous snapshot and rows, the catalog stays readable, and the next run completes the month."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from nyc_taxi.core import datasets as registry
from nyc_taxi.core.naming import table_location
from nyc_taxi_proving.fixtures.site import add_taxi_month

pytestmark = [pytest.mark.spark, pytest.mark.faults, pytest.mark.system]
YEAR, MONTH = 2024, 11


LOAD = "; ".join(
    f"taxi.{step}({YEAR}, {MONTH}, s)" for step in ("download_published_file", "stage_landed_file", "merge_into_raw")
)


def _step(state: Path, code: str, log: Path, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    """A Python process running ``code`` on the lakehouse in ``state``; its output goes to ``log``."""
    env = {**os.environ, "STATE_DIR": str(state)}
    script = (
        "from nyc_taxi.core.lakehouse import lakehouse\nfrom nyc_taxi.ingest import taxi\n"
        "from nyc_taxi.core.settings import get_settings\nfrom nyc_taxi.core.tables import ensure_tables\n"
        f"s = get_settings(); lakehouse(s).create(); ensure_tables(None, s)\n{code}\n"
    )
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-c", script],
            env=env,
            stdin=stdin,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def _wait_for(process: subprocess.Popen, log: Path, line: str) -> None:
    deadline = time.monotonic() + 600
    while line not in log.read_text().splitlines():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.1)


def _raw(settings):
    from nyc_taxi.core.catalog import load_table

    table = load_table(registry.YELLOW_TAXI_RAW, settings)
    return table.current_snapshot().snapshot_id, table.scan(selected_fields=("row_key", "total_amount")).to_arrow()


def test_sigkill_mid_merge_keeps_the_previous_snapshot_and_the_next_run_completes(site, tmp_path):
    from nyc_taxi.core.settings import Settings

    state = tmp_path / "state"
    settings = Settings(state_dir=state, profile="local")
    path = add_taxi_month(site, YEAR, MONTH, rows=100_000, seed=1)
    # one worker process loads the month, then, told to go on, loads it again once it is republished
    log = tmp_path / "worker.log"
    worker = _step(state, f"{LOAD}\nprint('LOADED', flush=True)\ninput()\n{LOAD}", log, stdin=subprocess.PIPE)
    try:
        _wait_for(worker, log, "LOADED")
        before_snapshot, before = _raw(settings)

        # the month is republished with different values: staging gets it, the merge must rewrite raw
        add_taxi_month(site, YEAR, MONTH, rows=100_000, seed=2)
        data_dir = Path(table_location(registry.YELLOW_TAXI_RAW, settings).removeprefix("file://")) / "data"
        existing = set(data_dir.rglob("*.parquet"))
        # go on: staging writes its own table's files, so raw's new ones appear only once the MERGE writes
        worker.stdin.write("go on\n")
        worker.stdin.close()
        killed = False
        deadline = time.monotonic() + 300
        while worker.poll() is None and time.monotonic() < deadline:
            if set(data_dir.rglob("*.parquet")) - existing:  # the MERGE is writing its new data files
                for child in psutil.Process(worker.pid).children(recursive=True):
                    with contextlib.suppress(psutil.NoSuchProcess):  # a short-lived helper process gone meanwhile
                        if child.name() == "java":
                            os.kill(child.pid, signal.SIGKILL)
                            killed = True
                break
            time.sleep(0.02)
        worker.wait(timeout=300)
    finally:  # whatever failed above, no worker is left waiting with its JVM
        if worker.poll() is None:
            for process in [*psutil.Process(worker.pid).children(recursive=True), psutil.Process(worker.pid)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
    assert killed, "the merge finished before its data files appeared; nothing was killed"
    assert worker.returncode != 0

    after_snapshot, after = _raw(settings)  # the catalog is readable
    assert after_snapshot == before_snapshot
    assert after.num_rows == before.num_rows and after.equals(before)

    # the next run completes the month
    rerun = _step(state, f"taxi.merge_into_raw({YEAR}, {MONTH}, s)", tmp_path / "rerun.log")
    assert rerun.wait(timeout=900) == 0, (tmp_path / "rerun.log").read_text()[-4000:]
    _, final = _raw(settings)
    published = pq.read_table(path, columns=["total_amount"])
    assert final.num_rows == published.num_rows == before.num_rows
    assert round(sum(final.column("total_amount").to_pylist()), 2) == round(
        sum(published.column("total_amount").to_pylist()), 2
    )
    assert round(sum(final.column("total_amount").to_pylist()), 2) != round(
        sum(before.column("total_amount").to_pylist()), 2
    )
