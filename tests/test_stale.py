"""Lineage you can act on: what is stale after a source changed, the re-run plan that fixes it, and the proof
that a run reproduces from what its lineage recorded (lineage/read/stale.py, cli/stale.py, forecast/reproduce.py,
ingest/reproduce.py).

Runs made for real, in a state directory of this module's own: both ingestion DAGs and the training DAG,
which starts the flow, through Airflow's dag.test(); the sources on the fixture server, asked with HEAD
requests. The tests run in order: each changes a source and checks what the lineage says.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from expected_loads import expected_actuals

from nyc_taxi.core import datasets as registry
from nyc_taxi.core.catalog import current_snapshot_id, load_table
from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month, taxi_path

# the system lane's: the demo's republication, re-run and reproduction are the suite's (tests/test_lineage.py)
pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.metaflow, pytest.mark.system]
ROWS = 20_000
# A: reads January and February; B and C: late February only (no January trip falls there: checked below)
RUNS = {
    "A": {"as_of_datetime": "2024-02-15T00:00", "model": "seasonal_naive", "lookback_days": 28},
    "B": {"as_of_datetime": "2024-02-26T00:00", "model": "seasonal_naive", "lookback_days": 7},
    "C": {"as_of_datetime": "2024-02-26T00:00", "model": "weather_adjusted", "lookback_days": 7},
}


STATE: dict = {}  # this module's own state directory and its settings (the history fixture makes them)


def _settings():
    return STATE["settings"]


def _env() -> dict:
    from nyc_taxi.airflow_adapter.environment import airflow_environment

    return {**os.environ, "STATE_DIR": str(_settings().state_dir), **airflow_environment(_settings())}


def _dag_runs(*specs: str) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.airflow_adapter.dag_runs", *specs],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and all(r["state"] == "success" for r in results), done.stderr[-4000:]
    return results


def _lineage(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.lineage", *args], env=_env(), capture_output=True, text=True, timeout=1200
    )


def _stale() -> dict:
    result = _lineage("--stale", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def _flow_run(key: str) -> str:
    """The newest flow run with run ``key``'s parameters, as ``TrainForecastModelFlow/<id>``."""
    from nyc_taxi.lineage.read.runs import Runs

    wanted = {k: str(v) for k, v in RUNS[key].items()}
    runs = [r for r in Runs.read(_settings()).of_job("TrainForecastModelFlow") if r.state == "success"]
    run = [r for r in runs if all(r.parameters.get(k) == v for k, v in wanted.items())][-1]
    return run.label


def _train(*keys: str) -> None:
    _dag_runs(*(f"train_forecast_model:{json.dumps(RUNS[k])}" for k in keys))


@pytest.fixture(scope="module")
def history(site, settings, tmp_path_factory):
    from nyc_taxi.airflow_adapter.environment import prepare_directories
    from nyc_taxi.core.lakehouse import lakehouse

    own = settings.model_copy(update={"state_dir": tmp_path_factory.mktemp("stale-state")})
    STATE["settings"] = own
    lakehouse(own).create()
    prepare_directories(own)
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=_env(), check=True, capture_output=True)
    january = add_taxi_month(site, 2024, 1, rows=ROWS, seed=1)
    add_taxi_month(site, 2024, 2, rows=ROWS, seed=2)
    add_weather_month(site, 2024, 1, seed=1)
    add_weather_month(site, 2024, 2, seed=2, through_day=29)  # February still preliminary
    specs = [
        f"{dag}:{json.dumps({'month': m})}"
        for m in ("2024-01", "2024-02")
        for dag in ("ingest_yellow_taxi_data", "ingest_weather_data")
    ]
    _dag_runs(*specs)
    _train("A", "B", "C")
    # B and C read late February: no January trip is there, so a change to January changes nothing they read
    pickups = pq.read_table(january, columns=["tpep_pickup_datetime"])["tpep_pickup_datetime"].to_pylist()
    assert not [p for p in pickups if p is not None and dt.datetime(2024, 2, 19) <= p < dt.datetime(2024, 2, 27)]
    return january


def test_nothing_is_stale_after_the_runs(history):
    report = _stale()
    assert report["stale"] == [] and report["plan"] == []
    assert report["checked_sources"] is True


def test_every_run_reproduces_from_its_recorded_versions(history):
    for key in ("A", "C"):  # seasonal and weather-adjusted
        result = _lineage("--reproduce", _flow_run(key))
        assert result.returncode == 0, result.stderr[-3000:]
        assert "reproduced: " in result.stdout and "differ" not in result.stdout, result.stdout
    merge = _lineage("--reproduce", f"yellow_taxi_raw@{current_snapshot_id(registry.YELLOW_TAXI_RAW, _settings())}")
    assert merge.returncode == 0 and f"reproduced: {ROWS} rows equal" in merge.stdout, merge.stdout + merge.stderr


def test_a_final_weather_file_makes_only_the_weather_adjusted_run_stale(history, site):
    add_weather_month(site, 2024, 2, seed=22)  # NOAA's -scaled files replace the -prelim ones
    report = _stale()
    kinds = {(i["kind"], i["name"].split(" (")[0]) for i in report["stale"]}
    assert ("landed", "noaa_nclimgrid_daily_county_landed 2024-02") in kinds
    # the reason names the new version whole: each of the four files with its version (a version is
    # never cut: NOAA's site versions its files by Last-Modified dates, which hold commas themselves)
    (landed,) = [i for i in report["stale"] if i["kind"] == "landed"]
    assert landed["reason"].endswith(f" → {landed['new_version']}"), landed
    assert landed["new_version"].count("@") == 4 and "-scaled.csv@" in landed["new_version"], landed
    assert ("raw", "weather_raw month 2024-02") in kinds
    flows = [i for i in report["stale"] if i["kind"] == "flow run"]
    assert [f["run"] for f in flows] == [_flow_run("C")]  # the seasonal runs read no weather
    assert "weather_raw" in flows[0]["reason"]
    assert [(p["dag"], p["conf"]) for p in report["plan"]] == [
        ("ingest_weather_data", {"month": "2024-02"}),
        ("train_forecast_model", {**RUNS["C"], "predict_horizon_hours": 24}),
    ]
    result = _lineage("--stale", "--rerun")
    assert result.returncode == 0, result.stderr[-3000:]
    assert _stale()["stale"] == []


def test_a_republished_taxi_month_makes_only_the_runs_that_read_it_stale_and_the_rerun_clears_it(history, site):
    january = history
    trips = pq.read_table(january)
    fares = trips["fare_amount"].to_numpy().copy()
    fares[::7] += 0.5
    trips = trips.set_column(trips.schema.get_field_index("fare_amount"), "fare_amount", pa.array(fares))
    trips = pa.concat_tables([trips.slice(0, 1_000), trips.slice(1_300)])  # 300 trips withdrawn
    pq.write_table(trips, january)
    report = _stale()
    by_kind = {}
    for item in report["stale"]:
        by_kind.setdefault(item["kind"], []).append(item)
    [landed] = by_kind["landed"]
    assert landed["name"] == "tlc_yellow_tripdata_landed 2024-01" and "→" in landed["reason"]
    assert [i["name"] for i in by_kind["raw"]] == ["yellow_taxi_raw month 2024-01"]
    assert [f["run"] for f in by_kind["flow run"]] == [_flow_run("A")]  # not B, C: they read late February only
    assert set(by_kind["flow run"][0]["outputs"]) >= {"yellow_rides_hourly_actuals", "yellow_rides_hourly_forecast"}
    plan = [(p["dag"], p["conf"]) for p in report["plan"]]
    assert plan == [
        ("ingest_yellow_taxi_data", {"month": "2024-01"}),
        ("train_forecast_model", {**RUNS["A"], "predict_horizon_hours": 24}),
    ]

    # the site shows it: a badge on every stale dataset (graph and page), the reason on the run, the plan
    out = _settings().state_dir / "stale-site"
    assert _lineage("--site", "--out", str(out)).returncode == 0
    assert 'class="node stale"' in (out / "graph.svg").read_text()
    for name in ("tlc_yellow_tripdata_landed", "yellow_taxi_raw", "yellow_rides_hourly_forecast"):
        assert "k-stale" in (out / "datasets" / f"{name}.html").read_text(), name
    assert "k-stale" not in (out / "datasets" / "weather_raw.html").read_text()
    stale_page = (out / "stale.html").read_text()
    assert "ingest_yellow_taxi_data" in stale_page and "train_forecast_model" in stale_page
    run_id = by_kind["flow run"][0]["run_id"]
    assert "k-stale" in (out / "runs" / f"{run_id}.html").read_text()
    # a reproduced run's page says so
    assert _lineage("--reproduce", _flow_run("B")).returncode == 0
    assert _lineage("--site", "--out", str(out)).returncode == 0
    from nyc_taxi.lineage.read.runs import Runs

    [b] = [r for r in Runs.read(_settings()) if r.label == _flow_run("B")]
    assert "Reproduced from its lineage" in (out / "runs" / f"{b.run_id}.html").read_text()

    result = _lineage("--stale", "--rerun")
    assert result.returncode == 0, result.stderr[-3000:]
    assert _stale()["stale"] == []
    # the re-run's forecasts: the actual of the same zone 168 hours earlier, counted from the new file
    as_of = dt.datetime.fromisoformat(RUNS["A"]["as_of_datetime"])
    window = (as_of - dt.timedelta(days=RUNS["A"]["lookback_days"]), as_of + dt.timedelta(hours=24))
    expected = expected_actuals([january, taxi_path(site, 2024, 2)], *window)
    zones = {z for (z, h) in expected if h < as_of}
    rows = load_table(registry.YELLOW_RIDES_HOURLY_FORECAST, _settings()).scan().to_arrow().to_pylist()
    got = {
        (r["pickup_location_id"], r["forecast_hour"]): r["predicted_ride_count"]
        for r in rows
        if as_of <= r["forecast_hour"] < window[1]
    }
    assert got == {
        (z, as_of + dt.timedelta(hours=h)): expected.get((z, as_of + dt.timedelta(hours=h - 168)), 0)
        for z in zones
        for h in range(24)
    }


def test_a_month_republished_inside_a_scored_horizon_makes_its_score_stale_and_the_rerun_scores_it_again(history, site):
    """The TLC republishes February without a third of the 15th's trips, and February is merged again (until
    then every run that read February is stale: which of its days changed is not known before the merge).
    The 15th is run A's horizon, which A's evaluate step scored: A is stale (it read raw there), its scores
    among what it wrote; B and C, which read late February only, are not. The re-run counts the 15th again
    and scores A's forecast against the new file: the score equals one computed here from the file, and
    names the actuals snapshot the re-run wrote."""
    as_of = dt.datetime.fromisoformat(RUNS["A"]["as_of_datetime"])
    scores = registry.YELLOW_RIDES_FORECAST_SCORES

    def score_of_a() -> dict:
        [score] = [
            r
            for r in load_table(scores, _settings()).scan().to_arrow().to_pylist()
            if (r["model_name"], r["as_of_datetime"]) == ("seasonal_naive", as_of)
        ]
        return score

    before = score_of_a()
    february = taxi_path(site, 2024, 2)
    trips = pq.read_table(february)
    pickups = trips["tpep_pickup_datetime"].to_pylist()
    keep = [p is None or p.date() != as_of.date() or i % 3 != 0 for i, p in enumerate(pickups)]
    pq.write_table(trips.filter(pa.array(keep)), february)
    _dag_runs(f"ingest_yellow_taxi_data:{json.dumps({'month': '2024-02'})}")
    report = _stale()
    flows = [i for i in report["stale"] if i["kind"] == "flow run"]
    assert [f["run"] for f in flows] == [_flow_run("A")], report["stale"]
    assert scores.name in flows[0]["outputs"] and "yellow_taxi_raw" in flows[0]["reason"], flows[0]
    assert flows[0]["score"] == f"seasonal_naive as of {RUNS['A']['as_of_datetime']}", flows[0]
    # the backtest's comparison reads the same lineage: A's score is marked stale and ranks nothing
    from nyc_taxi.cli import backtest
    from nyc_taxi.core import comparison

    stale, judged = backtest.staleness(_settings())
    assert stale == {("seasonal_naive", as_of)} and _flow_run("A") in judged
    compared = comparison.compare(_settings(), [as_of], ("seasonal_naive",), stale, judged)
    assert compared.stale == {("seasonal_naive", as_of)} and " stale" in comparison.render(compared)
    assert not compared.unjudged
    assert [(p["dag"], p["conf"]) for p in report["plan"]] == [
        ("train_forecast_model", {**RUNS["A"], "predict_horizon_hours": 24})
    ]
    result = _lineage("--stale", "--rerun")
    assert result.returncode == 0, result.stderr[-3000:]
    assert _stale()["stale"] == []

    score = score_of_a()
    assert score["actuals_snapshot_id"] == current_snapshot_id(registry.YELLOW_RIDES_HOURLY_ACTUALS, _settings())
    rides = expected_actuals([history, february], as_of, as_of + dt.timedelta(hours=24))
    forecasts = {
        (r["pickup_location_id"], r["forecast_hour"]): r["predicted_ride_count"]
        for r in load_table(registry.YELLOW_RIDES_HOURLY_FORECAST, _settings()).scan().to_arrow().to_pylist()
        if (r["model_name"], r["as_of_datetime"]) == ("seasonal_naive", as_of)
    }
    errors = [abs(f - rides.get(key, 0)) for key, f in forecasts.items()]
    actual = sum(rides.get(key, 0) for key in forecasts)
    assert (score["coverage"], score["actual_rides"]) == (1.0, actual)
    assert score["mae"] == pytest.approx(sum(errors) / len(errors), rel=1e-9)
    assert score["wape"] == pytest.approx(sum(errors) / actual, rel=1e-9)
    assert actual < before["actual_rides"] and score["actuals_snapshot_id"] != before["actuals_snapshot_id"]


def test_a_plan_whose_source_is_gone_runs_nothing(history, site):
    february = taxi_path(site, 2024, 2)
    kept = february.read_bytes()
    february.unlink()  # the TLC withdraws February
    try:
        report = _stale()
        assert report["plan"] and any(p["blocked"] for p in report["plan"])
        before = {t.name: current_snapshot_id(t, _settings()) for t in registry.TABLES.values()}
        result = _lineage("--stale", "--rerun")
        assert result.returncode != 0 and "Nothing was run" in result.stderr
        assert {t.name: current_snapshot_id(t, _settings()) for t in registry.TABLES.values()} == before
    finally:
        february.write_bytes(kept)
    assert _stale()["stale"] == []


def test_an_altered_forecast_row_and_an_expired_input_are_reported(history, site):
    from nyc_taxi.lineage.read.runs import Runs

    run = _flow_run("B")
    runs = Runs.read(_settings())
    [flow] = [r for r in runs if r.label == run]
    [write] = [c for c in runs.children(flow) if c.job.endswith(".write_forecasts_to_table")]
    written = int(write.outputs["yellow_rides_hourly_forecast"])  # the version the run wrote
    # one stored forecast of the run changed in place, in a data file of that version
    table = load_table(registry.YELLOW_RIDES_HOURLY_FORECAST, _settings())
    scan = table.scan(row_filter="forecast_hour >= '2024-02-26T00:00:00'", snapshot_id=written)
    path = next(f.file.file_path for f in scan.plan_files())
    local = path.removeprefix("file:")
    rows = pq.read_table(local)
    values = rows["predicted_ride_count"].to_pylist()
    values[0] += 1000.0
    column = rows.schema.get_field_index("predicted_ride_count")
    # the field keeps its Iceberg field id (Parquet metadata): the file stays readable, only the value differs
    pq.write_table(rows.set_column(column, rows.schema.field(column), pa.array(values)), local)

    result = _lineage("--reproduce", run)
    assert result.returncode == 1 and "yellow_rides_hourly_forecast: 1 of" in result.stdout, (
        result.stdout + result.stderr
    )
    # the raw snapshot the run read, expired (once March has loaded on top of it): a clear answer, not a stack trace
    add_taxi_month(site, 2024, 3, rows=ROWS, seed=3)
    _dag_runs(f"ingest_yellow_taxi_data:{json.dumps({'month': '2024-03'})}")
    expire = (
        "from nyc_taxi.core.spark import get_spark\n"
        "get_spark().sql(\"CALL lakehouse.system.expire_snapshots(table => 'nyc_taxi.yellow_taxi_raw', "
        "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)\").collect()"
    )
    subprocess.run([sys.executable, "-c", expire], env=_env(), check=True, capture_output=True, timeout=600)
    result = _lineage("--reproduce", run)
    assert result.returncode == 2 and "has been expired" in result.stderr and "Traceback" not in result.stderr
