"""`bash run bench api`: how fast Airflow's REST API answers while a taxi month loads, with the tasks at
Airflow's own CPU priority and at the lower one the project gives them (``TASK_NICENESS``).

For each niceness: `bash run airflow standalone` (LocalExecutor, its own throw-away state directory, the
month served on 127.0.0.1) starts, a run of ``ingest_yellow_taxi_data`` is triggered through the REST
API as the UI's Trigger button does, and the run is polled every half second until it ends, each
answer timed. Printed: the answers' p50, p95 and max, how many took over 2 s and 10 s, the run's wall
time, and the ratios of the two rows (same machine, same hour).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nyc_taxi.airflow_adapter.rest_api import RestApi
from nyc_taxi.core.processes import stop_group


class _Standalone:
    """`bash run airflow standalone` in a state directory of its own, on a free port of 127.0.0.1."""

    def __init__(self, state: Path, env: dict[str, str]):
        from nyc_taxi.airflow_adapter.environment import airflow_environment, prepare_directories
        from nyc_taxi.core.lakehouse import lakehouse
        from nyc_taxi.core.processes import free_port
        from nyc_taxi.core.settings import Settings

        self.settings = Settings(state_dir=state, airflow_port=free_port())
        lakehouse(self.settings).create()
        prepare_directories(self.settings)
        self.env = {
            **os.environ,
            **env,
            "STATE_DIR": str(state),
            **airflow_environment(self.settings),
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",  # only the triggered run
        }
        self.log = state / "standalone.log"
        self.api = None

    def __enter__(self) -> RestApi:
        from nyc_taxi.airflow_adapter.rest_api import base_url, healthy

        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"], env=self.env, check=True, capture_output=True
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nyc_taxi.airflow_adapter.standalone"],
            env=self.env,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 300
        while not healthy(base_url(self.settings), parts=("scheduler",)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"airflow standalone did not come up:\n{self.log.read_text()[-3000:]}")
            time.sleep(2)
        self.api = RestApi(self.settings)
        self.api.wait(lambda: self.api.call("/api/v2/dags/ingest_yellow_taxi_data"), 300)  # the DAG is parsed
        return self.api

    def __exit__(self, *exc) -> None:
        from nyc_taxi.core import spark_server

        stop_group(self.process)
        spark_server.stop(self.settings)  # the standalone's warm Spark server: a SIGTERM'd standalone leaves it


def measure(work: Path, site_url: str, niceness: int, month: str) -> dict:
    """One month loaded through the scheduler while its run is polled; the answers' latencies."""
    env = {"TLC_BASE_URL": site_url, "NOAA_BASE_URL": site_url, "TASK_NICENESS": str(niceness)}
    with _Standalone(work / f"niceness-{niceness}", env) as airflow:
        run_id = airflow.trigger("ingest_yellow_taxi_data", {"month": month})
        latencies, state, started = [], None, time.monotonic()
        while state not in ("success", "failed"):
            asked = time.monotonic()
            with contextlib.suppress(OSError):  # no answer within 60 s counts as 60 s
                state = airflow.run("ingest_yellow_taxi_data", run_id)["state"]
            latencies.append(time.monotonic() - asked)
            time.sleep(0.5)
        wall = time.monotonic() - started
    latencies.sort()
    return {
        "niceness": niceness,
        "state": state,
        "run_s": wall,
        "answers": len(latencies),
        "p50_s": statistics.median(latencies),
        "p95_s": latencies[max(0, int(len(latencies) * 0.95) - 1)],
        "max_s": latencies[-1],
        "over_2s": sum(x > 2 for x in latencies),
        "over_10s": sum(x > 10 for x in latencies),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="bash run bench api", description=__doc__)
    parser.add_argument("--rows", type=int, default=3_500_000, help="trips of the month (a real 2024 month: 3.0-3.8M)")
    parser.add_argument("--niceness", type=int, nargs="+", default=[0, 10], help="the tasks' niceness levels compared")
    args = parser.parse_args(argv)

    from nyc_taxi_proving.fixtures.server import FixtureServer
    from nyc_taxi_proving.fixtures.site import add_taxi_month

    work = Path(tempfile.mkdtemp(prefix="bench-api-"))
    add_taxi_month(work / "site", 2024, 1, rows=args.rows, seed=1)
    server = FixtureServer(work / "site")
    url = server.start()
    try:
        results = [measure(work, url, niceness, "2024-01") for niceness in args.niceness]
    finally:
        server.stop()
    print(
        f"\nAirflow's REST API while a month of {args.rows:,} trips loads (bash run bench api, {os.cpu_count()} cores)"
    )
    print(
        f"{'task niceness':>14} {'state':>8} {'run s':>7} {'answers':>8} {'p50 s':>7} {'p95 s':>7} {'max s':>7} {'>2 s':>5} {'>10 s':>6}"
    )
    for r in results:
        print(
            f"{r['niceness']:>14} {r['state']:>8} {r['run_s']:>7.1f} {r['answers']:>8} {r['p50_s']:>7.3f} "
            f"{r['p95_s']:>7.3f} {r['max_s']:>7.3f} {r['over_2s']:>5} {r['over_10s']:>6}"
        )
    if len(results) >= 2:
        first, last = results[0], results[-1]
        print(
            f"RATIO niceness {first['niceness']} / {last['niceness']}: p95 {first['p95_s'] / last['p95_s']:.2f}, "
            f"max {first['max_s'] / last['max_s']:.2f}, run wall {first['run_s'] / last['run_s']:.2f}"
        )
    return results


if __name__ == "__main__":
    main()
