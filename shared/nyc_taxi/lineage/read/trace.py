"""`bash run lineage --trace TARGET`: the exact versions and runs behind a version, across both tools.

A version of a dataset was written by a run; that run read versions of other datasets, written by
other runs, back to the published files. The runs and the versions they read and wrote come from the
OpenLineage events; which commits a table version holds comes from Iceberg's own snapshot history: a
staging table holds one load (its snapshot's writer), every other table accumulates, so a snapshot
holds the commits of every ancestor snapshot (each merge run of every month loaded so far).

TARGET: a dataset (its current version), ``dataset@version``, a flow run ``<Flow>/<run id>``, a DAG
run ``<dag_id>/<run_id>``, or any run by its OpenLineage run id or Metaflow pathspec.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from nyc_taxi.core.datasets import DATASETS, Table
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.lineage.read.runs import JobRun, Runs


@dataclass
class VersionStep:
    dataset: str
    version: str | None
    locations: list[str] = field(default_factory=list)
    commits: int = 1  # how many writers' commits the version holds
    writers: list[RunStep] = field(default_factory=list)
    repeated: bool = False  # traced above already

    def as_dict(self) -> dict:
        return {
            "dataset": self.dataset,
            "version": self.version,
            "locations": self.locations,
            "commits": self.commits,
            "repeated": self.repeated,
            "written_by": [w.as_dict() for w in self.writers],
        }


@dataclass
class RunStep:
    run: JobRun
    started_by: list[JobRun] = field(default_factory=list)  # the flow run, the Airflow task and DAG run above it
    reads: list[VersionStep] = field(default_factory=list)

    def as_dict(self) -> dict:
        run = self.run
        return {
            "job": run.job,
            "run_id": run.run_id,
            "label": run.label,
            "state": run.state,
            "started": run.started,
            "ended": run.ended,
            "parameters": run.parameters,
            "code_version": run.code_version,
            "job_version": run.job_version,
            "outputs": run.outputs,
            "started_by": [{"job": r.job, "run_id": r.run_id, "label": r.label} for r in self.started_by],
            "read": [r.as_dict() for r in self.reads],
        }


class Tracer:
    def __init__(self, settings: Settings | None = None, runs: Runs | None = None):
        self.settings = settings or get_settings()
        self.runs = runs or Runs.read(self.settings)
        self._seen: set[tuple[str, str | None]] = set()
        self._history: dict[str, dict[int, int | None]] = {}

    # ---- Iceberg's history ---------------------------------------------------------------
    def _ancestors(self, table: Table, snapshot_id: str) -> list[str]:
        """The snapshot and its ancestors, oldest first (as far as the table still keeps them)."""
        from nyc_taxi.core.catalog import load_table

        if table.name not in self._history:
            try:
                self._history[table.name] = {
                    s.snapshot_id: s.parent_snapshot_id for s in load_table(table, self.settings).snapshots()
                }
            except Exception:  # the table is gone (another lakehouse): only what the events say
                self._history[table.name] = {}
        parents, chain, current = self._history[table.name], [], int(snapshot_id)
        while current is not None and current in parents and str(current) not in chain:
            chain.append(str(current))
            current = parents[current]
        return list(reversed(chain)) or [snapshot_id]

    def current_version(self, name: str) -> str | None:
        dataset = DATASETS.get(name)
        if isinstance(dataset, Table):
            from nyc_taxi.core.catalog import current_snapshot_id

            current = current_snapshot_id(dataset, self.settings)
            return str(current) if current is not None else None
        written = [r.outputs[name] for r in self.runs if r.state == "success" and r.outputs.get(name)]
        return written[-1] if written else None

    # ---- walking back ------------------------------------------------------------------------
    def version(self, name: str, version: str | None) -> VersionStep:
        step = VersionStep(name, version)
        if (name, version) in self._seen:
            step.repeated = True
            return step
        self._seen.add((name, version))
        dataset = DATASETS.get(name)
        held = [version]
        if isinstance(dataset, Table) and not dataset.replaced_on_every_load and version and version.isdigit():
            held = self._ancestors(dataset, version)
        writers = []
        for held_version in held:
            writer = self.runs.committer(name, held_version)
            if writer is not None and writer not in writers:
                writers.append(writer)
        step.commits = len(writers) or 1
        for writer in writers:
            step.writers.append(self.run(writer))
        readers = [r for r in self.runs if r.inputs.get(name) == version and r.locations.get(name)]
        step.locations = next((r.locations[name] for r in readers), [])
        return step

    def run(self, run: JobRun) -> RunStep:
        step = RunStep(run, started_by=self._started_by(run))
        for name, version in sorted(run.inputs.items()):
            step.reads.append(self.version(name, version))
        return step

    def _started_by(self, run: JobRun) -> list[JobRun]:
        """The runs above this one: its DAG or flow run, and whatever started that (an Airflow task)."""
        chain, current = [], run
        while current.parent and current.parent[1] in self.runs.by_id and len(chain) < 5:
            current = self.runs.by_id[current.parent[1]]
            chain.append(current)
        return chain

    def target(self, text: str) -> VersionStep | RunStep:
        name, _, version = text.partition("@")
        if name in DATASETS:
            return self.version(name, version or self.current_version(name))
        run = self.runs.find(text)
        if run.is_pipeline_run:  # a DAG or flow run: everything its jobs read from outside it
            step = RunStep(run, started_by=self._started_by(run))
            children = self.runs.children(run)
            written_inside = {(n, v) for c in children for n, v in c.outputs.items()}
            for child in children:
                for input_name, input_version in sorted(child.inputs.items()):
                    if (input_name, input_version) not in written_inside:
                        step.reads.append(self.version(input_name, input_version))
            # what the DAG or flow run wrote is what its jobs wrote (a copy: the runs stay as recorded)
            step.run = replace(run, outputs={n: v for c in children for n, v in c.outputs.items()})
            return step
        return self.run(run)


def trace(text: str, settings: Settings | None = None) -> VersionStep | RunStep:
    return Tracer(settings).target(text)


# ---- as text -------------------------------------------------------------------------------


def _describe_run(run: JobRun) -> str:
    (
        "Metaflow"
        if "metaflow" in (run.label or "") or (run.label.count("/") >= 1 and "__" not in run.label)
        else "Airflow"
    )
    extra = [f"{k} {v}" for k, v in sorted(run.parameters.items()) if k in ("month", "model", "as_of_datetime")]
    return (
        f"run {run.job} [{run.state}] {run.label or run.run_id}"
        + (f" ({', '.join(extra)})" if extra else "")
        + f", started {run.started or '?'}"
    )


def render(step: VersionStep | RunStep) -> str:
    lines: list[str] = []
    if isinstance(step, VersionStep):
        lines.append(_version_line(step))
        _version_children(step, "", lines)
    else:
        lines.append(_describe_run(step.run))
        _run_children(step, "", lines)
    return "\n".join(lines)


def _version_line(step: VersionStep) -> str:
    text = f"{step.dataset} @ {step.version or '?'}"
    if step.commits > 1:
        text += f" (holds the commits of {step.commits} runs)"
    if step.locations:
        text += f" — {', '.join(step.locations)}"
    if step.repeated:
        text += " (see above)"
    elif not step.writers:
        text += " — published: no run of ours wrote it" if "published" in step.dataset else " — no recorded writer"
    return text


def _version_children(step: VersionStep, prefix: str, lines: list[str]) -> None:
    for i, writer in enumerate(step.writers):
        last = i == len(step.writers) - 1
        lines.append(f"{prefix}{'└── ' if last else '├── '}written by {_describe_run(writer.run)}")
        _run_children(writer, prefix + ("    " if last else "│   "), lines)


def _run_children(step: RunStep, prefix: str, lines: list[str]) -> None:
    items: list[tuple[str, object]] = [("started", r) for r in step.started_by[:1]] + [("read", v) for v in step.reads]
    for i, (kind, item) in enumerate(items):
        last = i == len(items) - 1
        branch = f"{prefix}{'└── ' if last else '├── '}"
        if kind == "started":
            above = " ← ".join(f"{r.job} {r.label or r.run_id}" for r in step.started_by)
            lines.append(f"{branch}in {above}")
        else:
            lines.append(f"{branch}read {_version_line(item)}")
            _version_children(item, prefix + ("    " if last else "│   "), lines)
