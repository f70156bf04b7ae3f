"""Run history of one job from the OpenLineage events both tools recorded.

OpenLineage is the per-run record: each event carries the run id, its state, the dataset versions
(Iceberg snapshot ids) it read and wrote, the code version (source-code-location facet) and the
parameters (Airflow's dag-run conf and nominal time; Metaflow's ``param.*`` run tags). A failed
run is compared with the last good run before it: what changed.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nyc_taxi import registry
from nyc_taxi.lineage.destinations import openlineage_events_dir
from nyc_taxi.settings import Settings, get_settings

FINAL = {"COMPLETE": "success", "FAIL": "failure", "ABORT": "aborted"}


@dataclass
class JobRun:
    job: str
    run_id: str
    label: str = ""
    state: str = "running"
    started: str | None = None
    ended: str | None = None
    code_version: str | None = None
    parameters: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, str | None] = field(default_factory=dict)
    outputs: dict[str, str | None] = field(default_factory=dict)
    error: str | None = None
    changed_since_last_good: dict[str, list] | None = None

    @property
    def seconds(self) -> float | None:
        if not (self.started and self.ended):
            return None
        return (dt.datetime.fromisoformat(self.ended) - dt.datetime.fromisoformat(self.started)).total_seconds()


def event_files(settings: Settings) -> list[Path]:
    return sorted(openlineage_events_dir(settings).glob("*.jsonl"))


def read_events(settings: Settings | None = None) -> list[dict]:
    settings = settings or get_settings()
    events = []
    for path in event_files(settings):
        events += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(events, key=lambda e: e["eventTime"])


def _dataset_name(dataset: dict, names: dict[tuple[str, str], str]) -> str:
    return names.get((dataset["namespace"], dataset["name"]), f"{dataset['namespace']}/{dataset['name']}")


def _apply(run: JobRun, event: dict, names: dict[tuple[str, str], str]) -> None:
    kind, facets, job_facets = event["eventType"], event["run"].get("facets", {}), event["job"].get("facets", {})
    run.started = run.started or event["eventTime"]  # events are read in time order: the first is the start
    if kind in FINAL:
        run.state, run.ended = FINAL[kind], event["eventTime"]
    if "sourceCodeLocation" in job_facets:
        run.code_version = job_facets["sourceCodeLocation"].get("version")
    airflow = facets.get("airflow", {})
    if airflow.get("dagRun"):
        run.label = airflow["dagRun"].get("run_id", run.label)
        run.parameters.update({k: json.dumps(v) if not isinstance(v, str) else v
                               for k, v in (airflow["dagRun"].get("conf") or {}).items()})
        if airflow.get("taskInstance", {}).get("try_number"):
            run.parameters["try_number"] = str(airflow["taskInstance"]["try_number"])
    for tag in facets.get("tags", {}).get("tags", []):
        if tag["key"].startswith("param."):
            run.parameters[tag["key"][len("param."):]] = tag["value"]
        elif tag["key"] == "metaflow.pathspec":
            run.label = tag["value"]
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


def _changes(good: JobRun, run: JobRun) -> dict[str, list]:
    changed: dict[str, list] = {}
    if good.code_version != run.code_version:
        changed["code_version"] = [good.code_version, run.code_version]
    for key in sorted(set(good.parameters) | set(run.parameters)):
        if key != "try_number" and good.parameters.get(key) != run.parameters.get(key):
            changed[f"parameter {key}"] = [good.parameters.get(key), run.parameters.get(key)]
    for name in sorted(set(good.inputs) | set(run.inputs)):
        if good.inputs.get(name) != run.inputs.get(name):
            changed[f"input {name}"] = [good.inputs.get(name), run.inputs.get(name)]
    return changed


def job_runs(job: str, settings: Settings | None = None) -> list[JobRun]:
    """Every recorded run of ``job`` ("dag.task", "Flow.step", or a DAG / flow), oldest first."""
    settings = settings or get_settings()
    events = read_events(settings)
    jobs = {e["job"]["name"] for e in events}
    match = next((j for j in jobs if j.lower() == job.lower()), None)
    if match is None:
        close = sorted(j for j in jobs if job.lower() in j.lower())
        raise KeyError(f"no runs of {job!r} in the OpenLineage events"
                       + (f"; did you mean: {', '.join(close)}" if close else f"; jobs with runs: {', '.join(sorted(jobs))}"))
    names = {(i.ol_namespace, i.ol_name): d.name for d in registry.DATASETS.values() for i in [d.identity(settings)]}
    runs: dict[str, JobRun] = {}
    for event in events:
        if event["job"]["name"] == match:
            run_id = event["run"]["runId"]
            _apply(runs.setdefault(run_id, JobRun(job=match, run_id=run_id)), event, names)
    ordered = sorted(runs.values(), key=lambda r: r.started or "")
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
    def versions(uses: dict) -> str:
        return ", ".join(f"{n}@{v or '?'}" for n, v in sorted(uses.items())) or "-"

    lines = [f"runs of {runs[0].job} (oldest first; from the OpenLineage events)"] if runs else []
    for run in runs:
        took = f" {run.seconds:.1f} s" if run.seconds is not None else ""
        params = " ".join(f"{k}={v}" for k, v in sorted(run.parameters.items()))
        lines.append(f"  {run.started or '?'}  {run.state.upper():8s}{took}  {run.label or run.run_id}")
        lines.append(f"      code {(run.code_version or '?')[:12]}  parameters {params or '-'}")
        lines.append(f"      read  {versions(run.inputs)}")
        lines.append(f"      wrote {versions(run.outputs)}")
        if run.error:
            lines.append(f"      error: {run.error.splitlines()[0][:300]}")
        if run.changed_since_last_good is not None:
            if run.changed_since_last_good:
                for what, (before, after) in run.changed_since_last_good.items():
                    lines.append(f"      changed since the last good run: {what}: {before} → {after}")
            else:
                lines.append("      nothing changed since the last good run (code, parameters and inputs are the same)")
    return "\n".join(lines)
