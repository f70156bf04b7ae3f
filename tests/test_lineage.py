"""Cross-tool proof: `bash run demo`'s pipeline, then the lineage both tools recorded, read back from
DataHub Lite. One node per registry dataset, the exact expected graph, valid record files, a picture
that renders, run history that names the real Iceberg snapshots.

The demo runs once, as `bash run demo` runs it (`python -m nyc_taxi_proving.cli.demo`), in its own state
directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter

import pytest
from datahub_check import assert_valid_record_files

from nyc_taxi.core import datasets as registry
from nyc_taxi.core import jobs as j
from nyc_taxi.core.naming import identity
from nyc_taxi.lineage.spec import validation_errors
from nyc_taxi.lineage.write.outbox import datahub_files, read_datahub_records

pytestmark = [pytest.mark.airflow, pytest.mark.metaflow, pytest.mark.lineage]

Y, W, T, F = "ingest_yellow_taxi_data", "ingest_weather_data", "train_forecast_model", "TrainForecastModelFlow"
# The demo's history, by hand: two months loaded, the flow run seasonal then weather-adjusted at each of two
# weekly origins; then the TLC republishes January, and the re-run plan loads it again and runs the four flow
# runs again (all read January: their 28 days start in it).
DEMO_MERGES = ["2024-01", "2024-02", "2024-01"]
# Last, the TLC publishes March with every trip a year early: it lands and stages, and its checks refuse its merge.
BROKEN_MONTH = "2024-03"
DEMO_FORECASTS = [
    (o, m) for o in ("2024-02-08T00:00", "2024-02-15T00:00") for m in ("seasonal_naive", "weather_adjusted")
]
DEMO_FLOW_RUNS = [model for _, model in DEMO_FORECASTS] * 2
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
    ("yellow_rides_hourly_forecast", f"{F}.evaluate", "read"),
    ("yellow_rides_hourly_actuals", f"{F}.evaluate", "read"),
    (f"{F}.evaluate", "yellow_rides_forecast_scores", "write"),
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
    # downstream: the step that scores every kept forecast, its scores, and the step after it
    assert {answer["nodes"][urn]["name"] for edge in answer["downstream"] for urn in edge[:2]} == {
        "yellow_rides_hourly_forecast",
        f"{F}.evaluate",
        f"{F}.end",
        "yellow_rides_forecast_scores",
    }, answer["downstream"]
    # as the seasonal-naive flow run left it, the forecast did not come from weather
    flow_runs = json.loads(_lineage_cli(demo, "--runs", F, "--json").stdout)
    assert [r["parameters"]["model"] for r in flow_runs] == DEMO_FLOW_RUNS
    first = f"{F}/{flow_runs[0]['label'].split('/')[-1]}"
    then = json.loads(_lineage_cli(demo, "yellow_rides_hourly_forecast", "--as-of", first, "--json").stdout)
    then_names = {n["name"] for n in then["nodes"].values()}
    assert {"tlc_yellow_tripdata_published", "yellow_taxi_raw", f"{F}.compute_actuals"} <= then_names
    assert not {"weather_raw", "noaa_nclimgrid_daily_county_published"} & then_names
    # every job in it has a successful last run, but the taxi merge, whose last run is the broken month's,
    # refused by its checks; the datasets Iceberg holds have their snapshot
    for node in answer["nodes"].values():
        if node["kind"] == "job":
            refused = node["name"] == f"{Y}.merge_upsert_staging_into_raw_yellow"
            assert node["last_run"]["status"] == ("failure" if refused else "success"), node
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
    assert_valid_record_files(files)
    events = [
        json.loads(line)
        for p in sorted((settings.lineage_dir / "openlineage").glob("*.jsonl"))
        for line in p.read_text().splitlines()
    ]
    # every event the demo's runs emit, counted by hand: per DAG run its end (dag.test emits no DAG
    # START) and each task's START and COMPLETE; per flow run its START and COMPLETE and each step's
    # (the re-run after January's republication adds one taxi DAG run and two training DAG runs; the
    # broken month's taxi DAG run ends in FAIL, its merge's task too, refused by its checks)
    kinds = Counter((e["job"]["name"].split(".")[0], "." in e["job"]["name"], e["eventType"]) for e in events)
    taxi, flows = 3, len(DEMO_FLOW_RUNS)
    assert kinds == Counter(
        {
            (Y, False, "COMPLETE"): taxi,
            (Y, True, "START"): taxi * 4 + 4,
            (Y, True, "COMPLETE"): taxi * 4 + 3,
            (Y, False, "FAIL"): 1,
            (Y, True, "FAIL"): 1,
            (W, False, "COMPLETE"): 2,
            (W, True, "START"): 2 * 4,
            (W, True, "COMPLETE"): 2 * 4,
            (T, False, "COMPLETE"): flows,
            (T, True, "START"): flows,
            (T, True, "COMPLETE"): flows,
            (F, False, "START"): flows,
            (F, False, "COMPLETE"): flows,
            (F, True, "START"): flows * 8,
            (F, True, "COMPLETE"): flows * 8,
        }
    )
    assert [e for e in events if validation_errors(e)] == []


def test_every_record_names_only_the_entity_types_its_schema_allows_and_the_models_checks_are_its_metrics(demo):
    """A DataHub server that validates URNs refuses a record whose URN field names another entity type than
    the installed acryl-datahub's schema allows, or an aspect its entity type lacks, and ordered delivery
    then holds back everything behind it: no record of the demo does. The model's checks are not assertions (an assertion
    asserts on a dataset) but its training metrics, and still read back by `--quality`."""
    from nyc_taxi.lineage.datahub_spec import record_errors
    from nyc_taxi.lineage.read import quality

    records = [r for tool in ("airflow", "metaflow", "catalog") for r in read_datahub_records(demo[0], tool)]
    assert len(records) > 1000 and [e for r in records for e in record_errors(r)] == []
    assert {r["aspectName"] for r in records} >= {"assertionInfo", "assertionRunEvent", "mlModelProperties"}
    model = quality.read(demo[0]).of(registry.YELLOW_RIDES_FORECAST_MODEL.name)
    assert {h.check for h in model.checks} == {c.name for c in registry.YELLOW_RIDES_FORECAST_MODEL.checks}
    assert all(len(h.evaluations) == len(DEMO_FLOW_RUNS) for h in model.checks), model


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
    from nyc_taxi.lineage.read.site.drawing import node_id

    rendered = page.locator("g.node").evaluate_all(
        "nodes => nodes.map(n => [n.id, n.querySelector('a').getAttribute('xlink:title')])"
    )
    assert sorted(map(tuple, rendered)) == sorted(
        (node_id(urn), urn) for urn in graph.nodes
    )  # every node, once, its URN on hover
    assert page.locator("g.edge").count() == len(graph.edges)
    page.close()


def test_run_history_names_real_snapshots(demo):
    from nyc_taxi.core.catalog import load_table

    settings = demo[0]
    merge = f"{Y}.merge_upsert_staging_into_raw_yellow"
    runs = json.loads(_lineage_cli(demo, "--runs", merge, "--json").stdout)
    assert [r["state"] for r in runs] == ["success"] * len(DEMO_MERGES) + ["failure"]
    assert [r["parameters"]["month"] for r in runs] == [*DEMO_MERGES, BROKEN_MONTH]
    assert "pickup_in_month" in runs[-1]["error"]  # refused by its checks: raw kept its snapshot
    table = load_table(registry.YELLOW_TAXI_RAW, settings)
    written = [int(r["outputs"]["yellow_taxi_raw"]) for r in runs]
    assert written[-1] == table.current_snapshot().snapshot_id
    assert set(written) <= {s.snapshot_id for s in table.snapshots()}


def test_the_broken_month_is_refused_by_its_check_before_raw_and_the_lineage_says_so(demo):
    """The demo's last taxi month fails pickup_in_month: its merge commits nothing, and DataHub Lite holds the
    failure on the staging version it checked, next to the warnings of the months before; the forecast's
    trace says it was computed only from versions that passed their checks."""
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.lineage.read.quality import read
    from nyc_taxi.lineage.read.runs import Runs

    settings = demo[0]
    merges = Runs.read(settings).of_job(f"{Y}.merge_upsert_staging_into_raw_yellow")
    refused, last_good = merges[-1], merges[-2]
    assert (refused.parameters["month"], refused.state) == (BROKEN_MONTH, "failure")
    assert refused.outputs["yellow_taxi_raw"] == last_good.outputs["yellow_taxi_raw"]  # raw kept its snapshot
    assert (
        str(load_table(registry.YELLOW_TAXI_RAW, settings).current_snapshot().snapshot_id)
        == refused.outputs["yellow_taxi_raw"]
    )
    staged = refused.inputs["yellow_taxi_staging"]
    assert str(load_table(registry.YELLOW_TAXI_STAGING, settings).current_snapshot().snapshot_id) == staged  # kept
    failed = [a for a in refused.quality["yellow_taxi_staging"]["assertions"] if not a["success"]]
    assert {a["name"]: a["severity"] for a in failed if a["params"]["status"] == "fail"} == {"pickup_in_month": "error"}
    quality = read(settings)
    results = {e.check: e for e in quality.of_version("yellow_taxi_staging", staged)}
    assert set(results) == {c.name for c in registry.YELLOW_TAXI_STAGING.checks}
    assert (results["pickup_in_month"].status, results["pickup_in_month"].failing) == ("fail", 50_000)
    assert results["rows_as_landed"].status == "pass"
    history = next(h for h in quality.of("yellow_taxi_staging").checks if h.check == "pickup_in_month")
    assert [e.status for e in history.evaluations] == ["fail", "warn", "warn", "warn"]  # newest first
    cli = _lineage_cli(demo, "--quality", "yellow_taxi_staging")
    assert (
        cli.returncode == 0 and "pickup_in_month                error  ✗ fail 50,000 of 50,000 rows fail" in cli.stdout
    )
    trace = _trace(demo, "yellow_rides_hourly_forecast")
    verdict = trace["checks_verdict"]
    assert verdict["passed"] and verdict["failed"] == [] and verdict["unchecked"] == []
    assert {v.split("@")[0] for v in verdict["checked"]} == {  # the last forecast is weather-adjusted
        "yellow_rides_hourly_forecast",
        "yellow_rides_forecast_model",
        "yellow_rides_hourly_actuals",
        "yellow_taxi_raw",
        "yellow_taxi_staging",
        "weather_staging",
    }
    assert {v.split("@")[0] for v in verdict["without_checks"]} == {
        "weather_raw",  # nothing a check of it could catch (docs/quality.md)
        "tlc_yellow_tripdata_published",
        "tlc_yellow_tripdata_landed",
        "noaa_nclimgrid_daily_county_published",
        "noaa_nclimgrid_daily_county_landed",
    }
    assert verdict["warnings"] > 0  # the TLC's quirks, kept as published


def test_the_republished_month_made_its_readers_stale_the_rerun_cleared_them_and_the_forecast_reproduced(demo):
    """The lineage acted on, as the demo prints it (`--stale`, `--stale --rerun`, `--reproduce`): January
    republished made what read it stale, with a plan that loads January again and runs both flow runs
    again; after the plan ran nothing is stale; the re-run's forecast and actuals were recomputed from the
    versions its lineage recorded and equal the table's rows."""
    import re

    sections = {text.split("\n", 1)[0]: text for text in demo[1].split("\n==> ")}

    def section(command: str) -> str:
        (found,) = [text for head, text in sections.items() if head.endswith(f"({command})")]
        return found

    before = section("bash run lineage --stale")
    assert re.search(r"^\s*stale \(\d+\):", before, flags=re.M), before
    plan = [line.split(". ", 1)[1].split("   for ")[0] for line in before.splitlines() if re.match(r"\s+\d+\. ", line)]
    conf = {"lookback_days": 28, "predict_horizon_hours": 24}
    assert plan == [
        f'{Y} {{"month": "2024-01"}}',
        *(
            f"{T} {json.dumps(conf | {'as_of_datetime': origin, 'model': model}, sort_keys=True)}"
            for origin, model in DEMO_FORECASTS
        ),
    ], before
    # the scores the runs wrote are among what is stale, each run's forecast's named
    assert before.count("yellow_rides_forecast_scores @ ") == len(DEMO_FORECASTS), before
    for origin, model in DEMO_FORECASTS:
        assert f"its forecast's score in yellow_rides_forecast_scores is stale: {model} as of {origin}" in before
    rerun = section("bash run lineage --stale --rerun")
    assert "nothing is stale: every output was computed from what its inputs hold now" in rerun, rerun
    (reproduced,) = [text for head, text in sections.items() if "(bash run lineage --reproduce " in head]
    found = dict(re.findall(r"^(\S+) @ \d+: reproduced: (\d+) rows equal$", reproduced, flags=re.M))
    assert found.keys() == {"yellow_rides_hourly_actuals", "yellow_rides_hourly_forecast"}, reproduced
    assert all(int(rows) > 0 for rows in found.values()) and "differ" not in reproduced, reproduced


def test_the_runs_of_a_flow_and_of_a_dag_say_what_the_runs_under_them_read_and_wrote(demo):
    """`--runs TrainForecastModelFlow` (the README's way to find run ids) and `--runs train_forecast_model`:
    each flow run and DAG run with what its steps (and, for the DAG, the flow it started) read from outside
    it and wrote, with versions, as its steps' own runs recorded them."""
    from nyc_taxi.lineage.read.runs import Runs

    settings = demo[0]
    runs = Runs.read(settings)

    def steps_under(run_id: str) -> list:
        """The flow's step runs whose chain of parents reaches ``run_id``."""
        found = []
        for step in (r for r in runs if r.job.startswith(f"{F}.")):
            parent = step.parent
            while parent and parent[1] != run_id:
                parent = runs.by_id[parent[1]].parent if parent[1] in runs.by_id else None
            if parent:
                found.append(step)
        return found

    for job in (F, T):
        answer = json.loads(_lineage_cli(demo, "--runs", job, "--json").stdout)
        assert len(answer) == len(DEMO_FLOW_RUNS)
        for run in answer:
            steps = steps_under(run["run_id"])
            assert len(steps) == 8, (job, run["label"])
            written = {n: v for s in steps for n, v in s.outputs.items()}
            assert run["outputs"]["yellow_rides_hourly_forecast"] == written["yellow_rides_hourly_forecast"]
            assert run["outputs"]["yellow_rides_forecast_model"] == written["yellow_rides_forecast_model"]
            assert run["inputs"]["yellow_taxi_raw"] == next(
                s.inputs["yellow_taxi_raw"] for s in steps if "yellow_taxi_raw" in s.inputs
            )
            assert "yellow_rides_hourly_actuals" not in run["inputs"]  # written inside the run: not read from outside
            assert ("weather_raw" in run["inputs"]) == (steps[0].parameters["model"] == "weather_adjusted")
        text = _lineage_cli(demo, "--runs", job).stdout
        assert "read  -" not in text and "wrote -" not in text and "yellow_taxi_raw@" in text


# ---- versions, evolution, the Airflow → Metaflow hop and columns (what the lineage can answer) ----


def _flow_runs(demo) -> list[str]:
    """The demo's last two flow runs before the republication (seasonal, weather-adjusted, of the same origin),
    as users name them: ``TrainForecastModelFlow/<run id>``; the re-run after the republication repeats them."""
    runs = json.loads(_lineage_cli(demo, "--runs", F, "--json").stdout)
    assert [r["parameters"]["model"] for r in runs] == DEMO_FLOW_RUNS
    first = runs[len(DEMO_FORECASTS) - 2 : len(DEMO_FORECASTS)]
    assert len({r["parameters"]["as_of_datetime"] for r in first}) == 1
    return [f"{F}/{r['label'].split('/')[-1]}" for r in first]


def test_diff_of_the_two_flow_runs_is_exactly_the_weather(demo):
    seasonal, weather = _flow_runs(demo)
    change = json.loads(_lineage_cli(demo, "--diff", seasonal, weather, "--json").stdout)
    assert change["reads"] == {"added": ["weather_raw"], "removed": []}
    assert change["upstream"] == {"added": [W], "removed": []}
    assert change["writes"] == {"added": [], "removed": []}
    assert change["parameters"] == {"model": ["seasonal_naive", "weather_adjusted"]}
    assert {f"{F}.prepare_training_data", f"{F}.train_forecasting_model"} <= set(change["job_versions"])
    assert change["code"] is None  # one commit ran both
    back = json.loads(_lineage_cli(demo, "--diff", weather, seasonal, "--json").stdout)
    assert (back["reads"], back["upstream"]) == (
        {"added": [], "removed": ["weather_raw"]},
        {"added": [], "removed": [W]},
    )
    # the demo printed the same diff
    assert f"--diff {seasonal} {weather}" in demo[1]
    assert "reads:      + weather_raw" in demo[1] and f"upstream:   + {W}" in demo[1]


def test_datahub_keeps_what_each_step_run_really_read_and_its_job_version(demo):
    """A DataHub user sees the evolution on the runs: each step run's DataProcessInstance has the inputs
    that run used and its job version, equal to the OpenLineage events of the same run."""
    from nyc_taxi.lineage.read.runs import Runs
    from nyc_taxi.lineage.read.store import LineageStore

    settings = demo[0]
    runs = {r.label: r for r in Runs.read(settings) if r.job == f"{F}.prepare_training_data"}
    assert len(runs) == len(DEMO_FLOW_RUNS)
    seen = {}
    with LineageStore(settings).open() as lite:
        for urn in lite.list_ids():
            if not urn.startswith("urn:li:dataProcessInstance:"):
                continue
            aspects = lite.get(urn, aspects=["dataProcessInstanceProperties", "dataProcessInstanceInput"]) or {}
            properties = aspects.get("dataProcessInstanceProperties", {}).get("customProperties", {})
            if properties.get("metaflow_pathspec") in runs:
                inputs = aspects.get("dataProcessInstanceInput", {}).get("inputs", [])
                seen[properties["metaflow_pathspec"]] = (sorted(inputs), properties.get("job_version"))
    urn = {name: identity(registry.DATASETS[name], settings).datahub_urn for name in registry.DATASETS}
    assert len(seen) == len(DEMO_FLOW_RUNS)
    for pathspec, (inputs, version) in seen.items():
        run = runs[pathspec]
        assert inputs == sorted(urn[name] for name in run.inputs)
        assert version == run.job_version
    assert sorted(len(inputs) for inputs, _ in seen.values()) == [1] * 4 + [2] * 4  # + weather_raw


def test_the_flow_runs_are_children_of_the_airflow_task_that_started_them(demo):
    """OpenLineage: the flow run's parent is the run_training_flow task run, its root that task's DAG run.
    DataHub: the flow run's DataProcessInstance has the plugin's task run as its parent instance."""
    from nyc_taxi.lineage.read.runs import read_events
    from nyc_taxi.lineage.read.store import LineageStore

    settings = demo[0]
    events = read_events(settings)
    task_runs = {e["run"]["runId"]: e for e in events if e["job"]["name"] == f"{T}.run_training_flow"}
    flow_starts = [e for e in events if e["job"]["name"] == F and e["eventType"] == "START"]
    assert len(flow_starts) == len(task_runs) == len(DEMO_FLOW_RUNS)
    for event in flow_starts:
        parent = event["run"]["facets"]["parent"]
        assert (parent["job"]["namespace"], parent["job"]["name"]) == (
            settings.openlineage_namespace,
            f"{T}.run_training_flow",
        )
        task_run = task_runs[parent["run"]["runId"]]
        dag_run = task_run["run"]["facets"]["parent"]
        assert parent["root"]["job"]["name"] == dag_run["job"]["name"] == T
        assert parent["root"]["run"]["runId"] == dag_run["run"]["runId"]
    with LineageStore(settings).open() as lite:
        instances = {
            u: lite.get(u, aspects=["dataProcessInstanceRelationships"]) or {}
            for u in lite.list_ids()
            if u.startswith("urn:li:dataProcessInstance:")
        }
    relations = {u: a.get("dataProcessInstanceRelationships", {}) for u, a in instances.items()}
    flow_urn = f"urn:li:dataFlow:(metaflow,{F},PROD)"
    flow_runs = [r for r in relations.values() if r.get("parentTemplate") == flow_urn]
    task_urn = f"urn:li:dataJob:(urn:li:dataFlow:(airflow,{T},PROD),run_training_flow)"
    assert len(flow_runs) == len(DEMO_FLOW_RUNS)
    for flow_run in flow_runs:
        assert relations[flow_run["parentInstance"]]["parentTemplate"] == task_urn  # the plugin's own record


def _trace(demo, target: str) -> dict:
    result = _lineage_cli(demo, "--trace", target, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _writers(version: dict, job: str) -> list[dict]:
    return [w for w in version["written_by"] if w["job"] == job]


def _read(run: dict, dataset: str) -> dict:
    [version] = [v for v in run["read"] if v["dataset"] == dataset]
    return version


def _raw_read_by_the_forecast(trace: dict) -> dict:
    """forecast ← write_forecasts run ← model ← training run ← actuals ← compute_actuals run ← raw, along
    the latest flow run whose branch the trace walks (a run that read an actuals version an earlier run
    read too finds it traced once, where it was first met)."""
    for write in reversed(_writers(trace, f"{F}.write_forecasts_to_table")):
        [train] = _writers(_read(write, "yellow_rides_forecast_model"), f"{F}.train_forecasting_model")
        actuals = _writers(_read(train, "yellow_rides_hourly_actuals"), f"{F}.compute_actuals")
        if actuals:
            assert [r["job"] for r in actuals[-1]["started_by"]] == [F, f"{T}.run_training_flow", T]  # Airflow's
            return _read(actuals[-1], "yellow_taxi_raw")
    raise AssertionError("no branch of the trace reaches yellow_taxi_raw")


def test_trace_of_the_forecast_names_the_exact_versions(demo):
    from nyc_taxi.core.catalog import current_snapshot_id
    from nyc_taxi.lineage.read.runs import Runs

    settings = demo[0]
    raw = _raw_read_by_the_forecast(_trace(demo, "yellow_rides_hourly_forecast"))
    compute_actuals = [r for r in Runs.read(settings) if r.job == f"{F}.compute_actuals"][-1]
    assert raw["version"] == str(current_snapshot_id(registry.YELLOW_TAXI_RAW, settings))
    assert raw["version"] == compute_actuals.inputs["yellow_taxi_raw"]
    # raw's own trace walks each merge back to its source (in the forecast's, the branch of the runs
    # before January's republication met the first two merges first)
    raw = _trace(demo, "yellow_taxi_raw")
    assert raw["version"] == str(current_snapshot_id(registry.YELLOW_TAXI_RAW, settings))
    merges = _writers(raw, f"{Y}.merge_upsert_staging_into_raw_yellow")
    assert [m["parameters"]["month"] for m in merges] == DEMO_MERGES and raw["commits"] == len(DEMO_MERGES)
    for merge, month in zip(merges, DEMO_MERGES, strict=True):
        staging = _read(merge, "yellow_taxi_staging")
        [stage] = _writers(staging, f"{Y}.stage_landed_files")
        [download] = _writers(_read(stage, "tlc_yellow_tripdata_landed"), f"{Y}.download_published_files")
        source = _read(download, "tlc_yellow_tripdata_published")
        assert source["version"].startswith(f"yellow_tripdata_{month}.parquet@etag:")
        assert source["locations"] == [f"{demo_url(download)}/trip-data/yellow_tripdata_{month}.parquet"]


@pytest.fixture(scope="class")
def raw_before_march_and_april(demo) -> str:
    """yellow_taxi_raw's snapshot as the demo left it; then April and May reach the demo's Airflow in
    one process of DAG runs. A class-scoped fixture: the demo's state is restored after the class."""
    from nyc_taxi.airflow_adapter.environment import airflow_environment
    from nyc_taxi.core.catalog import current_snapshot_id
    from nyc_taxi_proving.fixtures.server import FixtureServer
    from nyc_taxi_proving.fixtures.site import add_taxi_month

    settings = demo[0]
    raw_before = str(current_snapshot_id(registry.YELLOW_TAXI_RAW, settings))
    site = settings.state_dir / "demo-site"
    with _restored_afterwards(settings.state_dir):
        truncated = add_taxi_month(site, 2024, 4, rows=5_000, seed=3)
        truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
        add_taxi_month(site, 2024, 5, rows=5_000, seed=4)
        with FixtureServer(site) as url:
            env = {
                **os.environ,
                "STATE_DIR": str(settings.state_dir),
                "TLC_BASE_URL": url,
                "NOAA_BASE_URL": url,
                **airflow_environment(settings),
            }
            months = [f'{Y}:{{"month": "2024-04"}}', f'{Y}:{{"month": "2024-05"}}']
            runs = subprocess.run(
                [sys.executable, "-m", "nyc_taxi.airflow_adapter.dag_runs", *months],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
        states = [json.loads(line)["state"] for line in runs.stdout.splitlines() if line.startswith("{")]
        assert states == ["failed", "success"], (runs.stdout + runs.stderr)[-3000:]
        yield raw_before


class TestAfterTheDemo:
    """Two more taxi months reach the demo's Airflow in one process of DAG runs: April's file arrives
    truncated (its run fails), then May loads. The demo is shared by other tests, so its state is put
    back exactly as it was once the tests of this class are done."""

    def test_a_failed_run_is_compared_with_the_last_good(self, demo, raw_before_march_and_april):
        download = f"{Y}.download_published_files"
        runs = json.loads(_lineage_cli(demo, "--runs", download, "--json").stdout)
        [failed] = [r for r in runs if r["state"] == "failure"]
        assert "yellow_tripdata_2024-04.parquet" in failed["error"]
        last_good = BROKEN_MONTH  # its file downloaded whole: its checks refused it later, in the merge
        assert failed["changed_since_last_good"]["parameter month"] == [last_good, "2024-04"]
        text = _lineage_cli(demo, "--runs", download).stdout
        assert f"changed since the last good run: parameter month: {last_good} → 2024-04" in text
        # a failed run is a run of the job, not a new version of what it does: DataHub keeps its columns
        landed = json.loads(_lineage_cli(demo, "tlc_yellow_tripdata_landed.VendorID", "--json").stdout)
        assert _origins(landed) == {("tlc_yellow_tripdata_published", "VendorID")}

    def test_the_forecasts_trace_names_the_versions_it_read_after_raw_moved_on(self, demo, raw_before_march_and_april):
        from nyc_taxi.core.catalog import current_snapshot_id

        raw_then = raw_before_march_and_april
        raw_now = str(current_snapshot_id(registry.YELLOW_TAXI_RAW, demo[0]))
        assert raw_now != raw_then
        again = _raw_read_by_the_forecast(_trace(demo, "yellow_rides_hourly_forecast"))
        assert again["version"] == raw_then
        assert [m["parameters"]["month"] for m in _writers(again, f"{Y}.merge_upsert_staging_into_raw_yellow")] == (
            DEMO_MERGES
        )
        today = _trace(demo, "yellow_taxi_raw")
        assert today["version"] == raw_now
        assert [m["parameters"]["month"] for m in _writers(today, f"{Y}.merge_upsert_staging_into_raw_yellow")] == [
            *DEMO_MERGES,
            "2024-05",
        ]
        old = _trace(demo, f"yellow_taxi_raw@{raw_then}")
        assert len(_writers(old, f"{Y}.merge_upsert_staging_into_raw_yellow")) == len(DEMO_MERGES)


@contextlib.contextmanager
def _restored_afterwards(state_dir):
    """Iceberg metadata names absolute paths, so the state is changed in place and restored from a copy.

    Its SQLite databases (the catalog, Airflow's, DataHub Lite's) are copied through SQLite's backup API,
    both ways, never as files: reading a database's file in a process that has it open drops that
    process's POSIX locks on it; a writer in another process may then checkpoint and delete the WAL this
    process still has open, and this process's next close deletes the new WAL, that writer's commits in it.
    """
    backup = state_dir.with_name(state_dir.name + ".before")
    shutil.rmtree(backup, ignore_errors=True)
    shutil.copytree(state_dir, backup, symlinks=True, ignore=_sqlite_sidecars, copy_function=_copy)
    try:
        yield
    finally:
        for folder, _, names in os.walk(state_dir):
            for name in set(names) - _sqlite_sidecars(folder, names):
                if not name.endswith(".db"):
                    os.unlink(os.path.join(folder, name))
        shutil.copytree(backup, state_dir, symlinks=True, dirs_exist_ok=True, copy_function=_copy)
        shutil.rmtree(backup)


def _sqlite_sidecars(folder, names) -> set[str]:
    return {n for n in names if n.endswith(("-wal", "-shm", "-journal"))}


def _copy(source: str, target: str) -> str:
    if not source.endswith(".db"):
        return shutil.copy2(source, target)
    with contextlib.closing(sqlite3.connect(source)) as database, contextlib.closing(sqlite3.connect(target)) as copy:
        database.backup(copy)
    return target


def demo_url(download_run: dict) -> str:
    """The fixture server the demo's download run fetched from (a port of its own)."""
    url = _read(download_run, "tlc_yellow_tripdata_published")["locations"][0]
    return url.split("/trip-data/")[0]


# Written out by hand from the SQL files and the model code: the published columns each column comes from.
NOAA_DAYS = {f"day{d}" for d in range(1, 32)}
EXPECTED_ORIGINS = {
    "yellow_rides_hourly_forecast.predicted_ride_count": {("tlc_yellow_tripdata_published", "tpep_pickup_datetime")}
    | {("noaa_nclimgrid_daily_county_published", c) for c in NOAA_DAYS | {"variable", "month", "year"}},
    "yellow_rides_hourly_forecast.pickup_location_id": {("tlc_yellow_tripdata_published", "PULocationID")},
    "yellow_rides_hourly_forecast.forecast_hour": {("tlc_yellow_tripdata_published", "tpep_pickup_datetime")},
    "yellow_rides_hourly_actuals.ride_count": {("tlc_yellow_tripdata_published", "tpep_pickup_datetime")},
    "yellow_taxi_raw.airport_fee": {("tlc_yellow_tripdata_published", "Airport_fee")},
    "yellow_taxi_raw.vendor_id": {("tlc_yellow_tripdata_published", "VendorID")},
    "weather_raw.prcp_mm": {("noaa_nclimgrid_daily_county_published", c) for c in NOAA_DAYS | {"variable"}},
    "weather_raw.county_code": {("noaa_nclimgrid_daily_county_published", "region_code")},
}


def _origins(step: dict) -> set[tuple[str, str]]:
    if not step["upstream"]:
        return {(step["dataset"], step["column"])}
    return set().union(*(_origins(u) for u in step["upstream"]))


@pytest.mark.parametrize("column", sorted(EXPECTED_ORIGINS))
def test_column_lineage_reaches_the_published_columns(demo, column):
    result = _lineage_cli(demo, column, "--json")
    assert result.returncode == 0, result.stderr
    assert _origins(json.loads(result.stdout)) == EXPECTED_ORIGINS[column]


def test_column_lineage_hop_by_hop_from_the_forecast_to_the_tlc_column(demo):
    """Each hop names the job and how: the forecast's count back to the TLC's pickup time."""
    step = json.loads(_lineage_cli(demo, "yellow_rides_hourly_forecast.predicted_ride_count", "--json").stdout)
    path = []
    for dataset, column in (
        ("yellow_rides_forecast_model", "history_ride_count"),
        ("yellow_rides_hourly_actuals", "ride_count"),
        ("yellow_taxi_raw", "pickup_datetime"),
        ("yellow_taxi_staging", "pickup_datetime"),
        ("tlc_yellow_tripdata_landed", "tpep_pickup_datetime"),
        ("tlc_yellow_tripdata_published", "tpep_pickup_datetime"),
    ):
        [step] = [u for u in step["upstream"] if (u["dataset"], u["column"]) == (dataset, column)]
        path.append((step["job"], step["transformation"]))
    assert path == [
        (f"{F}.write_forecasts_to_table", "CONDITIONAL,TRANSFORMATION"),
        (f"{F}.train_forecasting_model", "IDENTITY"),
        (f"{F}.compute_actuals", "AGGREGATION"),
        (f"{Y}.merge_upsert_staging_into_raw_yellow", "IDENTITY"),
        (f"{Y}.stage_landed_files", "TRANSFORMATION"),
        (f"{Y}.download_published_files", "IDENTITY"),
    ]
    text = _lineage_cli(demo, "yellow_rides_hourly_forecast.predicted_ride_count").stdout
    assert "tlc_yellow_tripdata_published.tpep_pickup_datetime  (identity, by ingest_yellow_taxi_data.download" in text
    assert "noaa_nclimgrid_daily_county_published.{day1…day31, variable}" in text  # a NOAA file's day columns, folded


def test_the_demo_says_each_task_and_each_flow_step_as_it_ends(demo):
    """The demo's DAG runs are not silent while they run: each task's end, and each step's of the flows the
    training tasks start, is printed as it happens (``core/progress``), in the order they ended."""
    import re

    _, stdout, _ = demo
    tasks = re.findall(r"^\s+(\w+)\.(\w+): (success|failed|skipped)", stdout, flags=re.M)
    steps = re.findall(r"^\s+TrainForecastModelFlow/(\d+)/(\w+): done", stdout, flags=re.M)
    for dag in (j.INGEST_YELLOW_TAXI_DATA, j.INGEST_WEATHER_DATA, j.TRAIN_FORECAST_MODEL):
        ended = {task for d, task, state in tasks if d == dag.name and state == "success"}
        assert {job.name for job in dag.jobs} <= ended, (dag.name, ended)
    per_run: dict[str, list[str]] = {}
    for run, step in steps:
        per_run.setdefault(run, []).append(step)
    assert len(per_run) >= 4  # both models at both origins (and the re-run's)
    assert all(said == [job.name for job in j.TRAINING_FLOW.jobs] for said in per_run.values()), per_run


def test_the_demo_stays_offline_whatever_lineage_servers_the_machines_settings_name(demo):
    """The demo ran with OPENLINEAGE_URL, DATAHUB_GMS_URL, a datahub_rest_default connection and an airflow.cfg
    whose [openlineage] config_path names a transport, each to one server (``conftest.demo``): it said it set
    them aside, that server got no request (the republication's re-run included), and the lineage is in the
    demo's own files all the same."""
    from lineage_receiver import local_lineage

    settings, stdout, _ = demo
    aside = "AIRFLOW_CONFIG, AIRFLOW_CONN_DATAHUB_REST_DEFAULT, DATAHUB_GMS_URL, OPENLINEAGE_URL"
    assert f"(not used by the demo, which is offline: {aside};" in stdout, stdout[:3000]
    assert (settings.state_dir.parent / "sent-elsewhere.count").read_text() == "0"
    recorded = local_lineage(settings)
    assert recorded.openlineage and recorded.datahub


def test_the_demo_ends_with_both_models_compared_at_its_origins_as_duckdb_scores_them(demo):
    """After the demo the forecast table holds both models' forecasts for every origin it ran, and the table it
    prints last equals DuckDB's scores over the forecast and actuals tables' files as they are now: WAPE and MAE
    per origin and model, the winner of each origin, and the wins."""
    from expected_loads import duckdb_scores

    from nyc_taxi.core.catalog import load_table
    from nyc_taxi_proving.cli.demo import MODELS, ORIGINS

    settings, stdout = demo[0], demo[1]
    kept = load_table(registry.YELLOW_RIDES_HOURLY_FORECAST, settings).scan(
        selected_fields=("model_name", "as_of_datetime")
    )
    assert {(r["model_name"], r["as_of_datetime"]) for r in kept.to_arrow().to_pylist()} >= {
        (model, origin) for model in MODELS for origin in ORIGINS
    }
    scores = duckdb_scores(settings=settings)
    printed = stdout.split("the models compared at the demo's origins", 1)[1]
    wins = dict.fromkeys(MODELS, 0)
    for origin in ORIGINS:
        [line] = [text for text in printed.splitlines() if text.strip().startswith(f"{origin:%Y-%m-%d %H:%M}")]
        for model in MODELS:
            score = scores[(model, origin)]
            assert score["coverage"] == 1, (model, origin)
            assert f"{score['wape']:.1%} ({score['mae']:.2f})" in line, (model, line)
        winner = min(MODELS, key=lambda m: scores[(m, origin)]["wape"])
        wins[winner] += 1
        assert line.rstrip().endswith(winner), line
    said = ", ".join(f"{m} {wins[m]} of {len(ORIGINS)}" for m in MODELS)
    assert f"wins: {said}" in printed, printed


def test_trace_of_the_scores_reaches_the_source_files_of_both_their_inputs(demo):
    """`--trace yellow_rides_forecast_scores`: each commit's evaluate run read a forecast version and an actuals
    version; the forecasts' branch walks through the model and the actuals it trained on, the actuals' branch
    through raw, and both end at the published TLC files (and the weather model's at NOAA's)."""

    expanded: dict = {}  # a version is traced once, where first met; elsewhere it is a stub ("see above")

    def index(version: dict) -> None:
        if version.get("written_by"):
            expanded.setdefault((version["dataset"], version["version"]), version)
        for run in version.get("written_by", []):
            for read in run.get("read", []):
                index(read)

    def published(version: dict, seen: set) -> set[str]:
        version = expanded.get((version["dataset"], version["version"]), version)
        found = {version["dataset"]} if version["dataset"].endswith("_published") else set()
        for run in version.get("written_by", []):
            for read in run.get("read", []):
                key = (read["dataset"], read["version"])
                if key not in seen:
                    seen.add(key)
                    found |= published(read, seen)
        return found

    trace = _trace(demo, "yellow_rides_forecast_scores")
    index(trace)
    writers = trace["written_by"]
    assert writers and {w["job"] for w in writers} == {f"{F}.evaluate"}
    for writer in writers:
        assert {r["dataset"] for r in writer["read"]} == {"yellow_rides_hourly_forecast", "yellow_rides_hourly_actuals"}
    latest = writers[-1]
    for dataset in ("yellow_rides_hourly_forecast", "yellow_rides_hourly_actuals"):
        assert "tlc_yellow_tripdata_published" in published(_read(latest, dataset), set()), dataset
    assert published(trace, set()) == {"tlc_yellow_tripdata_published", "noaa_nclimgrid_daily_county_published"}
