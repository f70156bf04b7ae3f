"""`bash run demo`: the whole job on the embedded local default, offline.

Serves fixture months on 127.0.0.1 (the real download code runs), runs both ingestion DAGs for two
taxi months and their weather, then the train_forecast_model DAG for both models at two weekly origins
(a backtest, as `bash run backtest` runs one): its task starts TrainForecastModelFlow (seasonal naive, then
weather-adjusted) as a child run, which forecasts and scores every kept forecast. On the local profile all
DAG runs go through Airflow's dag.test() in one process (no scheduler runs: the Asset event a merge
emits is recorded, and the training DAG is started here, with the parameters a backtest needs). With
PROFILE=team they are triggered through the REST API of the team deployment, whose scheduler runs them
on Celery workers and starts train_forecast_model itself from each merge's asset event (with --hosts,
across the hosts of deployment/hosts.toml: the demo runs on control, the tasks on the workers). Then it
prints what the lineage can answer: the cross-tool graph of the forecast table, the exact versions
behind the forecast, how the lineage changed between the two flow runs, and where a forecast column
comes from. Then the TLC republishes January: what is stale, the re-run that fixes it, and a run
reproduced from the versions its lineage recorded. Then the TLC publishes a broken month: its checks
refuse it before raw, and the lineage shows which check failed on which version. Last, the two models
compared on the forecasts they made from the same origins (the scores table).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from nyc_taxi.airflow_adapter.environment import PROJECT_SET as AIRFLOW_SET
from nyc_taxi.airflow_adapter.environment import airflow_process_environment, prepare_directories
from nyc_taxi.cli import backtest
from nyc_taxi.core import comparison, spark_server
from nyc_taxi.core import datasets as d
from nyc_taxi.core.environments import project_set
from nyc_taxi.core.jobs import INGEST_WEATHER_DATA, INGEST_YELLOW_TAXI_DATA, TRAIN_FORECAST_MODEL, TRAINING_FLOW
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.progress import run_showing_progress
from nyc_taxi.core.settings import get_settings
from nyc_taxi.metaflow_adapter.environment import PROJECT_SET as METAFLOW_SET
from nyc_taxi_proving.fixtures.server import FixtureServer, served_to_hosts
from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month

MONTHS = ((2024, 1), (2024, 2))
ORIGINS = (dt.datetime(2024, 2, 8), dt.datetime(2024, 2, 15))  # weekly forecast origins, both models at each
LOOKBACK_DAYS, HORIZON_HOURS = 28, 24
ROWS = 200_000
MODELS = ("seasonal_naive", "weather_adjusted")
BROKEN_MONTH = (2024, 3)  # published last, with every trip a year early: refused by its checks


def _say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def _indent(text: str) -> str:
    return "    " + text.replace("\n", "\n    ")


def _log_tail(result: subprocess.CompletedProcess) -> str:
    """The end of what a failed command wrote besides its results, when no failed run's line says why."""
    from nyc_taxi.cli.dag_run_results import unexplained

    said = unexplained(result)
    return f":\n{said}" if said else ""


def _run(args: list[str], env: dict, what: str) -> subprocess.CompletedProcess:
    started = time.perf_counter()
    result = subprocess.run(args, env=env, capture_output=True, text=True)
    if result.returncode:
        print((result.stdout + result.stderr)[-6000:])
        raise SystemExit(f"{what} failed (exit {result.returncode})")
    print(f"    {what}: ok ({time.perf_counter() - started:.0f} s)", flush=True)
    return result


def _dag_runs() -> list[str]:
    """The DAG runs, in order: both ingestion DAGs per month, then both models at each origin."""
    runs = [
        f"{dag.name}:{json.dumps({'month': f'{y:04d}-{m:02d}'})}"
        for y, m in MONTHS
        for dag in (INGEST_YELLOW_TAXI_DATA, INGEST_WEATHER_DATA)
    ]
    return runs + backtest.dag_runs(list(ORIGINS), list(MODELS), LOOKBACK_DAYS, HORIZON_HOURS)


# The machine's settings of where lineage goes and of Metaflow's services: the demo is offline and uses
# none of them (`bash run training-flow`, the DAGs and `bash run lineage-replay` do).
_NOT_OFFLINE = (
    *("OPENLINEAGE_URL", "OPENLINEAGE_API_KEY", "OPENLINEAGE_ENDPOINT", "OPENLINEAGE_CONFIG", "OPENLINEAGE__"),
    *("DATAHUB_GMS_", "DATAHUB_CONN_ID", "AIRFLOW_CONN_DATAHUB", "AIRFLOW_CONFIG"),
    *("AIRFLOW__OPENLINEAGE__CONFIG_PATH", "AIRFLOW__OPENLINEAGE__TRANSPORT", "AIRFLOW__DATAHUB__CONN_ID"),
    # the demo's stale, re-run and reproduce stages read its runs from OpenLineage's events: it makes them
    *("OPENLINEAGE_DISABLED", "AIRFLOW__OPENLINEAGE__DISABLED"),
    *("METAFLOW_PROFILE", "METAFLOW_DEFAULT_", "METAFLOW_SERVICE_", "METAFLOW_DATASTORE_", "METAFLOW_DATATOOLS_"),
    *("METAFLOW_S3", "METAFLOW_CARD_", "METAFLOW_KUBERNETES_", "METAFLOW_BATCH_", "METAFLOW_ARGO_", "METAFLOW_SFN_"),
)


def _offline(settings) -> None:
    """The demo's lineage stays in its state directory's files and its flows keep their runs there, whatever
    the machine's settings name (OpenLineage's transport, a DataHub server or connection, a Metaflow
    configuration or profile): the ones it sets aside are said, their values not. Set in this process's
    environment, which every program the demo starts inherits (a team deployment it starts too)."""
    aside = sorted(k for k in os.environ if k.startswith(_NOT_OFFLINE))
    ours = project_set(os.environ, AIRFLOW_SET) | project_set(os.environ, METAFLOW_SET)  # set by `bash run` itself
    users = [name for name in aside if name not in ours]
    for name in aside:
        del os.environ[name]
    if users:
        print(
            f"    (not used by the demo, which is offline: {', '.join(users)}; `bash run lineage-replay` ships "
            "its lineage where they say)"
        )
    os.environ.update(_offline_lineage(settings))
    os.environ["METAFLOW_HOME"] = str(settings.metaflow_home)


def _offline_lineage(settings) -> dict[str, str]:
    """Where both tools look for lineage destinations, pointed at none: an OpenLineage configuration without
    a transport (over openlineage.yml in the working directory or ~/.openlineage), no Airflow connection to
    ship DataHub's records to (none looked for, in a secrets backend either), DataHub's ~/.datahubenv
    skipped, and no DataHub server in the state directory's settings file."""
    config = settings.state_dir / "demo-openlineage.yml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("# the demo is offline: no transport (its events stay in the lineage files)\ntransport: {}\n")
    return {
        "OPENLINEAGE_CONFIG": str(config),
        "DATAHUB_CONN_ID": "",
        "DATAHUB_SKIP_CONFIG": "true",
        "DATAHUB_GMS_URL": "",
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bash run demo", description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, help="where the lineage picture goes (default: <state>/lineage/picture)")
    parser.add_argument(
        "--own-jvms", action="store_true", help="no warm Spark server: every task and step starts a JVM of its own"
    )
    parser.add_argument(
        "--hosts",
        action="store_true",
        help="PROFILE=team, as root: the deployment across the hosts of deployment/hosts.toml, the demo on control",
    )
    parser.add_argument("--sources", help=argparse.SUPPRESS)  # across hosts: the operator serves them there
    args = parser.parse_args(argv)
    settings = get_settings()
    _offline(settings)
    get_settings.cache_clear()
    settings = get_settings()
    if args.hosts:
        raise SystemExit(_across_hosts(settings, [a for a in (argv or sys.argv[1:]) if a != "--hosts"]))
    site = settings.state_dir / "demo-site"
    if args.sources is None:
        _publish(site, "127.0.0.1")
    served = contextlib.nullcontext(args.sources) if args.sources else FixtureServer(site)
    with served as url, _deployment(settings, url, args.sources is None):
        _say(f"lakehouse ({settings.profile} profile) under {settings.state_dir}")
        for line in lakehouse(settings).create():
            print(f"    {line}")
        os.environ.update({"TLC_BASE_URL": url, "NOAA_BASE_URL": url})  # the sources, for every run and check
        if args.own_jvms:
            os.environ["SPARK_SERVER"] = "false"
        get_settings.cache_clear()
        settings = get_settings()
        env = airflow_process_environment(settings) | _offline_lineage(settings)
        prepare_directories(settings)
        with spark_server.warm(settings, say=lambda line: print(f"    {line}", flush=True)):
            _say(
                "Airflow: both ingestion DAGs per month, then train_forecast_model starting the flow for both models "
                f"at {len(ORIGINS)} weekly origins"
            )
            _run([sys.executable, "-m", "airflow", "db", "migrate"], env, "airflow db migrate")
            started = time.perf_counter()
            runs = [sys.executable, "-m", "nyc_taxi.airflow_adapter.dag_runs", *_dag_runs()]
            done = run_showing_progress(runs, env)
            _print_runs(done.stdout, settings)
            if done.returncode:
                raise SystemExit(f"the DAG runs failed (a failing task's error is above){_log_tail(done)}")
            print(f"    the DAG runs: ok ({time.perf_counter() - started:.0f} s)", flush=True)
            _print_asset_triggered(settings)
            _explain(settings, args.images)
            stale = _act(settings, site)
            _refuse_a_broken_month(settings, site, env)
    _site(settings, args.images, stale)
    _compare(settings)


def _publish(site: Path, where: str) -> None:
    _say(f"fixture months on {where} ({ROWS:,} trips per taxi month; the real sites are not contacted)")
    for year, month in MONTHS:
        add_taxi_month(site, year, month, rows=ROWS, seed=month)
        add_weather_month(site, year, month, seed=month)


def _across_hosts(settings, argv: list[str]) -> int:
    """The demo across the hosts of deployment/hosts.toml: as the operator (control's network, this
    machine's files), the deployment up on every host and the sources served on control's address, each
    host given their URL in its own settings; then the demo itself as a command on control, where it sees
    control's state (the lineage the workers shipped there, Metaflow's home mounted from the filer) and
    the runs go to the workers through control's scheduler. Its exit status."""
    from nyc_taxi_proving.deployment import across_hosts, services
    from nyc_taxi_proving.deployment.hosts import Network

    settings = services.team_settings(settings)
    operator = across_hosts.in_control(settings, [*argv, "--hosts"], module="nyc_taxi_proving.cli.demo")
    if operator is not None:
        return operator
    network = Network(settings)
    _say("the team deployment across hosts (bash run team up --hosts)")
    for line in across_hosts.up(settings):
        print(f"    {line}", flush=True)
    control = network.layout.host(across_hosts.CONTROL)
    site = network.directory(control.name) / "demo-site"
    _publish(site, f"control ({control.address})")
    with served_to_hosts(network, site) as url:
        # this machine's Airflow configuration and sources stay here: control has its own
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and not k.endswith("_BASE_URL")}
        env.pop(across_hosts.OPERATOR, None)
        env["AIRFLOW_PORT"] = str(settings.airflow_port)  # the deployment's API server's
        demo = [sys.executable, "-m", "nyc_taxi_proving.cli.demo", *argv, "--own-jvms", "--sources", url]
        return subprocess.run(network.command(control.name, demo), env=env).returncode


def _compare(settings) -> None:
    """The demo's models compared on the forecasts they made from its origins, as the scores table holds them
    after everything above (the republished month's re-run scored them again)."""
    last = ORIGINS[-1]
    _say(
        f"the models compared at the demo's origins (bash run backtest --no-run --origins {len(ORIGINS)} "
        f"--last {last:%Y-%m-%dT%H:%M})"
    )
    print(
        _indent(comparison.render(comparison.compare(settings, list(ORIGINS), MODELS, *backtest.staleness(settings))))
    )


@contextlib.contextmanager
def _deployment(settings, sources: str, own: bool = True):
    """On the team profile, the DAG runs go through the team deployment's scheduler and Celery workers,
    which run on after the demo: their tasks read the sources' addresses from the state directory's
    settings file when they start, so it names this demo's fixture server while it serves (also for
    the runs the scheduler starts as the deployment comes up) and no longer once it stops. On the local
    profile, nothing to do: the runs are dag.test() in this process; nor when the deployment and the
    sources are not this demo's (``own``: across hosts, the operator's)."""
    if not lakehouse(settings).airflow_deployment or not own:
        yield
        return
    from nyc_taxi.core.settings import state_settings_file
    from nyc_taxi_proving.deployment import services

    path = state_settings_file(settings.state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"TLC_BASE_URL={sources}\nNOAA_BASE_URL={sources}\n")
    try:
        _say("the team deployment under supervisord (bash run team up)")
        for line in services.up(settings):
            print(f"    {line}", flush=True)
        yield
    finally:
        path.unlink(missing_ok=True)


def _print_asset_triggered(settings) -> None:
    """The training runs the scheduler started itself, from the merges' asset events (team profile)."""
    if not lakehouse(settings).airflow_deployment:
        return
    from nyc_taxi.airflow_adapter.rest_api import RestApi

    runs = RestApi(settings).runs(TRAIN_FORECAST_MODEL.name, run_type="asset_triggered")
    for run in runs:
        print(f"      {TRAIN_FORECAST_MODEL.name} started by the scheduler from an asset event: {run['state']}")


def _print_runs(output: str, settings) -> None:
    from nyc_taxi.cli.dag_run_results import describe

    for line in output.splitlines():
        if line.startswith("{"):
            print("\n".join(f"      {text}" for text in describe(json.loads(line), settings)))


def _act(settings, site: Path):
    """The TLC republishes January (fares corrected, trips withdrawn): what is stale, the re-run that fixes
    it, and the new seasonal run reproduced from its lineage. The last staleness report (for the site)."""
    import pyarrow.parquet as pq

    from nyc_taxi.cli.dag_run_results import describe
    from nyc_taxi.cli.reproduce import reproduce
    from nyc_taxi.cli.stale import rerun, stale
    from nyc_taxi.lineage.read.runs import Runs
    from nyc_taxi.lineage.read.stale import render
    from nyc_taxi_proving.fixtures import tlc
    from nyc_taxi_proving.fixtures.site import taxi_path

    year, month = MONTHS[0]
    path = taxi_path(site, year, month)
    trips = pq.read_table(path)
    fares = trips["fare_amount"].to_numpy().copy()
    fares[::50] += 1.0
    corrected = trips.set_column(trips.schema.get_field_index("fare_amount"), "fare_amount", [fares])
    tlc.write_yellow_month(corrected.slice(0, ROWS - 500), path)
    _say(
        f"the TLC republishes {path.name} (fares corrected, 500 trips withdrawn): what is stale (bash run lineage --stale)"
    )
    report = stale(settings)
    print(_indent(render(report)))
    _say("the re-run plan, carried out through Airflow and Metaflow (bash run lineage --stale --rerun)")
    started = time.perf_counter()
    for result in rerun(report, settings):
        print("\n".join(f"      {text}" for text in describe(result, settings)))
    print(f"    re-run: ok ({time.perf_counter() - started:.0f} s)")
    after = stale(settings)
    print(_indent(render(after)))
    flow_runs = [r for r in Runs.read(settings).of_job(TRAINING_FLOW.name) if r.parameters.get("model") == MODELS[0]]
    target = f"{TRAINING_FLOW.name}/{flow_runs[-1].label.split('/')[-1]}"
    _say(
        f"the re-run's forecast, recomputed from the versions its lineage recorded (bash run lineage --reproduce {target})"
    )
    reproduce(target, settings)  # prints the answer and keeps it for the site
    return after


def _refuse_a_broken_month(settings, site: Path, env: dict) -> None:
    """The TLC publishes a month whose trips are all a year early: the stage writes it to staging, its
    checks fail, and the merge refuses it before raw changes. The lineage shows the failed check."""
    from nyc_taxi.core.catalog import current_snapshot_id
    from nyc_taxi.lineage.read import quality
    from nyc_taxi_proving.fixtures import tlc
    from nyc_taxi_proving.fixtures.site import taxi_path

    year, month = BROKEN_MONTH
    path = taxi_path(site, year, month)
    tlc.write_yellow_month(tlc.generate_yellow_month(year - 1, month, rows=ROWS // 4, seed=month), path)
    _say(f"the TLC publishes {path.name} with every pickup a year early: its checks stop it before raw")
    before = current_snapshot_id(d.YELLOW_TAXI_RAW, settings)
    spec = f"{INGEST_YELLOW_TAXI_DATA.name}:{json.dumps({'month': f'{year:04d}-{month:02d}'})}"
    done = run_showing_progress([sys.executable, "-m", "nyc_taxi.airflow_adapter.dag_runs", spec], env)
    _print_runs(done.stdout, settings)
    after = current_snapshot_id(d.YELLOW_TAXI_RAW, settings)
    if not done.returncode or after != before:
        raise SystemExit(f"the broken month was not refused as it should have been{_log_tail(done)}")
    print(f"    {d.YELLOW_TAXI_RAW.name} is unchanged: snapshot {after}")
    _say(f"its checks, version by version (bash run lineage --quality {d.YELLOW_TAXI_STAGING.name})")
    print(_indent(quality.render(quality.read(settings).of(d.YELLOW_TAXI_STAGING.name), history=4)))


def _explain(settings, images: Path | None) -> None:
    from nyc_taxi.lineage.read import render
    from nyc_taxi.lineage.read.columns import render as render_columns
    from nyc_taxi.lineage.read.columns import upstream_of
    from nyc_taxi.lineage.read.evolution import diff, render_diff
    from nyc_taxi.lineage.read.lite import load_graph
    from nyc_taxi.lineage.read.runs import Runs
    from nyc_taxi.lineage.read.trace import render as render_trace
    from nyc_taxi.lineage.read.trace import trace
    from nyc_taxi.lineage.write.datahub_pipeline import ingest_catalog

    _say("DataHub's own Iceberg source on the catalog (schemas and properties, the same URNs)")
    print(f"    {ingest_catalog(settings)}")

    _say(
        "the cross-tool graph of the forecast table, from DataHub Lite (bash run lineage yellow_rides_hourly_forecast)"
    )
    graph = load_graph(settings)
    print(_indent(render.tree(graph, graph.resolve(d.YELLOW_RIDES_HOURLY_FORECAST.name))))
    raw = graph.resolve(d.YELLOW_TAXI_RAW.name)
    writers = sorted({graph.nodes[e.source].tool for e in graph.edges if e.target == raw and e.kind == "write"})
    readers = sorted({graph.nodes[e.target].tool for e in graph.edges if e.source == raw and e.kind == "read"})
    print(f"\n    one node for yellow_taxi_raw ({raw}): written by {', '.join(writers)}, read by {', '.join(readers)}")

    _say("what exactly the forecast was computed from (bash run lineage --trace yellow_rides_hourly_forecast)")
    print(_indent(render_trace(trace(d.YELLOW_RIDES_HOURLY_FORECAST.name, settings))))

    flow_runs = [r for r in Runs.read(settings).of_job(TRAINING_FLOW.name)]
    if len(flow_runs) >= 2:
        first, second = (f"{TRAINING_FLOW.name}/{r.label.split('/')[-1]}" for r in flow_runs[-2:])
        _say(f"how the lineage changed when the model started using weather (bash run lineage --diff {first} {second})")
        print(_indent(render_diff(diff(first, second, settings))))

    column = f"{d.YELLOW_RIDES_HOURLY_FORECAST.name}.predicted_ride_count"
    _say(f"where a forecast column comes from (bash run lineage {column})")
    print(_indent(render_columns(upstream_of(column, settings))))


def _site(settings, images: Path | None, stale) -> None:
    from nyc_taxi.lineage.read.lite import load_graph
    from nyc_taxi.lineage.read.site.build import build_site
    from nyc_taxi.lineage.read.site.picture import write_picture

    _svg, page = write_picture(load_graph(settings), images or settings.lineage_dir / "picture")
    _say("the lineage site (bash run lineage --site): a page per dataset, job and run; versions, columns, evolution")
    site = build_site(settings, stale=stale)
    _say("where to look next")
    print(f"    the lineage site: {site.as_uri()}   (or: bash run lineage serve)")
    print(f"    the whole graph: {page}")
    print(
        "    bash run lineage yellow_taxi_raw     # any dataset or job, --json, --runs <job>, --trace, --as-of, --diff"
    )
    print("    bash run lineage --stale             # what a source change made stale; --rerun: fix it")
    if lakehouse(settings).airflow_deployment:
        from nyc_taxi.airflow_adapter.rest_api import base_url

        print(f"    bash run team status                 # the deployment runs on: {base_url(settings)}")
    else:
        print("    bash run airflow standalone          # the DAG runs in the Airflow UI (http://localhost:8080)")
    print("    bash run training-flow card get evaluate evaluation.html   # forecast vs actual, as a page")
    print("    DATAHUB_GMS_URL=http://localhost:58080 bash run lineage-replay  # the same records in a real DataHub")


if __name__ == "__main__":
    main()
