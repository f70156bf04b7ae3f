"""`bash run demo`: the whole job on the embedded local default, offline.

Serves fixture months on 127.0.0.1 (the real download code runs), runs both ingestion DAGs through
Airflow for two taxi months and their weather, runs the training flow as a backtest, and prints
the cross-tool lineage that both tools recorded, with the evaluation figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from nyc_taxi import registry
from nyc_taxi.airflow_env import airflow_environment, datahub_airflow_file, prepare_directories
from nyc_taxi.fixtures.server import FixtureServer
from nyc_taxi.fixtures.site import add_taxi_month, add_weather_month
from nyc_taxi.lineage.destinations import metaflow_datahub_file
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


def _edges(path) -> dict[str, dict]:
    """The latest inputs/outputs each job recorded, from a DataHub record file."""
    if not path.exists():
        return {}
    return {r["entityUrn"]: r["aspect"]["json"] for r in json.loads(path.read_text())
            if r.get("aspectName") == "dataJobInputOutput"}


def _name(urn: str, settings) -> str:
    dataset = registry.by_urn(urn, settings)
    return dataset.name if dataset else urn


def main() -> None:
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

    _say("lineage both tools recorded (DataHub records in .state/lineage/datahub/)")
    airflow_edges, metaflow_edges = _edges(datahub_airflow_file(settings)), _edges(metaflow_datahub_file(settings))
    for tool, edges in (("Airflow", airflow_edges), ("Metaflow", metaflow_edges)):
        for job, io in edges.items():
            task = job.rsplit(",", 1)[1].rstrip(")")
            flow_id = job.split(",")[1]
            inputs = ", ".join(_name(u, settings) for u in io.get("inputDatasets", [])) or "-"
            outputs = ", ".join(_name(u, settings) for u in io.get("outputDatasets", [])) or "-"
            print(f"    [{tool:8s}] {inputs:40s} → {flow_id}.{task} → {outputs}")
    models = [r for r in json.loads(metaflow_datahub_file(settings).read_text()) if r.get("aspectName") == "mlModelProperties"]
    if models:
        jobs = models[-1]["aspect"]["json"]
        trained = ", ".join(u.rsplit(",", 1)[1].rstrip(")") for u in jobs["trainingJobs"])
        used = ", ".join(u.rsplit(",", 1)[1].rstrip(")") for u in jobs["downstreamJobs"])
        print(f"    [Metaflow] model {registry.YELLOW_RIDES_FORECAST_MODEL.name}: trained by {trained}, used by {used}")
    raw = registry.YELLOW_TAXI_RAW.identity(settings).datahub_urn
    written = any(raw in io.get("outputDatasets", []) for io in airflow_edges.values())
    read = any(raw in io.get("inputDatasets", []) for io in metaflow_edges.values())
    print(f"\n    one node for yellow_taxi_raw: {raw}")
    print(f"    written by Airflow: {written}; read by Metaflow: {read}")

    _say("where to look next")
    print("    bash run airflow standalone        # the DAG runs in the Airflow UI (http://localhost:8080)")
    print("    bash run training-flow card get evaluate evaluation.html   # forecast vs actual, as a page")
    print(f"    {settings.lineage_dir}   # DataHub records and OpenLineage events of both tools")
    print("    DATAHUB_GMS_URL=… / OPENLINEAGE_URL=… bash run demo   # the same records to real servers too")


if __name__ == "__main__":
    main()
