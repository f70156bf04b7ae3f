"""What the site shows, read once: the graph from DataHub Lite, the runs from the OpenLineage events,
each table's versions from Iceberg, each dataset's checks and profiles (DataHub Lite), the column
lineage, the version trace of every run, the graph
after every run (for the evolution view), forecast vs actual and the Metaflow cards.

Nothing here decides how it looks (``pages`` and ``drawing`` do); every figure comes from the read
modules next to this package, so the site says exactly what ``bash run lineage`` says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nyc_taxi.core import datasets as d
from nyc_taxi.core.comparison import Comparison, compare
from nyc_taxi.core.datasets import DATASETS, Dataset, Table
from nyc_taxi.core.jobs import JOBS, PIPELINES, Job, Pipeline
from nyc_taxi.core.naming import Identity, iceberg_identifier, identity
from nyc_taxi.core.settings import Settings
from nyc_taxi.lineage.read.columns import ColumnStep, field_lineage_in, upstream_of
from nyc_taxi.lineage.read.evolution import graph_of
from nyc_taxi.lineage.read.graph import Edge, LineageGraph, Node
from nyc_taxi.lineage.read.lite import dataset_node
from nyc_taxi.lineage.read.quality import DatasetQuality, Quality
from nyc_taxi.lineage.read.quality import read as read_quality
from nyc_taxi.lineage.read.reproductions import recorded as recorded_reproductions
from nyc_taxi.lineage.read.runs import JobRun, Runs, job_runs
from nyc_taxi.lineage.read.stale import StaleReport, flow_runs
from nyc_taxi.lineage.read.stale import check as check_stale
from nyc_taxi.lineage.read.trace import Tracer, verdict_of


@dataclass
class Version:
    """One version of a dataset: an Iceberg snapshot, a set of files, a trained model."""

    version: str
    at: str | None = None  # when it was committed (Iceberg) or first reported (files, model), ISO UTC
    writer: JobRun | None = None  # the run that wrote it (none for published files)
    operation: str = ""  # Iceberg's: append, overwrite, ...
    records: dict[str, str] = field(default_factory=dict)  # Iceberg's added / total records
    locations: list[str] = field(default_factory=list)  # the files of a file version
    current: bool = False


@dataclass
class DatasetFacts:
    node: Node
    declared: Dataset | None = None  # the registry's declaration (None: not in the registry)
    identity: Identity | None = None
    iceberg_identifier: str | None = None
    schema: dict[str, dict] = field(default_factory=dict)  # column -> DataHub's schemaMetadata field
    versions: list[Version] = field(default_factory=list)  # oldest first
    quality: DatasetQuality | None = None  # its checks' results and its profiles, version by version
    columns: dict[str, ColumnStep] = field(default_factory=dict)  # column -> where it comes from


@dataclass
class JobFacts:
    """A task, a step, a DAG or a flow, and its runs."""

    name: str  # dag.task, Flow.step, dag, Flow
    node: Node | None = None  # in the graph (tasks and steps)
    declared: Job | Pipeline | None = None
    runs: list[JobRun] = field(default_factory=list)  # oldest first; failed runs compared with the last good

    @property
    def is_pipeline(self) -> bool:
        return "." not in self.name


@dataclass
class Evolution:
    """The graph as the runs up to each moment recorded it: one state per run start (the graph only
    changes when a run starts), all drawn on the union of them so nothing moves between states."""

    union: LineageGraph
    moments: list[str]  # ISO UTC, ascending
    states: list[set[Edge]]  # the edges at each moment
    pipeline_runs: list[JobRun]  # the runs a user compares: DAG and flow runs

    def state_at(self, moment: str) -> int:
        """The index of the last state at or before ``moment`` (-1: before the first run)."""
        return max((i for i, m in enumerate(self.moments) if m <= moment), default=-1)


@dataclass
class ForecastVsActual:
    """Rides summed over the zones, per forecast hour: what the forecast table says and what happened."""

    dataset: str  # the forecast table's name: its page shows the chart
    model: str
    as_of: str
    hours: list[str]
    forecast: list[float]
    actual: list[float | None]


@dataclass
class SiteData:
    graph: LineageGraph
    runs: Runs
    datasets: dict[str, DatasetFacts]  # by URN: every dataset node, and registry datasets nothing recorded yet
    jobs: dict[str, JobFacts]  # by name
    traces: dict[str, dict]  # run id -> the version trace of that run (trace.RunStep.as_dict())
    evolution: Evolution
    current_traces: dict[str, dict] = field(default_factory=dict)  # dataset -> the trace of its current version
    forecast: ForecastVsActual | None = None
    cards: dict[str, Path] = field(default_factory=dict)  # run id -> the Metaflow card that run produced
    stale: StaleReport = field(default_factory=StaleReport)  # what is stale now, and the re-run plan
    reproductions: dict[str, dict] = field(default_factory=dict)  # run id -> the latest --reproduce answer
    backtests: Comparison | None = None  # the models compared on the scores of their common origins


# ---- datasets ------------------------------------------------------------------------------------


def _datahub_schema(lite, urn: str) -> dict[str, dict]:
    """DataHub's schemaMetadata of a dataset, per column (simple field path)."""
    from datahub.utilities.urns.field_paths import get_simple_field_path_from_v2_field_path

    schema = (lite.get(urn, aspects=["schemaMetadata"]) or {}).get("schemaMetadata") or {}
    return {get_simple_field_path_from_v2_field_path(f["fieldPath"]): f for f in schema.get("fields", [])}


def _snapshot_versions(table: Table, runs: Runs, settings: Settings) -> list[Version]:
    """A table's Iceberg snapshots, each with the run that committed it."""
    import datetime as dt

    from pyiceberg.exceptions import NoSuchTableError

    from nyc_taxi.core.catalog import load_table

    try:
        iceberg = load_table(table, settings)
    except NoSuchTableError:  # not in this lakehouse (yet): the events alone say what was written
        return _reported_versions(table.name, runs)
    current = iceberg.current_snapshot()
    versions = []
    for snapshot in iceberg.snapshots():
        summary = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
        versions.append(
            Version(
                str(snapshot.snapshot_id),
                at=dt.datetime.fromtimestamp(snapshot.timestamp_ms / 1000, dt.UTC).isoformat(),
                writer=runs.committer(table.name, str(snapshot.snapshot_id)),
                operation=snapshot.summary.operation.value if snapshot.summary else "",
                records={k: summary[k] for k in ("added-records", "deleted-records", "total-records") if k in summary},
                current=current is not None and snapshot.snapshot_id == current.snapshot_id,
            )
        )
    return versions


def _reported_versions(name: str, runs: Runs) -> list[Version]:
    """The versions of a file dataset or a model, as the runs that wrote or read them reported them."""
    versions: dict[str, Version] = {}
    for run in runs:
        for side in (run.outputs, run.inputs):
            version = side.get(name)
            if version and version not in versions and not run.is_pipeline_run:
                versions[version] = Version(
                    version,
                    at=run.ended or run.started,
                    writer=runs.committer(name, version),
                    locations=run.locations.get(name, []),
                )
            elif version in versions and not versions[version].locations:
                versions[version].locations = run.locations.get(name, [])
    ordered = list(versions.values())
    if ordered:
        ordered[-1].current = True
    return ordered


def _column_lineage(dataset: Dataset, settings: Settings, lineage: dict) -> dict[str, ColumnStep]:
    """Each column of a registry dataset that has recorded column lineage: where it comes from."""
    found = {}
    for column in dataset.columns:
        step = upstream_of(f"{dataset.name}.{column.name}", settings, lineage)
        if step.upstream:
            found[column.name] = step
    return found


def _dataset_facts(
    node: Node, schema: dict[str, dict], in_graph: bool, runs: Runs, settings: Settings, lineage: dict, found: Quality
) -> DatasetFacts:
    from nyc_taxi.core.registry import by_urn

    declared = by_urn(node.urn, settings)
    facts = DatasetFacts(node, declared, schema=schema)
    if declared is None:
        return facts
    facts.identity = identity(declared, settings)
    facts.quality = found.of(declared.name)
    if in_graph:  # no job touched it: no column lineage either
        facts.columns = _column_lineage(declared, settings, lineage)
    if isinstance(declared, Table):
        facts.iceberg_identifier = iceberg_identifier(declared, settings)
        facts.versions = _snapshot_versions(declared, runs, settings)
    else:
        facts.versions = _reported_versions(declared.name, runs)
    return facts


def _dataset_nodes(graph: LineageGraph, settings: Settings) -> dict[str, Node]:
    """Every dataset node, and a node for each registry dataset nothing has recorded yet (a page all the same)."""
    nodes = {n.urn: n for n in graph.nodes.values() if n.kind in ("dataset", "model")}
    for dataset in DATASETS.values():
        urn = identity(dataset, settings).datahub_urn
        nodes.setdefault(urn, dataset_node(urn, settings))
    return dict(sorted(nodes.items()))


# ---- jobs, runs ---------------------------------------------------------------------------------


def _jobs(graph: LineageGraph, runs: Runs, settings: Settings) -> dict[str, JobFacts]:
    """Every task and step in the graph or the events, and every DAG and flow, with its run history."""

    def declared(name: str) -> Job | Pipeline | None:
        return JOBS.get(name) or PIPELINES.get(name)

    jobs = {n.name: JobFacts(n.name, n, declared(n.name)) for n in graph.nodes.values() if n.kind == "job"}
    for name in {r.job for r in runs} | {j.split(".", 1)[0] for j in jobs} | set(PIPELINES):
        jobs.setdefault(name, JobFacts(name, declared=declared(name)))
    names = {r.job for r in runs}
    for name, job in jobs.items():
        if name in names:
            job.runs = job_runs(name, settings)
    return dict(sorted(jobs.items()))


def _traces(runs: Runs, settings: Settings, found: Quality) -> dict[str, dict]:
    """The version trace of every run. One tracer per trace: a tracer marks what it has shown
    already, and tracing a DAG or flow run fills in that run's outputs."""
    return {run.run_id: Tracer(settings, runs, found).target(run.run_id).as_dict() for run in runs}


def _current_traces(names: list[str], settings: Settings, runs: Runs, found: Quality) -> dict[str, dict]:
    """The version trace of each dataset's current version (those that have one), with its verdict: was
    it computed only from data that passed its checks."""
    steps = {name: Tracer(settings, runs, found).target(name) for name in names}
    return {
        name: {**step.as_dict(), "checks_verdict": verdict_of(step).text()}
        for name, step in steps.items()
        if step.version
    }


def _cards(runs: Runs, settings: Settings) -> dict[str, Path]:
    """The card HTML each Metaflow step run produced (its pathspec names the task's folder), newest
    file first when a task has several."""
    found = {}
    for run in runs:
        parts = run.label.split("/")
        if len(parts) != 4:  # Flow/run/step/task: a Metaflow step run
            continue
        flow, run_number, step, task = parts
        task_dir = Path(flow, "runs", run_number, "steps", step, "tasks", task, "cards")
        for root in (settings.metaflow_home / ".metaflow", settings.metaflow_home / "mf.cards"):
            cards = sorted((root / task_dir).glob("*.html"), key=lambda p: (p.stat().st_mtime, p.name))
            if cards:
                found[run.run_id] = cards[-1]
                break
    return found


# ---- evolution ----------------------------------------------------------------------------------


def _evolution(runs: Runs, settings: Settings) -> Evolution:
    moments = sorted({r.started for r in runs if r.started})
    union, states = LineageGraph(), []
    for moment in moments:
        graph = graph_of([r for r in runs if (r.started or "") <= moment], runs, settings)
        union.nodes.update(graph.nodes)
        union.edges |= graph.edges
        states.append(set(graph.edges))
    return Evolution(union, moments, states, [r for r in runs if r.is_pipeline_run])


# ---- forecast vs actual -------------------------------------------------------------------------


def _latest_forecast(settings: Settings) -> list[dict]:
    """The forecast table's rows of its latest forecast origin, of the model written last for it (the table
    keeps every model's and origin's forecasts)."""
    from pyiceberg.exceptions import NoSuchTableError

    from nyc_taxi.core.catalog import load_table

    try:
        table = load_table(d.YELLOW_RIDES_HOURLY_FORECAST, settings)
    except NoSuchTableError:  # no forecast in this lakehouse (yet)
        return []
    origins = table.scan(selected_fields=("as_of_datetime",)).to_arrow().column("as_of_datetime").to_pylist()
    if not origins:
        return []
    rows = table.scan(row_filter=f"as_of_datetime == '{max(origins).isoformat()}'").to_arrow().to_pylist()
    model = max(rows, key=lambda r: r["created_at"])["model_name"]
    return [r for r in rows if r["model_name"] == model]


def _forecast_vs_actual(settings: Settings) -> ForecastVsActual | None:
    """The latest forecast's hours, summed over its zones, next to the actual rides of the same zones."""
    from nyc_taxi.core.catalog import load_table

    forecast = _latest_forecast(settings)
    if not forecast:
        return None
    hours = sorted({r["forecast_hour"] for r in forecast})
    zones = {r["pickup_location_id"] for r in forecast}
    predicted = dict.fromkeys(hours, 0.0)
    for row in forecast:
        predicted[row["forecast_hour"]] += row["predicted_ride_count"]
    actual: dict = {}
    scan = load_table(d.YELLOW_RIDES_HOURLY_ACTUALS, settings).scan(
        row_filter=f"pickup_hour >= '{hours[0].isoformat()}' and pickup_hour <= '{hours[-1].isoformat()}'"
    )
    for row in scan.to_arrow().to_pylist():
        if row["pickup_location_id"] in zones:
            actual[row["pickup_hour"]] = actual.get(row["pickup_hour"], 0) + row["ride_count"]
    latest = max(forecast, key=lambda r: r["created_at"])
    return ForecastVsActual(
        dataset=d.YELLOW_RIDES_HOURLY_FORECAST.name,
        model=latest["model_name"],
        as_of=latest["as_of_datetime"].isoformat(),
        hours=[h.isoformat() for h in hours],
        forecast=[round(predicted[h], 2) for h in hours],
        actual=[actual.get(h) for h in hours],
    )


# ---- all of it ------------------------------------------------------------------------------------


def collect(settings: Settings, stale: StaleReport | None = None) -> SiteData:
    """Load new records into DataHub Lite, then read everything the site shows. ``stale``: the staleness
    report to show (`bash run lineage --site` asks the sources); without one, what the records and the
    tables' metadata say (no source is asked)."""
    from nyc_taxi.lineage.read.lite import graph_from_lite
    from nyc_taxi.lineage.read.store import LineageStore

    store = LineageStore(settings)
    store.load()
    runs = Runs.read(settings)
    found = read_quality(settings)
    with store.open() as lite:
        graph = graph_from_lite(lite, settings)
        nodes = _dataset_nodes(graph, settings)
        schemas = {urn: _datahub_schema(lite, urn) for urn in nodes}
        columns = field_lineage_in(lite)  # every field-to-field edge, read once for all the columns
    datasets = {
        urn: _dataset_facts(node, schemas[urn], urn in graph.nodes, runs, settings, columns, found)
        for urn, node in nodes.items()
    }
    stale = stale if stale is not None else check_stale(settings, runs=runs)
    return SiteData(
        graph=graph,
        runs=runs,
        datasets=datasets,
        jobs=_jobs(graph, runs, settings),
        traces=_traces(runs, settings, found),
        current_traces=_current_traces(
            [f.declared.name for f in datasets.values() if f.declared], settings, runs, found
        ),
        evolution=_evolution(runs, settings),
        forecast=_forecast_vs_actual(settings),
        cards=_cards(runs, settings),
        stale=stale,
        reproductions=recorded_reproductions(settings),
        backtests=compare(settings, stale=stale.scores(), judged_runs=flow_runs(runs)),
    )
