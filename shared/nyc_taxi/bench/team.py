"""`bash run bench team`: what the team deployment costs against the local profile, on this machine,
in one run: `bash run demo` under each profile (each in a throw-away state directory), then one new
month under each — its taxi and weather DAG runs and the training run after them, up to the forecasts.

- local: `dag.test()` runs in one process, Spark in local mode attached to one warm driver, SQLite
  under Airflow and the Iceberg catalog, the lake on disk;
- team: PostgreSQL, Redis, SeaweedFS, a Spark standalone cluster and Airflow on the CeleryExecutor
  under supervisord (`bash run team up` inside the demo's time); the runs are triggered through the
  REST API and the scheduler
  starts the training run from the merge's asset event; every task and step is a Spark application
  of its own on the cluster.

Printed: each row's seconds and the ratio team / local of each. No target: the team profile trades
single-machine speed for what a deployment needs (many writers, workers that can be lost, a shared
catalog and storage); the figures say what that costs on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NEW_MONTH = (2024, 3)  # the month after the demo's two


def _environment(state: Path, profile: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OPENLINEAGE"))}
    return env | {"STATE_DIR": str(state), "PROFILE": profile}


def _timed(command: list[str], env: dict[str, str], log: Path) -> float:
    started = time.perf_counter()
    with log.open("a") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: see {log}")
    return time.perf_counter() - started


def _new_month(state: Path, profile: str, env: dict[str, str], log: Path) -> float:
    """The month's two ingestion runs and the training run after them, on the demo's lake."""
    from nyc_taxi.airflow_adapter.environment import airflow_environment
    from nyc_taxi.cli.demo import ROWS
    from nyc_taxi.core import jobs
    from nyc_taxi.core.settings import Settings, state_settings_file
    from nyc_taxi.fixtures.server import FixtureServer
    from nyc_taxi.fixtures.site import add_taxi_month, add_weather_month

    year, month = NEW_MONTH
    site = state / "demo-site"
    add_taxi_month(site, year, month, rows=ROWS, seed=month)
    add_weather_month(site, year, month, seed=month)
    label = f'{{"month": "{year:04d}-{month:02d}"}}'
    runs = [f"{jobs.INGEST_YELLOW_TAXI_DATA.name}:{label}", f"{jobs.INGEST_WEATHER_DATA.name}:{label}"]
    with FixtureServer(site) as url:
        settings = Settings(state_dir=state, profile=profile)
        env = env | {"TLC_BASE_URL": url, "NOAA_BASE_URL": url, **airflow_environment(settings)}
        if profile == "team":  # the deployment's tasks read the sources from the state's settings file
            state_settings_file(state).write_text(f"TLC_BASE_URL={url}\nNOAA_BASE_URL={url}\n")
        else:  # the scheduler starts it on the team profile; here it runs after the merges
            as_of = f'{{"as_of_datetime": "{year:04d}-{month + 1:02d}-01T00:00"}}'
            runs.append(f"{jobs.TRAIN_FORECAST_MODEL.name}:{as_of}")
        try:
            return _timed([sys.executable, "-m", "nyc_taxi.airflow_adapter.dag_runs", *runs], env, log)
        finally:
            state_settings_file(state).unlink(missing_ok=True)


def measure(profile: str, work: Path) -> dict:
    state = work / profile
    env, log = _environment(state, profile), work / f"{profile}.log"
    print(f"... {profile}: the demo (log: {log})", flush=True)
    try:
        demo = _timed([sys.executable, "-m", "nyc_taxi.cli.demo", "--images", str(work / "images")], env, log)
        print(f"... {profile}: one new month", flush=True)
        month = _new_month(state, profile, env, log)
    finally:
        if profile == "team":
            subprocess.run([sys.executable, "-m", "nyc_taxi.cli.team", "down", "--delete-data"], env=env, check=False)
    return {"profile": profile, "demo_s": round(demo, 1), "new_month_s": round(month, 1)}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="bash run bench team", description=__doc__)
    parser.add_argument("--keep", action="store_true", help="keep the state directories (their paths are printed)")
    parser.add_argument("--only", choices=["local", "team"], help="one profile's figures (no ratio)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-team-"))
    try:
        results = [measure(profile, work) for profile in ("local", "team") if args.only in (None, profile)]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept: {work}")
    if args.only:
        print(json.dumps(results))
        return results
    local, team = results
    print(f"\nthe local profile against the team deployment (bash run bench team, {os.cpu_count()} cores)")
    print(f"{'':<44} {'local s':>8} {'team s':>8} {'team/local':>11}")
    for key, what in (("demo_s", "bash run demo"), ("new_month_s", "one new month: taxi, weather, training")):
        print(f"{what:<44} {local[key]:>8.1f} {team[key]:>8.1f} {team[key] / local[key]:>11.2f}")
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
