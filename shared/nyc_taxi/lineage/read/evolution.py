"""How the lineage changed: the graph as the runs up to a moment recorded it (``--as-of``), and what
differs between two runs of a job, a DAG or a flow (``--diff``).

Both are read from the OpenLineage events: every run says what it read and wrote, so the graph at a
moment is made of each job's last run up to then, not of the latest DataJob only. Node URNs are the
DataHub URNs, so an as-of graph and the graph in DataHub Lite compare node for node.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from nyc_taxi.core.datasets import DATASETS, Model
from nyc_taxi.core.jobs import PIPELINES
from nyc_taxi.core.naming import datahub_job_urn, identity
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.lineage.read.graph import EdgeKind, LineageGraph
from nyc_taxi.lineage.read.lite import dataset_node, job_node
from nyc_taxi.lineage.read.runs import JobRun, Runs


def _moment(when: str, runs: Runs | None = None, settings: Settings | None = None) -> str:
    """An ISO time in UTC from what a user gives: a time (taken as UTC without an offset) or a run."""
    try:
        moment = dt.datetime.fromisoformat(when)
        return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).isoformat()
    except ValueError:
        run = (runs or Runs.read(settings)).find(when)
        return run.ended or run.started


def _job_urn(job: str, settings: Settings) -> str | None:
    pipeline, _, name = job.partition(".")
    return datahub_job_urn(PIPELINES[pipeline], name, settings) if pipeline in PIPELINES and name else None


def graph_of(runs: list[JobRun], all_runs: Runs, settings: Settings) -> LineageGraph:
    """The graph the given runs recorded (the last run of each job counts)."""
    urns = {identity(d, settings).datahub_urn: d for d in DATASETS.values()}
    by_name = {d.name: urn for urn, d in urns.items()}
    graph, last = LineageGraph(), {}
    for run in runs:
        if not run.is_pipeline_run:
            last[run.job] = run
    for job, run in last.items():
        job_urn = _job_urn(job, settings)
        if job_urn is None:
            continue
        graph.nodes.setdefault(job_urn, job_node(job_urn))
        for side, names in (("in", run.inputs), ("out", run.outputs)):
            for name in names:
                if name not in by_name:
                    continue
                node = graph.nodes.setdefault(by_name[name], dataset_node(by_name[name], settings))
                model = isinstance(urns[by_name[name]], Model)
                if side == "in":
                    graph.add(node.urn, job_urn, EdgeKind.USED if model else EdgeKind.READ)
                else:
                    graph.add(job_urn, node.urn, EdgeKind.TRAINED if model else EdgeKind.WRITE)
        for upstream in run.upstream_jobs:
            if (upstream_urn := _job_urn(upstream, settings)) and upstream in last:
                graph.nodes.setdefault(upstream_urn, job_node(upstream_urn))
                graph.add(upstream_urn, job_urn, EdgeKind.THEN)
        # a job that no earlier job of its flow precedes, in a flow run started by another tool's task
        flow_run = all_runs.by_id.get(run.parent[1]) if run.parent else None
        starter = all_runs.by_id.get(flow_run.parent[1]) if flow_run and flow_run.parent else None
        starter_urn = _job_urn(starter.job, settings) if starter and not starter.is_pipeline_run else None
        if starter_urn and not run.upstream_jobs:
            graph.nodes.setdefault(starter_urn, job_node(starter_urn))
            graph.add(starter_urn, job_urn, EdgeKind.STARTS)
    return graph


def graph_as_of(when: str, settings: Settings | None = None) -> LineageGraph:
    settings = settings or get_settings()
    runs = Runs.read(settings)
    moment = _moment(when, runs)
    return graph_of([r for r in runs if (r.started or "") <= moment], runs, settings)


# ---- two runs, side by side ----------------------------------------------------------------------


@dataclass
class RunDiff:
    a: JobRun
    b: JobRun
    reads: tuple[list[str], list[str]] = ([], [])  # added, removed
    writes: tuple[list[str], list[str]] = ([], [])
    upstream: tuple[list[str], list[str]] = ([], [])  # DAGs and flows reached upstream
    parameters: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    job_versions: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    code: tuple[str | None, str | None] | None = None

    def as_dict(self) -> dict:
        pair = lambda change: {"added": change[0], "removed": change[1]}  # noqa: E731
        return {
            "a": {"job": self.a.job, "run_id": self.a.run_id, "label": self.a.label},
            "b": {"job": self.b.job, "run_id": self.b.run_id, "label": self.b.label},
            "reads": pair(self.reads),
            "writes": pair(self.writes),
            "upstream": pair(self.upstream),
            "parameters": self.parameters,
            "job_versions": self.job_versions,
            "code": self.code,
        }


def _side(run: JobRun, runs: Runs) -> tuple[set[str], set[str], dict[str, str | None], str | None]:
    """What a run read from outside itself, what it wrote, its jobs' versions and its code version."""
    members = runs.children(run) if run.is_pipeline_run else [run]
    written = {(n, v) for m in members for n, v in m.outputs.items()}
    reads = {n for m in members for n, v in m.inputs.items() if (n, v) not in written}
    writes = {n for m in members for n in m.outputs}
    versions = {m.job: m.job_version for m in members}
    code = next((m.code_version for m in members if m.code_version), run.code_version)
    return reads, writes, versions, code


def _upstream_pipelines(run: JobRun, reads: set[str], runs: Runs, settings: Settings) -> set[str]:
    """The DAGs and flows the datasets a run read come from, as the lineage stood when it ran."""
    graph = graph_of([r for r in runs if (r.started or "") <= (run.ended or run.started or "")], runs, settings)
    by_name = {n.name: u for u, n in graph.nodes.items()}
    reached = set()
    for name in reads:
        if name in by_name:
            for edge in graph.reachable(by_name[name], "upstream"):
                for urn in (edge.source, edge.target):
                    if graph.nodes[urn].kind == "job":
                        reached.add(graph.nodes[urn].pipeline)
    return reached - {run.pipeline}


def diff(first: str, second: str, settings: Settings | None = None) -> RunDiff:
    settings = settings or get_settings()
    runs = Runs.read(settings)
    a, b = runs.find(first), runs.find(second)
    if a.job != b.job:
        raise ValueError(f"{first} is a run of {a.job}, {second} of {b.job}: compare two runs of one job, DAG or flow")
    reads_a, writes_a, versions_a, code_a = _side(a, runs)
    reads_b, writes_b, versions_b, code_b = _side(b, runs)
    up_a, up_b = _upstream_pipelines(a, reads_a, runs, settings), _upstream_pipelines(b, reads_b, runs, settings)
    keys = sorted((set(a.parameters) | set(b.parameters)) - {"try_number", "nominal_time"})
    return RunDiff(
        a,
        b,
        reads=(sorted(reads_b - reads_a), sorted(reads_a - reads_b)),
        writes=(sorted(writes_b - writes_a), sorted(writes_a - writes_b)),
        upstream=(sorted(up_b - up_a), sorted(up_a - up_b)),
        parameters={
            k: (a.parameters.get(k), b.parameters.get(k)) for k in keys if a.parameters.get(k) != b.parameters.get(k)
        },
        job_versions={
            j: (versions_a.get(j), versions_b.get(j))
            for j in sorted(set(versions_a) | set(versions_b))
            if versions_a.get(j) != versions_b.get(j)
        },
        code=(code_a, code_b) if code_a != code_b else None,
    )


def render_diff(change: RunDiff) -> str:
    def label(run: JobRun) -> str:
        model = run.parameters.get("model")
        return f"{run.job}/{run.label.split('/')[-1] if '/' in run.label else run.label}" + (
            f" ({model})" if model else ""
        )

    def changes(added: list[str], removed: list[str]) -> str:
        return ", ".join([f"+ {n}" for n in added] + [f"- {n}" for n in removed]) or "(the same)"

    lines = [
        f"{label(change.a)} → {label(change.b)}",
        f"  reads:      {changes(*change.reads)}",
        f"  upstream:   {changes(*change.upstream)}",
        f"  writes:     {changes(*change.writes)}",
    ]
    for key, (before, after) in change.parameters.items():
        lines.append(f"  parameter {key}: {before} → {after}")
    for job, (before, after) in change.job_versions.items():
        lines.append(f"  job version of {job}: {before} → {after}")
    lines.append(f"  code: {change.code[0]} → {change.code[1]}" if change.code else "  code: the same commit")
    return "\n".join(lines)
