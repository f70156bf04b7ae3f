"""TrainForecastModelFlow, really run with Metaflow on raw data loaded from fixture months.

Actuals, forecasts and metrics are compared with an independent pyarrow computation over the
fixture files; the lineage is checked against the registry and the official schemas.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

import pyarrow.compute as pc
import pytest
from airflow.sdk import Asset
from datahub_check import assert_valid_record_files
from expected_loads import (
    actuals_rows,
    expected_actuals,
    expected_daily_prcp,
    expected_weather_adjusted,
    table_actuals,
)
from plugin_internals import translate_airflow_asset_to_urn
from process_tree import java_descendants

from nyc_taxi.core import datasets as registry
from nyc_taxi.core.catalog import current_snapshot_id, load_table
from nyc_taxi.core.jobs import TRAINING_FLOW
from nyc_taxi.core.naming import identity
from nyc_taxi.core.settings import REPO_ROOT
from nyc_taxi.lineage.spec import validation_errors
from nyc_taxi.lineage.write.destinations import openlineage_file
from nyc_taxi.lineage.write.outbox import datahub_files, read_datahub_records
from nyc_taxi.metaflow_adapter.environment import metaflow_environment
from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month

pytestmark = [pytest.mark.spark, pytest.mark.metaflow]
AS_OF, LOOKBACK, HORIZON = dt.datetime(2024, 10, 8), 14, 24
WINDOW = (AS_OF - dt.timedelta(days=LOOKBACK), AS_OF + dt.timedelta(hours=HORIZON))
FLOW = REPO_ROOT / TRAINING_FLOW.code


def run_flow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The flow's `run`; its ``jvms``: the Java processes among its descendants, looked for every half
    second (its Spark steps' own JVMs: none when they attach to a warm Spark server)."""
    env = {**os.environ, **metaflow_environment(), **(env or {})}
    command = [sys.executable, str(FLOW), "--no-pylint", "run", *args]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=err, text=True)
        jvms, deadline = set(), time.monotonic() + 600
        while process.poll() is None:
            if time.monotonic() > deadline:
                process.kill()
                raise subprocess.TimeoutExpired(command, 600)
            jvms |= java_descendants(process.pid)
            time.sleep(0.5)
        out.seek(0)
        err.seek(0)
        result = subprocess.CompletedProcess(command, process.returncode, out.read(), err.read())
    result.jvms = jvms
    return result


def flow_artifacts(run_id: str) -> dict:
    probe = (
        "import json, sys\nfrom metaflow import Run, namespace\nnamespace(None)\n"
        f"run = Run('TrainForecastModelFlow/{run_id}')\nend = run['end'].task.data\n"
        "trained = run['train_forecasting_model'].task.data.trained\n"
        "print(json.dumps({'mae': end.mae, 'wape': end.wape, 'model_version': end.model_version,\n"
        "                  'wet_factor': getattr(trained.model, 'wet_factor', None)}))"
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
def warm_spark(spark, settings):
    """The module's flows attach to a warm Spark server of the session's state directory, as a flow does
    while `bash run airflow standalone` runs (after the worker's own session: it stays its own); the weather
    variant's flow starts a JVM per Spark step instead (``SPARK_SERVER=false``), as with no server."""
    from nyc_taxi.core import spark_server

    with spark_server.warm(settings, say=lambda _: None) as record:
        assert record is not None, "no Spark server started for the module (one ran already, or it failed)"
        yield record


@pytest.fixture(scope="module")
def loaded(spark, site, warm_spark):
    """Two taxi months and their weather in raw, through the ingestion code; the module's flows attach to
    its warm Spark server."""
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


def table_rows(table: registry.Table, column: str, start: dt.datetime, end: dt.datetime) -> list[dict]:
    arrow = load_table(table).scan().to_arrow()
    mask = pc.and_(pc.greater_equal(arrow[column], start), pc.less(arrow[column], end))
    return arrow.filter(mask).to_pylist()


def ol_events(since: int = 0) -> list[dict]:
    from nyc_taxi.core.settings import get_settings

    path = openlineage_file(get_settings(), "metaflow")
    return [json.loads(line) for line in path.read_text().splitlines()[since:]] if path.exists() else []


BACKTEST = (
    "--as_of_datetime",
    AS_OF.isoformat(),
    "--lookback_days",
    str(LOOKBACK),
    "--predict_horizon_hours",
    str(HORIZON),
)


@pytest.fixture(scope="module")
def backtest(loaded, settings):
    """The seasonal-naive backtest, run once: its run id, its OpenLineage events and DataHub records, and
    the actuals and forecasts it left (a later run replaces the forecasts' model version). The tests
    that compare with it ask for it, so each of them passes alone."""
    mark, records = len(ol_events()), len(read_datahub_records(settings, "metaflow"))
    result = run_flow(*BACKTEST)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.jvms == set(), result.jvms  # its steps attached to the module's warm Spark server
    return SimpleNamespace(
        run_id=run_id_of(result),
        events=ol_events(mark),
        records=read_datahub_records(settings, "metaflow")[records:],
        actuals=table_rows(registry.YELLOW_RIDES_HOURLY_ACTUALS, "pickup_hour", *WINDOW),
        actuals_snapshot=current_snapshot_id(registry.YELLOW_RIDES_HOURLY_ACTUALS),
        forecasts=table_rows(registry.YELLOW_RIDES_HOURLY_FORECAST, "forecast_hour", AS_OF, WINDOW[1]),
    )


def _forecasts(rows: list[dict]) -> list[tuple]:
    """Forecast rows as (zone, hour, forecast), sorted: what a run forecast, whichever run wrote it."""
    return sorted((r["pickup_location_id"], r["forecast_hour"], r["predicted_ride_count"]) for r in rows)


@pytest.fixture(scope="module")
def rerun(backtest, tmp_path_factory):
    """The backtest run again, as a user re-runs a flow, while both lineage servers misbehave: the
    OpenLineage server is killed after a few events, the DataHub server answers 500 throughout; with a
    token and an API key. One run for two claims: a re-run changes nothing, and lineage servers that die
    or refuse cost the flow no record and no secret."""
    from lineage_receiver import Receiver

    root = tmp_path_factory.mktemp("rerun")
    openlineage = Receiver(root / "openlineage.jsonl").start("die-after:6")
    datahub = Receiver(root / "datahub.jsonl").start("fail-first:100000")
    secret = {"DATAHUB_GMS_TOKEN": "dh-" + secrets.token_hex(16), "OPENLINEAGE_API_KEY": "ol-" + secrets.token_hex(16)}
    try:
        mark = len(ol_events())
        result = run_flow(*BACKTEST, env={"OPENLINEAGE_URL": openlineage.url, "DATAHUB_GMS_URL": datahub.url, **secret})
        assert result.returncode == 0, result.stderr[-4000:]
        yield SimpleNamespace(
            result=result,
            events=ol_events(mark),
            actuals_snapshot=current_snapshot_id(registry.YELLOW_RIDES_HOURLY_ACTUALS),
            forecasts=table_rows(registry.YELLOW_RIDES_HOURLY_FORECAST, "forecast_hour", AS_OF, WINDOW[1]),
            openlineage=openlineage,
            datahub=datahub,
            secret=secret,
        )
    finally:
        openlineage.stop()
        datahub.stop()


@pytest.mark.guards
def test_backtest_matches_an_independent_computation_and_reruns_change_nothing(loaded, backtest, rerun, settings):
    run_id, events = backtest.run_id, backtest.events

    expected = expected_actuals(loaded, *WINDOW)
    assert table_actuals(backtest.actuals) == actuals_rows(expected)

    # Every forecast is the actual of the same zone 168 hours earlier (zero where there is none).
    training_zones = {z for (z, h), _ in expected.items() if h < AS_OF}
    forecast_rows = backtest.forecasts
    forecasts = {(r["pickup_location_id"], r["forecast_hour"]): r for r in forecast_rows}
    assert len(forecast_rows) == len(forecasts)  # one row per zone and hour
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

    records = backtest.records
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
    assert_valid_record_files(datahub_files(settings, "metaflow"))

    # A re-run duplicates nothing and leaves the actuals table's snapshot alone.
    assert rerun.actuals_snapshot == backtest.actuals_snapshot
    assert _forecasts(rerun.forecasts) == _forecasts(backtest.forecasts)

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
    # its staleness is judged from the raw version the run it resumed read, whose compute_actuals it cloned
    from nyc_taxi.lineage.read.runs import Runs
    from nyc_taxi.lineage.read.stale import flow_runs

    runs = Runs.read(settings)
    resumed_id = next(e["run"]["runId"] for e in events if e["job"]["name"] == TRAINING_FLOW.name)
    again = runs.by_id[resumed_id]
    cloned = {s.job.split(".")[-1]: s for s in runs.steps(again)}["compute_actuals"]
    assert cloned.parent[1] == complete["TrainForecastModelFlow"]["run"]["runId"]
    assert cloned.inputs[registry.YELLOW_TAXI_RAW.name] == str(raw_snapshot)
    assert again.label in flow_runs(runs)


def test_weather_variant_reads_weather_raw_is_a_new_job_version_and_forecasts_as_computed(
    loaded, backtest, site, settings, lineage_backend, tmp_path
):
    # with a live OpenLineage backend too, named in an openlineage.yml (OpenLineage's own configuration):
    # it gets each event once, the same as the local file
    backend = lineage_backend(201)
    config = tmp_path / "openlineage.yml"
    config.write_text(json.dumps({"transport": {"type": "http", "url": backend.url}}))
    mark = len(ol_events())
    # this flow's Spark steps start JVMs of their own (no warm server: as a flow run with none running)
    own_jvms = {"SPARK_SERVER": "false"}
    result = run_flow(*BACKTEST, "--model", "weather_adjusted", env={"OPENLINEAGE_CONFIG": str(config), **own_jvms})
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.jvms, "the flow's Spark steps started no JVM of their own"
    events = ol_events(mark)
    # the local files are shipped at the end of every step: the backend got every event they held at the
    # last step's end, file after file, each once and in order. Another test's Airflow tasks may have
    # appended to their file since (they ship at their own ends); this run's events were all shipped.
    from nyc_taxi.lineage.write.destinations import openlineage_events_dir
    from nyc_taxi.lineage.write.outbox import read_openlineage_file

    received, at = backend.events(), 0
    for path in sorted(openlineage_events_dir(settings).glob("*.jsonl")):
        held = read_openlineage_file(path)
        for event in held:
            if at == len(received) or received[at] != event:
                break
            at += 1
    assert at == len(received), f"the backend got events the local files do not hold there: {received[at]}"
    assert received[-len(events) :] == events
    prepare = next(
        e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".prepare_training_data")
    )
    assert {i["name"] for i in prepare["inputs"]} == {
        identity(registry.YELLOW_RIDES_HOURLY_ACTUALS).ol_name,
        identity(registry.WEATHER_RAW).ol_name,
    }
    seasonal = next(
        e
        for e in backtest.events
        if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".prepare_training_data")
    )

    def version(e):
        return e["job"]["facets"]["tags"]["tags"][0]["value"]

    assert version(prepare) != version(seasonal)
    records = read_datahub_records(settings, "metaflow")
    latest = [
        r["aspect"]["json"]
        for r in records
        if r["aspectName"] == "dataJobInputOutput" and r["entityUrn"].endswith(",prepare_training_data)")
    ][-1]
    assert identity(registry.WEATHER_RAW).datahub_urn in latest["inputDatasets"]

    # the forecasts equal an independent computation from the fixture files (counts and rain)
    factor, expected = expected_weather_adjusted(
        expected_actuals(loaded, *WINDOW), expected_daily_prcp(site, [(2024, 9), (2024, 10)]), AS_OF, HORIZON
    )
    rows = table_rows(registry.YELLOW_RIDES_HOURLY_FORECAST, "forecast_hour", AS_OF, WINDOW[1])
    by_model: dict[str, list[dict]] = {}
    for row in rows:
        by_model.setdefault(row["model_name"], []).append(row)
    # kept beside the seasonal model's forecasts of the same origin, which it left as they were
    assert set(by_model) == {"seasonal_naive", "weather_adjusted"}
    assert _forecasts(by_model["seasonal_naive"]) == _forecasts(backtest.forecasts)
    rows = by_model["weather_adjusted"]
    assert {r["as_of_datetime"] for r in rows} == {AS_OF} and len(rows) == len(expected)
    for row in rows:
        assert row["predicted_ride_count"] == pytest.approx(
            expected[(row["pickup_location_id"], row["forecast_hour"])], rel=1e-9
        ), row
    # the model learned that factor (and it is not a neutral 1: the weather changed the model)
    assert flow_artifacts(run_id_of(result))["wet_factor"] == pytest.approx(factor, rel=1e-9) and factor != 1.0

    # both models' forecasts of the origin scored; the model's featured metrics in DataHub: each model's WAPE
    # over the origins every model was scored at whole (the scores table's, summed here), and the datasets
    # it was measured on
    rows = load_table(registry.YELLOW_RIDES_FORECAST_SCORES).scan().to_arrow().to_pylist()
    at_origin = {r["model_name"]: r for r in rows if r["as_of_datetime"] == AS_OF}
    assert set(at_origin) == {"seasonal_naive", "weather_adjusted"}
    assert {s["coverage"] for s in at_origin.values()} == {1}
    whole: dict = {}
    for r in rows:
        if r["coverage"] == 1 and r["wape"] is not None:
            whole.setdefault(r["as_of_datetime"], {})[r["model_name"]] = r
    compared = [  # both models, over the same zone-hours
        o
        for o, by_model in whole.items()
        if set(by_model) == {"seasonal_naive", "weather_adjusted"}
        and len({(r["first_hour"], r["last_hour"], r["forecast_zone_hours"]) for r in by_model.values()}) == 1
    ]
    assert AS_OF in compared
    model = identity(registry.YELLOW_RIDES_FORECAST_MODEL).datahub_urn
    written = [r for r in read_datahub_records(settings, "metaflow") if r["entityUrn"] == model]
    measures = [r["aspect"]["json"] for r in written if r["aspectName"] == "mlModelMetrics"][-1]["performanceMeasures"]
    for name in ("seasonal_naive", "weather_adjusted"):
        errors = sum(whole[o][name]["mae"] * whole[o][name]["scored_zone_hours"] for o in compared)
        wape = errors / sum(whole[o][name]["actual_rides"] for o in compared)
        [line] = [m for m in measures if m.startswith(f"{name}: ")]
        assert f"WAPE {wape:.1%} over the {len(compared)} origins every model was scored at whole" in line, line
    evaluated = [r["aspect"]["json"] for r in written if r["aspectName"] == "mlModelEvaluationData"][-1]
    assert {e["dataset"] for e in evaluated["evaluationData"]} == {
        identity(t).datahub_urn for t in (registry.YELLOW_RIDES_HOURLY_FORECAST, registry.YELLOW_RIDES_HOURLY_ACTUALS)
    }


def test_the_users_path_trains_at_the_latest_origin_with_the_users_metaflow_profile_and_openlineage_off(
    loaded, backtest, settings, lineage_backend, receiver, tmp_path
):
    """`bash run training-flow run`, exactly as the README's path writes it, on a machine whose user has a
    Metaflow profile of their own (METAFLOW_PROFILE: its own datastore and metadata) and has turned
    OpenLineage off in Airflow's settings (an airflow.cfg named by AIRFLOW_CONFIG: `[openlineage] disabled`,
    with a `config_path` naming a live server), which a flow run by hand follows as one Airflow starts does:
    the flow trains at the latest origin whose horizon raw holds and says so, its run is kept where the
    profile says, and no OpenLineage event is made or sent; its DataHub records are written as ever, and
    shipped to the DataHub of the plugin's connection (`datahub_rest_default`, as an AIRFLOW_CONN_ variable,
    without a password) with DATAHUB_GMS_TOKEN: where Airflow's tasks ship theirs."""
    from lineage_receiver import DATAHUB_INGEST_PATH, local_records, received_records

    from nyc_taxi.lineage.write.outbox import read_datahub_records

    home, store = tmp_path / "metaflowconfig", tmp_path / "their-datastore"
    home.mkdir()
    profile = {"METAFLOW_DEFAULT_DATASTORE": "local", "METAFLOW_DEFAULT_METADATA": "local"}
    (home / "config_theirs.json").write_text(json.dumps({**profile, "METAFLOW_DATASTORE_SYSROOT_LOCAL": str(store)}))
    backend = lineage_backend(201)
    config = tmp_path / "openlineage.yml"
    config.write_text(json.dumps({"transport": {"type": "http", "url": backend.url}}))
    airflow_cfg = tmp_path / "airflow.cfg"
    airflow_cfg.write_text(f"[openlineage]\ndisabled = True\nconfig_path = {config}\n")
    datahub, token = receiver("ok"), "dh-" + secrets.token_hex(16)
    connection = json.dumps({"conn_type": "datahub-rest", "host": datahub.url})
    user = {"METAFLOW_HOME": str(home), "METAFLOW_PROFILE": "theirs", "AIRFLOW_CONFIG": str(airflow_cfg)}
    user |= {"AIRFLOW_CONN_DATAHUB_REST_DEFAULT": connection, "DATAHUB_GMS_TOKEN": token}
    env = {k: v for k, v in os.environ.items() if not k.startswith("METAFLOW_") and k != "NYC_TAXI_METAFLOW_SET"}
    env |= user
    events, records = len(ol_events()), len(read_datahub_records(settings, "metaflow"))
    result = subprocess.run(
        ["bash", "run", "training-flow", "run"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    said = result.stdout + result.stderr
    assert result.returncode == 0, said[-4000:]
    # the latest month of the TLC files raw's rows came from (this module's 2024-10, or a later one another
    # module of the session loaded; rows another module wrote by hand name no month): the latest midnight whose
    # 24 hours end by its end
    files = load_table(registry.YELLOW_TAXI_RAW).scan(selected_fields=("source_file",)).to_arrow()["source_file"]
    tlc_months = (re.fullmatch(r"yellow_tripdata_(\d{4}-\d{2})\.parquet", name) for name in set(files.to_pylist()))
    latest = max(match[1] for match in tlc_months if match)
    year, month = map(int, latest.split("-"))
    origin = dt.datetime(year + month // 12, month % 12 + 1, 1) - dt.timedelta(days=1)
    assert f"--as_of_datetime not given: training at {origin:%Y-%m-%dT%H:%M}" in said and latest in said, said[-3000:]
    forecasts = table_rows(
        registry.YELLOW_RIDES_HOURLY_FORECAST, "forecast_hour", origin, origin + dt.timedelta(days=1)
    )
    assert forecasts and {r["as_of_datetime"] for r in forecasts} == {origin}
    # the run is in their datastore, found by Metaflow's client with their profile; not in the project's
    run_id = run_id_of(result)
    assert (store / ".metaflow" / "TrainForecastModelFlow" / run_id).is_dir()
    assert not (settings.metaflow_home / ".metaflow" / "TrainForecastModelFlow" / run_id).exists()
    probe = f"from metaflow import Run, namespace\nnamespace(None)\nprint(Run('TrainForecastModelFlow/{run_id}').successful)"
    found = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert found.stdout.strip().endswith("True"), found.stderr[-2000:]
    # OpenLineage off: no event made, none sent; DataHub's records as ever, shipped through the connection
    assert len(ol_events()) == events and backend.requests == []
    made = local_records(read_datahub_records(settings, "metaflow")[records:])
    missing = [r for r in made if r not in received_records(datahub)]
    if missing:
        # the run's shipping ran out of its budget (a busy machine): each shipping that did says, in the run's
        # output, how many it sent to the connection's DataHub and kept, with no error; `bash run lineage-replay`
        # sends what is missing where the steps would: the same connection, the same token. (That the last step
        # ships at its end is proven where no budget runs out: this test alone, and, beside nothing else,
        # test_weather_variant_reads_weather_raw_is_a_new_job_version_and_forecasts_as_computed.)
        told = re.findall(
            r"(\S+): \d+ lineage records sent to (\S+), (\d+) kept for later(.*?) \(bash run lineage-replay\)", said
        )
        assert told and len(told) == said.count("kept for later") and "lineage not shipped" not in said, said[-3000:]
        assert {url.rstrip("/") for _, url, _, _ in told} == {datahub.url.rstrip("/")}, told
        assert [error for _, _, _, error in told if error] == [], told
        assert all(what.startswith(f"TrainForecastModelFlow/{run_id}/") for what, _, _, _ in told), told
        replayed = subprocess.run(
            ["bash", "run", "lineage-replay"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert replayed.returncode == 0, (replayed.stdout + replayed.stderr)[-3000:]
        said += replayed.stdout + replayed.stderr
    received = received_records(datahub)
    assert made and [r for r in made if r not in received] == [], said[-3000:]
    tokens = {r["headers"].get("Authorization") for r in datahub.requests() if r["path"] == DATAHUB_INGEST_PATH}
    assert tokens == {f"Bearer {token}"} and token not in said


def test_bash_run_sql_answers_what_pyiceberg_reads_from_the_tables_files(loaded):
    """`bash run sql "SELECT count(*) FROM nyc_taxi.yellow_taxi_raw"`, as the README shows it, prints the
    count pyiceberg reads from the table's files (no Spark); statements typed one after another are
    answered each, and one Spark refuses is said without a traceback."""
    rows = load_table(registry.YELLOW_TAXI_RAW).scan().to_arrow().num_rows  # this module's months and others'
    assert rows >= 40_000  # two fixture months of 20,000 trips at least

    def sql(*args: str, typed: str | None = None) -> subprocess.CompletedProcess:
        command = ["bash", "run", "sql", *args]
        return subprocess.run(command, cwd=REPO_ROOT, input=typed, capture_output=True, text=True, timeout=300)

    answer = sql("SELECT count(*) FROM nyc_taxi.yellow_taxi_raw")
    assert answer.returncode == 0, answer.stderr[-3000:]
    assert answer.stdout.splitlines()[-2:] == [f"{rows:<8}", "(1 row)"], answer.stdout

    typed = sql(
        typed="SELECT count(*) AS trips\n  FROM yellow_taxi_raw;\nSELECT 'a;b' AS s; SELECT x FROM nowhere;\nexit\n"
    )
    assert typed.returncode == 1  # a statement failed
    assert f"{rows:<5}" in typed.stdout.splitlines() and "TABLE_OR_VIEW_NOT_FOUND" in typed.stderr
    assert "a;b" in typed.stdout.splitlines()  # a ';' in a string ends no statement
    assert "Traceback" not in typed.stderr


def test_the_weather_model_is_refused_a_day_without_observed_weather_naming_it(loaded):
    """weather_raw holds September and October 2024: a weather-adjusted forecast from November 1st has no
    observed weather for its horizon day, and one from September 5th over a week has none for the training
    days of August: each is refused naming those days and the month to load, before a model is fitted (a
    day without weather is never read as dry); the first as the flow runs it, a user would. Seasonal naive
    forecasts the same windows."""
    from nyc_taxi.forecast import steps
    from nyc_taxi.forecast.errors import NoDataInWindow

    november = dt.datetime(2024, 11, 1)
    mark = len(ol_events())
    result = run_flow("--as_of_datetime", "2024-11-01T00:00", "--lookback_days", "28", "--model", "weather_adjusted")
    said = result.stdout + result.stderr
    assert result.returncode != 0 and "holds none for the horizon days 2024-11-01:" in said, said[-3000:]
    assert 'ingest_weather_data DAG first ({"month": "2024-11"})' in said and "upper bound" in said, said[-3000:]
    failed = {e["job"]["name"] for e in ol_events(mark) if e["eventType"] == "FAIL"}
    assert "TrainForecastModelFlow.prepare_training_data" in failed, failed
    assert steps.training_data(november, 28, 24, "seasonal_naive").rows.num_rows > 0

    september = dt.datetime(2024, 9, 5)
    with pytest.raises(NoDataInWindow) as refused:
        steps.training_data(september, 7, 24, "weather_adjusted")
    said = str(refused.value)
    assert "holds none for the training days 2024-08-29 – 2024-08-31:" in said and "2024-08" in said, said


def test_as_of_without_data_fails_clearly_and_lineage_shows_the_failure(loaded):
    """A forecast origin whose window raw holds no trips of: refused, naming the days and the months to load."""
    mark = len(ol_events())
    result = run_flow("--as_of_datetime", "2019-03-01T00:00", "--lookback_days", "14")
    assert result.returncode != 0
    said = result.stdout + result.stderr
    assert "no trips on 2019-02-15 – 2019-02-28" in said and "training_days_have_rides (error)" in said, said[-3000:]
    assert 'Load 2019-02 with the ingest_yellow_taxi_data DAG ({"month": "2019-02"})' in said
    events = ol_events(mark)
    failed = {e["job"]["name"]: e for e in events if e["eventType"] == "FAIL"}
    assert (
        "training_days_have_rides"
        in failed["TrainForecastModelFlow.compute_actuals"]["run"]["facets"]["errorMessage"]["message"]
    )
    assert "TrainForecastModelFlow" in failed
    assert all(validation_errors(e) == [] for e in events)


def test_lineage_servers_that_die_or_refuse_cost_the_flow_no_record_and_no_secret(backtest, rerun, settings):
    """The re-run's OpenLineage server is killed after a few events, its DataHub server answers 500
    throughout: the flow succeeds, each step end tried each server at most once, the local files hold
    the whole run, and once both answer, one replay delivers every local record exactly once. Tokens go
    to the servers only: nowhere in Metaflow's datastore, the lineage files or the output."""
    from lineage_receiver import DATAHUB_INGEST_PATH, OPENLINEAGE_PATH, local_lineage, local_records, received_records

    result, openlineage, datahub, secret = rerun.result, rerun.openlineage, rerun.datahub, rerun.secret
    steps = len(TRAINING_FLOW.jobs)

    # the whole run is in the local files: the same events, job for job, as the backtest's run
    events = rerun.events
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [
        (e["job"]["name"], e["eventType"]) for e in backtest.events
    ]
    assert len(openlineage.accepted(OPENLINEAGE_PATH)) == 6 and openlineage.process.poll() is not None  # killed
    refused = [r for r in datahub.requests() if r["path"] == DATAHUB_INGEST_PATH]
    assert 1 <= len(refused) <= steps  # at most one try at the end of each step
    assert "kept for later" in result.stdout + result.stderr

    # both servers answer again: one replay delivers every local record once, in order; a second nothing
    for server in (openlineage, datahub):
        server.stop()
        server.start("ok")
    env = {**os.environ, "OPENLINEAGE_URL": openlineage.url, "DATAHUB_GMS_URL": datahub.url, **secret}
    first = subprocess.run([sys.executable, "-m", "nyc_taxi.cli.replay"], env=env, capture_output=True, text=True)
    again = subprocess.run([sys.executable, "-m", "nyc_taxi.cli.replay"], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    local = local_lineage(settings)
    assert [r["body"] for r in openlineage.accepted(OPENLINEAGE_PATH)] == local.openlineage
    assert received_records(datahub) == local_records(local.datahub)
    assert "openlineage: 0 records sent" in again.stdout and "datahub: 0 records sent" in again.stdout
    assert {r["headers"].get("Authorization") for r in datahub.requests() if r["path"] == DATAHUB_INGEST_PATH} == {
        f"Bearer {secret['DATAHUB_GMS_TOKEN']}"
    }

    # no secret in what the flow and the replay left or printed (Metaflow's datastore and metadata included)
    output = result.stdout + result.stderr + first.stdout + first.stderr
    assert [name for name, value in secret.items() if value in output] == []
    leaks = [
        str(p)
        for p in settings.state_dir.rglob("*")
        if p.is_file() and any(v.encode() in p.read_bytes() for v in secret.values())
    ]
    assert leaks == []


def test_the_flows_file_imports_a_steps_data_module_only_when_the_step_asks_for_its_function():
    """Every step's process imports the flow's file, and so does the card's render: `start`, `end` and the
    card import none of the steps' data modules, nor pyarrow, pyspark, pyiceberg or SQLAlchemy; each name the
    flow calls is its module's function."""
    from nyc_taxi.forecast import steps

    probe = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('train_model_flow', {str(FLOW)!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    data_modules = {f"nyc_taxi.forecast.{m}" for m in ("actuals", "training", "forecasts", "scores")}
    imported = set(done.stdout.split())
    assert not (data_modules | {"pyarrow", "pyspark", "pyiceberg", "sqlalchemy"}) & imported, sorted(imported)
    for name in set(steps.__all__) - {"check_configuration"}:
        function = getattr(steps, name)
        assert f"{function.__module__}.{function.__name__}" in {f"{m}.{name}" for m in data_modules}, name
