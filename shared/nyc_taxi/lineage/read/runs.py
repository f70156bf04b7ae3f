"""Runs, from the OpenLineage events both tools recorded: the per-run record.

Each event carries the run id, its state, its parent and root runs, the dataset versions it read and
wrote (Iceberg snapshot ids, file versions, model versions) and which files, the code version
(source-code-location facet), the job version (Metaflow's tag) and the parameters (Airflow's dag-run
conf and nominal time; Metaflow's ``param.*`` run tags). ``Runs`` holds them all; ``job_runs`` is one
job's history, a failed run compared with the last good run before it: what changed.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nyc_taxi.core.datasets import DATASETS
from nyc_taxi.core.naming import identity
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.lineage.write.destinations import openlineage_events_dir
from nyc_taxi.lineage.write.outbox import read_openlineage_file

FINAL = {"COMPLETE": "success", "FAIL": "failure", "ABORT": "aborted"}


@dataclass
class JobRun:
    job: str  # <dag>.<task>, <Flow>.<step>, or a DAG / flow
    run_id: str  # OpenLineage's
    label: str = ""  # what the tool calls the run: Airflow's run id, Metaflow's pathspec
    resumed_from: str | None = None  # a Metaflow resume's: the id of the run it resumed
    state: str = "running"
    started: str | None = None
    ended: str | None = None
    code_version: str | None = None
    job_version: str | None = None
    parameters: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, str | None] = field(default_factory=dict)  # dataset -> version (None: several, see read)
    # every (dataset, version) read: a DAG or flow run's tasks or steps may read several versions of one
    read: list[tuple[str, str | None]] = field(default_factory=list)
    outputs: dict[str, str | None] = field(default_factory=dict)
    locations: dict[str, list[str]] = field(default_factory=dict)  # dataset -> the files this run read or wrote
    # dataset -> (column, start, end): the rows of a table this run read, and wrote (start <= column < end)
    input_ranges: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    output_ranges: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)  # output dataset -> rows written
    quality: dict[str, dict] = field(default_factory=dict)  # dataset -> data-quality metrics and assertions reported
    parent: tuple[str, str] | None = None  # (job, run id)
    root: tuple[str, str] | None = None
    upstream_jobs: list[str] = field(default_factory=list)  # jobs that ran right before, in the same DAG or flow
    error: str | None = None
    changed_since_last_good: dict[str, list] | None = None

    @property
    def seconds(self) -> float | None:
        if not (self.started and self.ended):
            return None
        return (dt.datetime.fromisoformat(self.ended) - dt.datetime.fromisoformat(self.started)).total_seconds()

    @property
    def pipeline(self) -> str:
        return self.job.split(".", 1)[0]

    @property
    def is_pipeline_run(self) -> bool:
        return "." not in self.job


def event_files(settings: Settings) -> list[Path]:
    return sorted(openlineage_events_dir(settings).glob("*.jsonl"))


def read_events(settings: Settings | None = None) -> list[dict]:
    settings = settings or get_settings()
    events = []
    for path in event_files(settings):
        events += read_openlineage_file(path)
    return sorted(events, key=lambda e: e["eventTime"])


def _names(settings: Settings) -> dict[tuple[str, str], str]:
    return {(i.ol_namespace, i.ol_name): d.name for d in DATASETS.values() for i in [identity(d, settings)]}


def _dataset_name(dataset: dict, names: dict[tuple[str, str], str]) -> str:
    return names.get((dataset["namespace"], dataset["name"]), f"{dataset['namespace']}/{dataset['name']}")


def _apply(run: JobRun, event: dict, names: dict[tuple[str, str], str]) -> None:
    kind, facets, job_facets = event["eventType"], event["run"].get("facets", {}), event["job"].get("facets", {})
    run.started = run.started or event["eventTime"]  # events are read in time order: the first is the start
    if kind in FINAL:
        run.state, run.ended = FINAL[kind], event["eventTime"]
    if "sourceCodeLocation" in job_facets:
        run.code_version = job_facets["sourceCodeLocation"].get("version")
    for tag in job_facets.get("tags", {}).get("tags", []):
        if tag["key"] == "version":
            run.job_version = tag["value"]
    if parent := facets.get("parent"):
        run.parent = (parent["job"]["name"], parent["run"]["runId"])
        root = parent.get("root") or {}
        run.root = (root["job"]["name"], root["run"]["runId"]) if root else run.parent
    airflow = facets.get("airflow", {})
    if airflow.get("dagRun"):
        run.label = airflow["dagRun"].get("run_id", run.label)
        run.parameters.update(
            {
                k: json.dumps(v) if not isinstance(v, str) else v
                for k, v in (airflow["dagRun"].get("conf") or {}).items()
            }
        )
        if airflow.get("taskInstance", {}).get("try_number"):
            run.parameters["try_number"] = str(airflow["taskInstance"]["try_number"])
    if airflow.get("task", {}).get("upstream_task_ids"):
        upstream = airflow["task"]["upstream_task_ids"]
        run.upstream_jobs = [
            f"{run.pipeline}.{t}" for t in (ast.literal_eval(upstream) if isinstance(upstream, str) else upstream)
        ]
    if jobs := facets.get("jobDependencies", {}).get("upstream"):
        run.upstream_jobs = [j["job"]["name"] for j in jobs]
    for tag in facets.get("tags", {}).get("tags", []):
        if tag["key"].startswith("param."):
            run.parameters[tag["key"][len("param.") :]] = tag["value"]
        elif tag["key"] in ("metaflow.pathspec", "metaflow.run"):
            run.label = tag["value"]
        elif tag["key"] == "metaflow.origin_run_id":
            run.resumed_from = tag["value"]
    if "nominalTime" in facets:
        run.parameters["nominal_time"] = facets["nominalTime"]["nominalStartTime"]
    if "errorMessage" in facets:
        run.error = facets["errorMessage"]["message"]
    for side, target in (("inputs", run.inputs), ("outputs", run.outputs)):
        for dataset in event.get(side, []):
            version = dataset.get("facets", {}).get("version", {}).get("datasetVersion")
            name = _dataset_name(dataset, names)
            if version or name not in target:
                target[name] = version
            extra = dataset.get("inputFacets" if side == "inputs" else "outputFacets", {})
            condition = extra.get("subset", {}).get("inputCondition" if side == "inputs" else "outputCondition", {})
            if condition.get("locations"):
                run.locations[name] = condition["locations"]
            elif (bounds := _range(condition)) is not None:
                (run.input_ranges if side == "inputs" else run.output_ranges)[name] = bounds
            if side == "outputs" and (count := extra.get("outputStatistics", {}).get("rowCount")) is not None:
                run.rows[name] = count
            _keep_quality(run, name, extra)


def _range(condition: dict) -> tuple[str, str, str] | None:
    """``start <= column < end`` from a subset facet's condition (two comparisons joined by AND)."""
    if condition.get("type") != "binary" or condition.get("operator") != "AND":
        return None
    found = {}
    for side in (condition.get("left", {}), condition.get("right", {})):
        if side.get("type") == "compare" and side.get("left", {}).get("type") == "field":
            found[side.get("comparison")] = (side["left"]["field"], side.get("right", {}).get("value"))
    low, high = found.get("GREATER_EQUAL_THAN"), found.get("LESS_THAN")
    if not (low and high and low[0] == high[0]):
        return None
    return low[0], low[1], high[1]


def _keep_quality(run: JobRun, name: str, extra: dict) -> None:
    """The data-quality facets a run reported on a dataset: metrics (row count, per-column counts) and
    assertions (each check, its column and whether it passed), without the facets' own bookkeeping."""
    if metrics := extra.get("dataQualityMetrics"):
        run.quality.setdefault(name, {})["metrics"] = {k: v for k, v in metrics.items() if not k.startswith("_")}
    if assertions := extra.get("dataQualityAssertions", {}).get("assertions"):
        run.quality.setdefault(name, {})["assertions"] = assertions


@dataclass
class Runs:
    """Every recorded run, by OpenLineage run id, in the order they started."""

    by_id: dict[str, JobRun]

    @classmethod
    def read(cls, settings: Settings | None = None, until: str | None = None) -> Runs:
        """The runs as the events recorded them (only the events up to ``until``, an ISO time, if given)."""
        settings = settings or get_settings()
        names, runs = _names(settings), {}
        for event in read_events(settings):
            if until and event["eventTime"] > until:
                break
            run_id = event["run"]["runId"]
            _apply(runs.setdefault(run_id, JobRun(job=event["job"]["name"], run_id=run_id)), event, names)
        return cls(dict(sorted(runs.items(), key=lambda item: item[1].started or "")))

    def __iter__(self):
        return iter(self.by_id.values())

    def of_job(self, job: str) -> list[JobRun]:
        return [r for r in self if r.job == job]

    def children(self, run: JobRun) -> list[JobRun]:
        return [r for r in self if r.parent == (run.job, run.run_id)]

    def steps(self, flow_run: JobRun) -> list[JobRun]:
        """A flow run's steps as its results come from them: those it ran, and each one it did not run that the
        run it resumed finished (Metaflow's resume clones a successful step without running it, so nothing of
        the clone is recorded: the earlier run's step read and wrote what the clone holds), through a resume of
        a resume. A step the earlier run failed was not cloned: its record stands for nothing here."""
        found, taken, seen, run = [], set(), set(), flow_run
        while run is not None and run.run_id not in seen:
            seen.add(run.run_id)
            for step in self.children(run):
                # a later run's record of a step stands for it whatever its end (failed, or still running with
                # its end lost): not cloned, or not known to be, so no older run's is taken
                if step.job not in taken:
                    taken.add(step.job)
                    found += [step] if run is flow_run or step.state == "success" else []
            run = self.resumed(run)
        return found

    def resumed(self, flow_run: JobRun) -> JobRun | None:
        """The flow run a Metaflow resume resumed (None: not a resume, or that run is not recorded)."""
        if flow_run.resumed_from is None:
            return None
        label = f"{flow_run.job}/{flow_run.resumed_from}"
        return next((run for run in self.of_job(flow_run.job) if run.label == label), None)

    def descendants(self, run: JobRun) -> list[JobRun]:
        """The runs under a DAG or flow run: its tasks or steps, and what they started (a training task's
        flow run and its steps), in the order they started."""
        found, todo = [], self.children(run)
        while todo:
            child = todo.pop(0)
            if child not in found:
                found.append(child)
                todo += self.children(child)
        return sorted(found, key=lambda r: r.started or "")

    def read_and_written(self, run: JobRun) -> tuple[list[tuple[str, str | None]], dict[str, str | None]]:
        """What a run read (each dataset and version once) and wrote, with versions; for a DAG or flow run,
        what the runs under it read from outside it, and what they wrote (the last version of each)."""
        if not run.is_pipeline_run:
            return sorted(run.inputs.items()), run.outputs
        under = [r for r in self.descendants(run) if not r.is_pipeline_run]
        written = {(n, v) for r in under for n, v in r.outputs.items()}
        read = {(n, v) for r in under for n, v in r.inputs.items() if (n, v) not in written}
        return sorted(read, key=lambda pair: (pair[0], pair[1] or "")), {
            n: v for r in under for n, v in r.outputs.items()
        }

    def find(self, text: str) -> JobRun:
        """A run by what a user has: an OpenLineage run id, ``<Flow>/<run id>`` (Metaflow) or
        ``<dag_id>/<run_id>`` (Airflow), or a pathspec of a step run."""
        if text in self.by_id:
            return self.by_id[text]
        pipeline, _, label = text.partition("/")
        for run in self:
            if run.job == pipeline and run.label in (text, label):
                return run
            if "." in run.job and run.label == text:  # a Metaflow step's pathspec
                return run
        known = sorted(
            {f"{r.job}/{r.label.split('/')[-1] if '/' in r.label else r.label}" for r in self if r.is_pipeline_run}
        )
        raise KeyError(f"no run {text!r} in the OpenLineage events; runs of DAGs and flows: {', '.join(known[-8:])}")

    def committer(self, dataset: str, version: str) -> JobRun | None:
        """The run that wrote ``version`` of ``dataset``: the first to report it as an output (later runs
        that changed nothing report the same version)."""
        return next((r for r in self if r.state == "success" and r.outputs.get(dataset) == version), None)


def _changes(good: JobRun, run: JobRun) -> dict[str, list]:
    changed: dict[str, list] = {}
    if good.code_version != run.code_version:
        changed["code_version"] = [good.code_version, run.code_version]
    for key in sorted(set(good.parameters) | set(run.parameters)):
        if key != "try_number" and good.parameters.get(key) != run.parameters.get(key):
            changed[f"parameter {key}"] = [good.parameters.get(key), run.parameters.get(key)]
    before, after = _by_dataset(good.read), _by_dataset(run.read)
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            changed[f"input {name}"] = [_one_or_all(versions.get(name, "not read")) for versions in (before, after)]
    return changed


def _by_dataset(read: list[tuple[str, str | None]]) -> dict[str, list]:
    """Each dataset's versions read, as read_and_written sorts them: by their text, not by time."""
    versions: dict[str, list] = {}
    for name, version in read:
        versions.setdefault(name, []).append(version)
    return versions


def _one_or_all(versions: list | str):
    return versions[0] if isinstance(versions, list) and len(versions) == 1 else versions


def job_runs(job: str, settings: Settings | None = None) -> list[JobRun]:
    """Every recorded run of ``job`` ("dag.task", "Flow.step", or a DAG / flow), oldest first."""
    runs = Runs.read(settings)
    jobs = {r.job for r in runs}
    match = next((j for j in jobs if j.lower() == job.lower()), None)
    if match is None:
        close = sorted(j for j in jobs if job.lower() in j.lower())
        raise KeyError(
            f"no runs of {job!r} in the OpenLineage events"
            + (f"; did you mean: {', '.join(close)}" if close else f"; jobs with runs: {', '.join(sorted(jobs))}")
        )
    ordered = runs.of_job(match)
    for run in ordered:  # a DAG or flow run: what the runs under it read and wrote
        read, outputs = runs.read_and_written(run)
        if run.is_pipeline_run:
            run.outputs = outputs
            # a read without a version (a try that failed before it pinned one) is no other version
            known = {name for name, version in read if version is not None}
            read = [(name, version) for name, version in read if version is not None or name not in known]
            run.inputs = {name: v[0] if len(v) == 1 else None for name, v in _by_dataset(read).items()}
        run.read = read  # what `--runs` and the site show
    last_good = None
    for run in ordered:
        if run.state == "success":
            last_good = run
        elif run.state == "failure" and last_good is not None:
            run.changed_since_last_good = _changes(last_good, run)
    return ordered


def as_json(runs: list[JobRun]) -> list[dict]:
    return [asdict(r) | {"seconds": r.seconds} for r in runs]


def render(runs: list[JobRun]) -> str:
    def versions(pairs) -> str:
        return ", ".join(f"{n}@{v or '?'}" for n, v in sorted(pairs, key=lambda p: (p[0], p[1] or ""))) or "-"

    lines = [f"runs of {runs[0].job} (oldest first; from the OpenLineage events)"] if runs else []
    for run in runs:
        took = f" {run.seconds:.1f} s" if run.seconds is not None else ""
        params = " ".join(f"{k}={v}" for k, v in sorted(run.parameters.items()))
        lines.append(f"  {run.started or '?'}  {run.state.upper():8s}{took}  {run.label or run.run_id}")
        lines.append(f"      code {(run.code_version or '?')[:12]}  parameters {params or '-'}")
        lines.append(f"      read  {versions(run.read)}")
        lines.append(f"      wrote {versions(run.outputs.items())}")
        if run.error:
            lines.append(f"      error: {run.error.splitlines()[0][:300]}")
        if run.changed_since_last_good is not None:
            if run.changed_since_last_good:
                for what, (before, after) in run.changed_since_last_good.items():
                    lines.append(f"      changed since the last good run: {what}: {before} → {after}")
            else:
                lines.append("      nothing changed since the last good run (code, parameters and inputs are the same)")
    return "\n".join(lines)
