"""Cross-tool proof: `bash run demo`'s pipeline, then the lineage both tools recorded, read back from
DataHub Lite. One node per registry dataset, the exact expected graph, valid record files, a picture
that renders, run history that names the real Iceberg snapshots.

The demo runs once, as the user runs it (`python -m nyc_taxi.demo`), in its own state directory.
"""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nyc_taxi.core import datasets as registry
from nyc_taxi.core.naming import identity
from nyc_taxi.lineage.spec import SPEC_DIR, validation_errors
from nyc_taxi.lineage.write.outbox import datahub_files, read_datahub_records

pytestmark = [pytest.mark.airflow, pytest.mark.metaflow, pytest.mark.lineage]
REFERENCE_SPEC = Path(__file__).resolve().parents[2] / "shared" / "reference" / "openlineage-spec"

Y, W, T, F = "ingest_yellow_taxi_data", "ingest_weather_data", "train_forecast_model", "TrainForecastModelFlow"
# Written out by hand from the DAGs and the flow (not computed by product code): the whole graph as the
# demo's last runs left it (the last flow run is the weather-adjusted one).
EXPECTED_EDGES = {
    # Airflow, taxi
    ("tlc_yellow_tripdata_published", f"{Y}.download_published_files", "read"),
    (f"{Y}.download_published_files", "tlc_yellow_tripdata_landed", "write"),
    ("tlc_yellow_tripdata_landed", f"{Y}.stage_landed_files", "read"),
    (f"{Y}.stage_landed_files", "yellow_taxi_staging", "write"),
    ("yellow_taxi_staging", f"{Y}.merge_upsert_staging_into_raw_yellow", "read"),
    (f"{Y}.merge_upsert_staging_into_raw_yellow", "yellow_taxi_raw", "write"),
    (f"{Y}.create_tables", f"{Y}.download_published_files", "then"),
    (f"{Y}.download_published_files", f"{Y}.stage_landed_files", "then"),
    (f"{Y}.stage_landed_files", f"{Y}.merge_upsert_staging_into_raw_yellow", "then"),
    # Airflow, weather
    ("noaa_nclimgrid_daily_county_published", f"{W}.download_published_files", "read"),
    (f"{W}.download_published_files", "noaa_nclimgrid_daily_county_landed", "write"),
    ("noaa_nclimgrid_daily_county_landed", f"{W}.stage_landed_files", "read"),
    (f"{W}.stage_landed_files", "weather_staging", "write"),
    ("weather_staging", f"{W}.merge_upsert_staging_into_raw_weather", "read"),
    (f"{W}.merge_upsert_staging_into_raw_weather", "weather_raw", "write"),
    (f"{W}.create_tables", f"{W}.download_published_files", "then"),
    (f"{W}.download_published_files", f"{W}.stage_landed_files", "then"),
    (f"{W}.stage_landed_files", f"{W}.merge_upsert_staging_into_raw_weather", "then"),
    # Metaflow: data
    ("yellow_taxi_raw", f"{F}.compute_actuals", "read"),
    (f"{F}.compute_actuals", "yellow_rides_hourly_actuals", "write"),
    ("yellow_rides_hourly_actuals", f"{F}.prepare_training_data", "read"),
    ("yellow_rides_hourly_actuals", f"{F}.train_forecasting_model", "read"),
    (f"{F}.train_forecasting_model", "yellow_rides_forecast_model", "trained"),
    ("yellow_rides_forecast_model", f"{F}.predict", "used"),
    ("yellow_rides_forecast_model", f"{F}.write_forecasts_to_table", "used"),
    (f"{F}.write_forecasts_to_table", "yellow_rides_hourly_forecast", "write"),
    ("yellow_rides_hourly_actuals", f"{F}.evaluate", "read"),
    ("weather_raw", f"{F}.prepare_training_data", "read"),  # the weather-adjusted model
    ("weather_raw", f"{F}.train_forecasting_model", "read"),
    # Airflow starts Metaflow
    (f"{T}.run_training_flow", f"{F}.start", "starts"),
    # Metaflow: step order
    (f"{F}.start", f"{F}.compute_actuals", "then"),
    (f"{F}.compute_actuals", f"{F}.prepare_training_data", "then"),
    (f"{F}.prepare_training_data", f"{F}.train_forecasting_model", "then"),
    (f"{F}.train_forecasting_model", f"{F}.predict", "then"),
    (f"{F}.predict", f"{F}.write_forecasts_to_table", "then"),
    (f"{F}.write_forecasts_to_table", f"{F}.evaluate", "then"),
    (f"{F}.evaluate", f"{F}.end", "then"),
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`python -m nyc_taxi.demo` in a state directory of its own; (settings, stdout, images dir)."""
    from nyc_taxi.core.settings import Settings

    root = tmp_path_factory.mktemp("demo")
    env = {**os.environ, "STATE_DIR": str(root / "state")}
    for name in ("TLC_BASE_URL", "NOAA_BASE_URL"):  # the demo serves its own fixture months
        env.pop(name, None)
    result = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.demo", "--images", str(root / "images")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    # the demo served its sources on 127.0.0.1 (a port of its own: one identity whatever the port)
    fixture_site = "http://127.0.0.1:1"
    settings = Settings(
        state_dir=root / "state", profile="local", tlc_base_url=fixture_site, noaa_base_url=fixture_site
    )
    return settings, result.stdout, root / "images"


@pytest.fixture(scope="module")
def graph(demo):
    from nyc_taxi.lineage.read.lite import load_graph

    return load_graph(demo[0])


def _lineage_cli(demo, *args) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "STATE_DIR": str(demo[0].state_dir),
        "TLC_BASE_URL": demo[0].tlc_base_url,
        "NOAA_BASE_URL": demo[0].noaa_base_url,
    }
    return subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.lineage", *args], env=env, capture_output=True, text=True
    )


def test_every_node_is_a_registry_dataset_or_a_job_of_the_two_tools(graph, demo):
    settings = demo[0]
    datasets = {n.urn for n in graph.nodes.values() if n.kind in ("dataset", "model")}
    assert datasets == {
        identity(d, settings).datahub_urn for d in registry.DATASETS.values()
    }  # no phantom, none missing
    jobs = {n.name for n in graph.nodes.values() if n.kind == "job"}
    assert jobs == {e[i] for e in EXPECTED_EDGES for i in (0, 1) if "." in e[i]}


def test_the_graph_is_exactly_the_expected_one(graph):
    edges = {(graph.nodes[e.source].name, graph.nodes[e.target].name, e.kind.value) for e in graph.edges}
    assert edges - EXPECTED_EDGES == set(), "edges nobody declared"
    assert EXPECTED_EDGES - edges == set(), "edges missing"


def test_one_yellow_taxi_raw_node_written_by_airflow_and_read_by_metaflow(graph, demo):
    raw = [n for n in graph.nodes.values() if "yellow_taxi_raw" in n.urn]
    assert len(raw) == 1 and raw[0].urn == identity(registry.YELLOW_TAXI_RAW, demo[0]).datahub_urn
    urn = raw[0].urn
    assert {graph.nodes[e.source].tool for e in graph.edges if e.target == urn} == {"Airflow"}
    assert {graph.nodes[e.target].tool for e in graph.edges if e.source == urn} == {"Metaflow"}
    assert "written by Airflow, read by Metaflow" in demo[1]


def test_lineage_of_the_forecast_table_reaches_the_source_files_across_both_tools(demo):
    result = _lineage_cli(demo, "yellow_rides_hourly_forecast", "--json")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    names = {n["name"] for n in answer["nodes"].values()}
    assert {
        "tlc_yellow_tripdata_published",
        f"{Y}.merge_upsert_staging_into_raw_yellow",
        "yellow_taxi_raw",
        f"{F}.compute_actuals",
        "yellow_rides_forecast_model",
    } <= names
    assert "noaa_nclimgrid_daily_county_published" in names  # the last flow run's model reads weather
    assert answer["downstream"] == []
    # as the seasonal-naive flow run left it, the forecast did not come from weather
    flow_runs = json.loads(_lineage_cli(demo, "--runs", F, "--json").stdout)
    assert [r["parameters"]["model"] for r in flow_runs] == ["seasonal_naive", "weather_adjusted"]
    first = f"{F}/{flow_runs[0]['label'].split('/')[-1]}"
    then = json.loads(_lineage_cli(demo, "yellow_rides_hourly_forecast", "--as-of", first, "--json").stdout)
    then_names = {n["name"] for n in then["nodes"].values()}
    assert {"tlc_yellow_tripdata_published", "yellow_taxi_raw", f"{F}.compute_actuals"} <= then_names
    assert not {"weather_raw", "noaa_nclimgrid_daily_county_published"} & then_names
    # every job in it has a successful last run; the datasets Iceberg holds have their snapshot
    for node in answer["nodes"].values():
        if node["kind"] == "job":
            assert node["last_run"]["status"] == "success", node
    from nyc_taxi.core.catalog import current_snapshot_id

    raw = next(n for n in answer["nodes"].values() if n["name"] == "yellow_taxi_raw")
    assert raw["freshness"]["snapshot_id"] == str(current_snapshot_id(registry.YELLOW_TAXI_RAW, demo[0]))
    assert "yellow_rides_hourly_forecast [Iceberg table]" in demo[1]  # the demo printed the tree


def test_names_resolve_as_users_type_them_and_unknown_names_fail_with_suggestions(demo):
    by_step = json.loads(_lineage_cli(demo, "trainforecastmodelflow.compute_actuals", "--json").stdout)
    urn = identity(registry.YELLOW_TAXI_RAW, demo[0]).datahub_urn
    by_urn = json.loads(_lineage_cli(demo, urn, "--json").stdout)
    assert by_step["subject"]["name"] == f"{F}.compute_actuals" and by_urn["subject"]["name"] == "yellow_taxi_raw"
    assert [e for e in by_step["upstream"] if e[1] == by_step["subject"]["urn"] and e[0] == urn]
    unknown = _lineage_cli(demo, "yellow_taxi")
    assert unknown.returncode == 2 and "no dataset or job named 'yellow_taxi'" in unknown.stderr
    suggestions = unknown.stderr.split("did you mean: ")[1].strip().split(", ")
    assert {"yellow_taxi_raw", "yellow_taxi_staging", f"{Y}.merge_upsert_staging_into_raw_yellow"} <= set(suggestions)


def test_store_loads_incrementally_and_idempotently(demo):
    from nyc_taxi.lineage.read.store import LineageStore
    from nyc_taxi.lineage.write.outbox import Outbox

    store = LineageStore(demo[0])
    assert store.load().new_records == 0
    with store.open() as lite:
        before = sorted(lite.list_ids())
    records = read_datahub_records(demo[0], "metaflow")
    Outbox(demo[0], "metaflow").add_records(records[-1:])  # one more (identical) record
    assert store.load().new_records == 1
    with store.open() as lite:
        assert sorted(lite.list_ids()) == before


def test_record_files_are_valid_datahub_and_openlineage(demo):
    settings = demo[0]
    files = datahub_files(settings)
    assert {f.name.split("_mcps.")[0] for f in files} == {"airflow", "catalog", "metaflow"}
    for path in files:
        check = subprocess.run(
            [sys.executable, "-m", "datahub", "check", "metadata-file", str(path)], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
    events = [
        json.loads(line)
        for p in sorted((settings.lineage_dir / "openlineage").glob("*.jsonl"))
        for line in p.read_text().splitlines()
    ]
    assert len(events) > 30
    assert [e for e in events if validation_errors(e)] == []
    if REFERENCE_SPEC.exists():  # the copy we validate with is the team's reference, byte for byte
        comparison = filecmp.dircmp(SPEC_DIR, REFERENCE_SPEC)
        assert comparison.left_only == comparison.right_only == comparison.diff_files == []


def test_datahub_iceberg_source_names_the_tables_as_the_lineage_does(demo):
    records = read_datahub_records(demo[0], "catalog")
    datasets = {r["entityUrn"] for r in records if r["entityUrn"].startswith("urn:li:dataset:")}
    assert datasets == {identity(t, demo[0]).datahub_urn for t in registry.TABLES.values()}
    from datahub.utilities.urns.field_paths import get_simple_field_path_from_v2_field_path

    schemas = {
        r["entityUrn"]: {
            get_simple_field_path_from_v2_field_path(f["fieldPath"]) for f in r["aspect"]["json"]["fields"]
        }
        for r in records
        if r.get("aspectName") == "schemaMetadata"
    }
    for table in registry.TABLES.values():
        assert schemas[identity(table, demo[0]).datahub_urn] == set(table.column_names)


def test_picture_renders_in_chromium_and_shows_every_node(graph, demo, browser):
    images = demo[2]
    assert (images / "lineage.svg").read_text().lstrip().startswith("<?xml")
    page = browser.new_page(viewport={"width": 1600, "height": 900})
    page.goto((images / "lineage.html").as_uri())
    svg = page.locator("svg").first
    box = svg.bounding_box()
    assert box and box["width"] > 500 and box["height"] > 100
    rendered = page.locator("g.node").evaluate_all("nodes => nodes.map(n => n.id)")
    assert sorted(rendered) == sorted(graph.nodes)  # every node, each once, by URN
    assert page.locator("g.edge").count() == len(graph.edges)
    page.close()


def test_run_history_names_real_snapshots_and_a_failed_run_is_compared_with_the_last_good(demo):
    from nyc_taxi.airflow_adapter.environment import airflow_environment
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.fixtures.server import FixtureServer
    from nyc_taxi.fixtures.site import add_taxi_month

    settings = demo[0]
    merge = f"{Y}.merge_upsert_staging_into_raw_yellow"
    runs = json.loads(_lineage_cli(demo, "--runs", merge, "--json").stdout)
    assert [r["state"] for r in runs] == ["success", "success"]
    assert [r["parameters"]["month"] for r in runs] == ["2024-01", "2024-02"]
    table = load_table(registry.YELLOW_TAXI_RAW, settings)
    written = [int(r["outputs"]["yellow_taxi_raw"]) for r in runs]
    assert written[-1] == table.current_snapshot().snapshot_id
    assert set(written) <= {s.snapshot_id for s in table.snapshots()}

    # a month whose file arrives truncated: the failed run names the change (the month) and the error
    site = settings.state_dir / "demo-site"
    path = add_taxi_month(site, 2024, 3, rows=5_000, seed=3)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    server = FixtureServer(site)
    url = server.start()
    try:
        env = {
            **os.environ,
            "STATE_DIR": str(settings.state_dir),
            "TLC_BASE_URL": url,
            "NOAA_BASE_URL": url,
            **airflow_environment(settings),
        }
        subprocess.run(
            [sys.executable, "-m", "airflow", "dags", "test", Y, "--conf", '{"month": "2024-03"}'],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.stop()
    download = f"{Y}.download_published_files"
    runs = json.loads(_lineage_cli(demo, "--runs", download, "--json").stdout)
    failed = runs[-1]
    assert failed["state"] == "failure" and "yellow_tripdata_2024-03.parquet" in failed["error"]
    assert failed["changed_since_last_good"]["parameter month"] == ["2024-02", "2024-03"]
    text = _lineage_cli(demo, "--runs", download).stdout
    assert "changed since the last good run: parameter month: 2024-02 → 2024-03" in text
