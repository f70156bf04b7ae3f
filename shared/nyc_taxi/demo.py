"""`bash run demo`: the whole job on the embedded local default, offline.

Serves fixture months on 127.0.0.1 (the real download code runs), runs both ingestion DAGs through
Airflow for two taxi months and their weather, runs the training flow as a backtest, and prints
the cross-tool lineage that both tools recorded (loaded into DataHub Lite), with the evaluation
figures, and writes the lineage picture to images/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from nyc_taxi import registry
from nyc_taxi.airflow_env import airflow_environment, prepare_directories
from nyc_taxi.fixtures.server import FixtureServer
from nyc_taxi.fixtures.site import add_taxi_month, add_weather_month
from nyc_taxi.lineage.datahub_server import ingest_catalog
from nyc_taxi.lineage.graph import load_graph
from nyc_taxi.lineage.picture import write_picture
from nyc_taxi.metaflow_env import metaflow_environment
from nyc_taxi.settings import REPO_ROOT, get_settings

MONTHS = ((2024, 1), (2024, 2))
AS_OF = "2024-02-15T00:00"
ROWS = 200_000


def _say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def _run(args: list[str], env: dict, what: str) -> subprocess.CompletedProcess:
    started = time.perf_counter()
    result = subprocess.run(args, env=env, capture_output=True, text=True)
    if result.returncode:
        print((result.stdout + result.stderr)[-4000:])
        raise SystemExit(f"{what} failed (exit {result.returncode})")
    print(f"    {what}: ok ({time.perf_counter() - started:.0f} s)", flush=True)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bash run demo", description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, default=REPO_ROOT / "images", help="where the lineage picture goes")
    args = parser.parse_args(argv)
    settings = get_settings()
    from nyc_taxi import infra

    _say(f"lakehouse ({settings.profile} profile) under {settings.state_dir}")
    for line in infra.create(settings):
        print(f"    {line}")

    site = settings.state_dir / "demo-site"
    _say(f"fixture months on 127.0.0.1 ({ROWS:,} trips per taxi month; the real sites are not contacted)")
    for year, month in MONTHS:
        add_taxi_month(site, year, month, rows=ROWS, seed=month)
        add_weather_month(site, year, month, seed=month)
    server = FixtureServer(site)
    url = server.start()
    env = {**os.environ, "TLC_BASE_URL": url, "NOAA_BASE_URL": url, **airflow_environment(settings),
           **metaflow_environment(settings)}
    prepare_directories(settings)
    try:
        _say("Airflow: both ingestion DAGs, one run per month (airflow dags test)")
        _run([sys.executable, "-m", "airflow", "db", "migrate"], env, "airflow db migrate")
        for year, month in MONTHS:
            conf = json.dumps({"month": f"{year:04d}-{month:02d}"})
            for dag_id in ("ingest_yellow_taxi_data", "ingest_weather_data"):
                _run([sys.executable, "-m", "airflow", "dags", "test", dag_id, "--conf", conf], env,
                     f"{dag_id} {year:04d}-{month:02d}")

        _say(f"Metaflow: TrainForecastModelFlow backtest as of {AS_OF}")
        flow = _run([sys.executable, str(REPO_ROOT / "metaflow" / "train_model_flow.py"), "--no-pylint", "run",
                     "--as_of_datetime", AS_OF, "--lookback_days", "28"], env, "TrainForecastModelFlow")
    finally:
        server.stop()
    print("    " + next((line.split("] ", 1)[-1] for line in flow.stdout.splitlines() + flow.stderr.splitlines()
                         if "MAE" in line), "no evaluation line found"))

    _say("DataHub's own Iceberg source on the catalog (schemas and properties, the same URNs)")
    print(f"    {ingest_catalog(settings)}")

    _say("cross-tool lineage of the forecast table, from DataHub Lite (bash run lineage yellow_rides_hourly_forecast)")
    graph = load_graph(settings)
    print("    " + graph.tree(graph.resolve(registry.YELLOW_RIDES_HOURLY_FORECAST.name)).replace("\n", "\n    "))
    raw = graph.resolve(registry.YELLOW_TAXI_RAW.name)
    writers = sorted({graph.nodes[s].tool for s, t, k in graph.edges if t == raw and k == "write"})
    readers = sorted({graph.nodes[t].tool for s, t, k in graph.edges if s == raw and k == "read"})
    print(f"\n    one node for yellow_taxi_raw ({raw}): written by {', '.join(writers)}, read by {', '.join(readers)}")
    svg, page = write_picture(graph, args.images)
    print(f"    the whole graph: {svg} (open {page} in a browser)")

    _say("where to look next")
    print("    bash run lineage yellow_taxi_raw     # any dataset or job, --json, --runs <job>")
    print("    bash run airflow standalone          # the DAG runs in the Airflow UI (http://localhost:8080)")
    print("    bash run training-flow card get evaluate evaluation.html   # forecast vs actual, as a page")
    print("    DATAHUB_GMS_URL=http://localhost:8080 bash run datahub-push  # the same records in a real DataHub")


if __name__ == "__main__":
    main()
