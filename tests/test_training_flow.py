"""TrainForecastModelFlow, really run with Metaflow on raw data loaded from fixture months.

Actuals, forecasts and metrics are compared with an independent pyarrow computation over the
fixture files; the lineage is checked against the registry and the official schemas.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from airflow.sdk import Asset
from datahub_airflow_plugin._airflow_asset_adapter import translate_airflow_asset_to_urn

from nyc_taxi.core import datasets as registry
from nyc_taxi.core.catalog import current_snapshot_id, load_table
from nyc_taxi.core.jobs import TRAINING_FLOW
from nyc_taxi.core.naming import identity
from nyc_taxi.core.settings import REPO_ROOT
from nyc_taxi.fixtures.site import add_taxi_month, add_weather_month
from nyc_taxi.lineage.spec import validation_errors
from nyc_taxi.lineage.write.destinations import openlineage_file
from nyc_taxi.lineage.write.outbox import datahub_files, read_datahub_records
from nyc_taxi.metaflow_adapter.environment import metaflow_environment

pytestmark = [pytest.mark.spark, pytest.mark.metaflow]
AS_OF, LOOKBACK, HORIZON = dt.datetime(2024, 10, 8), 14, 24
WINDOW = (AS_OF - dt.timedelta(days=LOOKBACK), AS_OF + dt.timedelta(hours=HORIZON))
FLOW = REPO_ROOT / TRAINING_FLOW.code


def run_flow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **metaflow_environment(), **(env or {})}
    return subprocess.run(
        [sys.executable, str(FLOW), "--no-pylint", "run", *args], env=env, capture_output=True, text=True, timeout=600
    )


def flow_artifacts(run_id: str) -> dict:
    probe = (
        "import json, sys\nfrom metaflow import Run, namespace\nnamespace(None)\n"
        f"run = Run('TrainForecastModelFlow/{run_id}')\nend = run['end'].task.data\n"
        "print(json.dumps({'mae': end.mae, 'wape': end.wape, 'model_version': end.model_version}))"
    )
    env = {**os.environ, **metaflow_environment()}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_id_of(result: subprocess.CompletedProcess) -> str:
    return next(
        line.split("(run-id ")[1].split(")")[0]
        for line in result.stderr.splitlines() + result.stdout.splitlines()
        if "(run-id " in line
    )


@pytest.fixture(scope="module")
def loaded(spark, site):
    """Two taxi months and their weather in raw, through the ingestion code."""
    from nyc_taxi.core.tables import ensure_tables
    from nyc_taxi.ingest import taxi, weather

    ensure_tables()
    files = [add_taxi_month(site, 2024, m, rows=20_000, seed=40 + m) for m in (9, 10)]
    for m in (9, 10):
        add_weather_month(site, 2024, m, seed=m, n_counties=40)
        for step in (
            taxi.download_published_file,
            taxi.stage_landed_file,
            taxi.merge_into_raw,
            weather.download_published_files,
            weather.stage_landed_files,
            weather.merge_into_raw,
        ):
            step(2024, m)
    return files


def expected_actuals(files) -> dict[tuple[int, dt.datetime], int]:
    """Independent: floor to the hour, window and zone filter, zones active in the window get every hour."""
    counts: dict[tuple[int, dt.datetime], int] = {}
    for path in files:
        table = pq.read_table(path, columns=["tpep_pickup_datetime", "PULocationID"])
        for pickup, zone in zip(
            table["tpep_pickup_datetime"].to_pylist(), table["PULocationID"].to_pylist(), strict=False
        ):
            if WINDOW[0] <= pickup < WINDOW[1] and 1 <= zone <= 265:
                key = (zone, pickup.replace(minute=0, second=0, microsecond=0))
                counts[key] = counts.get(key, 0) + 1
    zones = {z for z, _ in counts}
    hours = [WINDOW[0] + dt.timedelta(hours=h) for h in range(int((WINDOW[1] - WINDOW[0]).total_seconds() // 3600))]
    return {(z, h): counts.get((z, h), 0) for z in zones for h in hours}


def table_rows(table: registry.Table, column: str, start: dt.datetime, end: dt.datetime) -> list[dict]:
    arrow = load_table(table).scan().to_arrow()
    mask = pc.and_(pc.greater_equal(arrow[column], start), pc.less(arrow[column], end))
    return arrow.filter(mask).to_pylist()


def ol_events(since: int = 0) -> list[dict]:
    from nyc_taxi.core.settings import get_settings

    path = openlineage_file(get_settings(), "metaflow")
    return [json.loads(line) for line in path.read_text().splitlines()[since:]] if path.exists() else []


def test_backtest_matches_an_independent_computation_and_reruns_change_nothing(loaded, settings):
    mark = len(ol_events())
    result = run_flow(
        "--as_of_datetime", AS_OF.isoformat(), "--lookback_days", str(LOOKBACK), "--predict_horizon_hours", str(HORIZON)
    )
    assert result.returncode == 0, result.stderr[-4000:]
    run_id = run_id_of(result)

    expected = expected_actuals(loaded)
    got = {
        (r["pickup_location_id"], r["pickup_hour"]): r["ride_count"]
        for r in table_rows(registry.YELLOW_RIDES_HOURLY_ACTUALS, "pickup_hour", *WINDOW)
    }
    assert got == expected

    # Every forecast is the actual of the same zone 168 hours earlier (zero where there is none).
    training_zones = {z for (z, h), _ in expected.items() if h < AS_OF}
    forecasts = {
        (r["pickup_location_id"], r["forecast_hour"]): r
        for r in table_rows(registry.YELLOW_RIDES_HOURLY_FORECAST, "forecast_hour", AS_OF, WINDOW[1])
    }
    assert set(forecasts) == {(z, AS_OF + dt.timedelta(hours=h)) for z in training_zones for h in range(HORIZON)}
    for (zone, hour), row in forecasts.items():
        assert row["predicted_ride_count"] == expected.get((zone, hour - dt.timedelta(hours=168)), 0)
    artifacts = flow_artifacts(run_id)
    assert {r["model_version"] for r in forecasts.values()} == {artifacts["model_version"]}
    assert artifacts["model_version"].startswith(f"TrainForecastModelFlow/{run_id}/train_forecasting_model/")

    # MAE and WAPE equal an independent computation.
    errors = [abs(row["predicted_ride_count"] - expected[key]) for key, row in forecasts.items()]
    actual_total = sum(expected[key] for key in forecasts)
    assert artifacts["mae"] == pytest.approx(sum(errors) / len(errors))
    assert artifacts["wape"] == pytest.approx(sum(errors) / actual_total)

    # Lineage: valid events, the registry's identities, step order, the seam to Airflow.
    events = ol_events(mark)
    assert all(validation_errors(e) == [] for e in events)
    complete = {e["job"]["name"].split(".", 1)[-1]: e for e in events if e["eventType"] == "COMPLETE"}
    ident = {d.name: identity(d, settings) for d in registry.DATASETS.values()}
    assert [(i["namespace"], i["name"]) for i in complete["compute_actuals"]["inputs"]] == [
        (ident["yellow_taxi_raw"].ol_namespace, ident["yellow_taxi_raw"].ol_name)
    ]
    assert [o["name"] for o in complete["compute_actuals"]["outputs"]] == [ident["yellow_rides_hourly_actuals"].ol_name]
    assert [o["name"] for o in complete["train_forecasting_model"]["outputs"]] == [
        ident["yellow_rides_forecast_model"].ol_name
    ]
    assert [i["name"] for i in complete["predict"]["inputs"]] == [ident["yellow_rides_forecast_model"].ol_name]
    assert [d["job"]["name"] for d in complete["predict"]["run"]["facets"]["jobDependencies"]["upstream"]] == [
        "TrainForecastModelFlow.train_forecasting_model"
    ]
    parent = complete["predict"]["run"]["facets"]["parent"]
    assert (
        parent["job"]["name"] == "TrainForecastModelFlow"
        and complete["TrainForecastModelFlow"]["run"]["runId"] == parent["run"]["runId"]
    )
    assert complete["predict"]["job"]["facets"]["jobType"]["integration"] == "METAFLOW"
    raw_snapshot = current_snapshot_id(registry.YELLOW_TAXI_RAW)
    assert complete["compute_actuals"]["inputs"][0]["facets"]["version"]["datasetVersion"] == str(raw_snapshot)

    records = read_datahub_records(settings, "metaflow")
    io = {
        r["entityUrn"].rsplit(",", 1)[1].rstrip(")"): r["aspect"]["json"]
        for r in records
        if r["aspectName"] == "dataJobInputOutput"
    }
    airflow_raw_urn = translate_airflow_asset_to_urn(Asset(uri=ident["yellow_taxi_raw"].asset_uri))
    assert io["compute_actuals"]["inputDatasets"] == [airflow_raw_urn]  # the node Airflow's merge task writes
    model = [r["aspect"]["json"] for r in records if r["aspectName"] == "mlModelProperties"][-1]
    assert [u.rsplit(",", 1)[1] for u in model["trainingJobs"] + model["downstreamJobs"]] == [
        "train_forecasting_model)",
        "predict)",
        "write_forecasts_to_table)",
    ]
    for record_file in datahub_files(settings, "metaflow"):
        check = subprocess.run(
            [sys.executable, "-m", "datahub", "check", "metadata-file", str(record_file)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert check.returncode == 0, check.stdout[-2000:]

    # A re-run duplicates nothing and leaves the actuals table's snapshot alone.
    actuals_snapshot = current_snapshot_id(registry.YELLOW_RIDES_HOURLY_ACTUALS)
    again = run_flow(
        "--as_of_datetime", AS_OF.isoformat(), "--lookback_days", str(LOOKBACK), "--predict_horizon_hours", str(HORIZON)
    )
    assert again.returncode == 0, again.stderr[-4000:]
    assert current_snapshot_id(registry.YELLOW_RIDES_HOURLY_ACTUALS) == actuals_snapshot
    rerun_forecasts = table_rows(registry.YELLOW_RIDES_HOURLY_FORECAST, "forecast_hour", AS_OF, WINDOW[1])
    assert len(rerun_forecasts) == len(forecasts)

    # `resume` from evaluate: earlier steps are cloned, not re-run; the new run records its origin.
    mark = len(ol_events())
    env = {**os.environ, **metaflow_environment()}
    resumed = subprocess.run(
        [sys.executable, str(FLOW), "--no-pylint", "resume", "evaluate", "--origin-run-id", run_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    events = ol_events(mark)
    started = [e["job"]["name"] for e in events if e["eventType"] == "START"]
    assert started == ["TrainForecastModelFlow", "TrainForecastModelFlow.evaluate", "TrainForecastModelFlow.end"]
    tags = {t["key"]: t["value"] for t in events[1]["run"]["facets"]["tags"]["tags"]}
    assert tags["metaflow.origin_run_id"] == run_id


def test_weather_variant_reads_weather_raw_and_is_a_new_job_version(loaded, settings, lineage_backend):
    # with a live OpenLineage backend too: it gets each event once, the same as the local file
    backend = lineage_backend(201)
    mark = len(ol_events())
    result = run_flow(
        "--as_of_datetime",
        AS_OF.isoformat(),
        "--lookback_days",
        str(LOOKBACK),
        "--model",
        "weather_adjusted",
        env={"OPENLINEAGE_URL": backend.url},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    events = ol_events(mark)
    # the local files are shipped at the end of every step: the backend got every event they hold, once, in order
    from nyc_taxi.lineage.write.destinations import openlineage_events_dir
    from nyc_taxi.lineage.write.outbox import read_openlineage_file

    local = [
        e for path in sorted(openlineage_events_dir(settings).glob("*.jsonl")) for e in read_openlineage_file(path)
    ]
    assert backend.events() == local and events == local[-len(events) :]
    prepare = next(
        e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".prepare_training_data")
    )
    assert {i["name"] for i in prepare["inputs"]} == {
        identity(registry.YELLOW_RIDES_HOURLY_ACTUALS).ol_name,
        identity(registry.WEATHER_RAW).ol_name,
    }
    earlier = [
        e
        for e in ol_events()[:mark]
        if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".prepare_training_data")
    ]

    def version(e):
        return e["job"]["facets"]["tags"]["tags"][0]["value"]

    assert earlier and version(prepare) != version(earlier[-1])
    records = read_datahub_records(settings, "metaflow")
    latest = [
        r["aspect"]["json"]
        for r in records
        if r["aspectName"] == "dataJobInputOutput" and r["entityUrn"].endswith(",prepare_training_data)")
    ][-1]
    assert identity(registry.WEATHER_RAW).datahub_urn in latest["inputDatasets"]


def test_as_of_without_data_fails_clearly_and_lineage_shows_the_failure(loaded):
    mark = len(ol_events())
    result = run_flow("--as_of_datetime", "2019-03-01T00:00", "--lookback_days", "14")
    assert result.returncode != 0
    assert (
        "no yellow taxi trips in yellow_taxi_raw between 2019-02-15 00:00:00 and 2019-03-02 00:00:00"
        in result.stdout + result.stderr
    )
    events = ol_events(mark)
    failed = {e["job"]["name"]: e for e in events if e["eventType"] == "FAIL"}
    assert (
        "no yellow taxi trips"
        in failed["TrainForecastModelFlow.compute_actuals"]["run"]["facets"]["errorMessage"]["message"]
    )
    assert "TrainForecastModelFlow" in failed
    assert all(validation_errors(e) == [] for e in events)
