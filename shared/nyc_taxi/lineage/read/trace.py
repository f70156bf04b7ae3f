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
from nyc_taxi.lineage.read.quality import Evaluation, Quality, verdict
from nyc_taxi.lineage.read.runs import JobRun, Runs


@dataclass
class VersionStep:
    dataset: str
    version: str | None
    locations: list[str] = field(default_factory=list)
    commits: int = 1  # how many writers' commits the version holds
    writers: list[RunStep] = field(default_factory=list)
    repeated: bool = False  # traced above already
    checks: list[Evaluation] = field(default_factory=list)  # its checks' results on this version
    checked: bool = False  # the dataset declares checks (so no result means it was not checked)

    def as_dict(self) -> dict:
        return {
            "dataset": self.dataset,
            "version": self.version,
            "locations": self.locations,
            "commits": self.commits,
            "repeated": self.repeated,
            "checks": [
                {"check": e.check, "severity": e.severity, "status": e.status, "failing": e.failing, "rows": e.rows}
                for e in self.checks
            ],
            "declares_checks": self.checked,
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
    def __init__(self, settings: Settings | None = None, runs: Runs | None = None, quality: Quality | None = None):
        self.settings = settings or get_settings()
        self.runs = runs or Runs.read(self.settings)
        self._quality = quality
        self._seen: set[tuple[str, str | None]] = set()
        self._history: dict[str, dict[int, int | None]] = {}

    @property
    def quality(self) -> Quality:
        """Every version's check results, from DataHub Lite (read once, when a version is first traced)."""
        if self._quality is None:
            from nyc_taxi.lineage.read.quality import read

            self._quality = read(self.settings)
        return self._quality

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
        dataset = DATASETS.get(name)
        step = VersionStep(name, version, checked=bool(getattr(dataset, "checks", ())))
        held = [version]
        if isinstance(dataset, Table) and not dataset.replaced_on_every_load and version and version.isdigit():
            held = self._ancestors(dataset, version)
        step.checks = self._checks_held(name, held) if step.checked else []
        if (name, version) in self._seen:
            step.repeated = True
            return step
        self._seen.add((name, version))
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

    def _checks_held(self, name: str, held: list[str | None]) -> list[Evaluation]:
        """The checks of every commit a version holds (``held``, oldest first): a raw table's check judges the
        batch its commit wrote (its month), and that month stays in every later snapshot until a later
        commit of the same batch is judged again. So per check and batch, the latest result in the chain:
        a check that failed on an earlier snapshot fails the versions that still hold what it judged."""
        from nyc_taxi.core.quality import batch_of

        latest: dict[tuple[str, str], Evaluation] = {}
        for held_version in held:
            for evaluation in self.quality.of_version(name, held_version):
                # the batch, not the whole rule: a republished month's count differs, its files do not
                latest[(evaluation.check, batch_of(evaluation.rule))] = evaluation
        return list(latest.values())

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
            read, written = self.runs.read_and_written(run)
            step.reads = [self.version(name, version) for name, version in read]
            # what the DAG or flow run wrote is what its jobs wrote (a copy: the runs stay as recorded)
            step.run = replace(run, outputs=written)
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


def versions_in(step: VersionStep | RunStep) -> list[VersionStep]:
    """Every version in a trace, each once (the first time it appears)."""
    found: dict[tuple[str, str | None], VersionStep] = {}

    def walk(node) -> None:
        if isinstance(node, VersionStep):
            found.setdefault((node.dataset, node.version), node)
            for writer in node.writers:
                walk(writer)
        else:
            for read in node.reads:
                walk(read)

    walk(step)
    return list(found.values())


@dataclass
class Verdict:
    """Was it computed only from data that passed its checks? Every version in its ancestry, by what its
    checks said of it."""

    failed: list[VersionStep]  # an error check failed on it
    checked: list[VersionStep]  # every error check passed (warnings allowed)
    unchecked: list[VersionStep]  # its dataset declares checks, but none were recorded on this version
    without_checks: list[VersionStep]  # its dataset declares none (the published and landed files)
    warnings: int

    @property
    def passed(self) -> bool:
        return not self.failed and not self.unchecked

    def as_dict(self) -> dict:
        def names(steps):
            return [f"{s.dataset}@{s.version}" for s in steps]

        return {
            "passed": self.passed,
            "failed": names(self.failed),
            "checked": names(self.checked),
            "unchecked": names(self.unchecked),
            "without_checks": names(self.without_checks),
            "warnings": self.warnings,
        }

    def text(self) -> str:
        if self.failed:
            first = self.failed[0]
            failed = ", ".join(e.check for e in first.checks if e.status == "fail")
            head = f"✗ computed from data that failed its checks: {first.dataset} @ {first.version} ({failed})"
        elif self.unchecked:
            head = (
                f"? {len(self.checked)} versions passed their checks, but {len(self.unchecked)} have no recorded "
                f"results: {', '.join(f'{s.dataset} @ {s.version}' for s in self.unchecked[:3])}"
            )
        else:
            head = f"✓ computed only from data that passed its checks: {len(self.checked)} versions checked"
        tail = f"; {self.warnings} warnings (kept as published)" if self.warnings else ""
        others = len(self.without_checks)
        return head + tail + (f"; {others} versions of files that declare no checks" if others else "")


def verdict_of(step: VersionStep | RunStep) -> Verdict:
    failed, checked, unchecked, without, warnings = [], [], [], [], 0
    for version in versions_in(step):
        if not version.checked:
            without.append(version)
        elif not version.checks:
            unchecked.append(version)
        elif any(e.status == "fail" for e in version.checks):
            failed.append(version)
        else:
            checked.append(version)
        warnings += sum(e.status == "warn" for e in version.checks)
    return Verdict(failed, checked, unchecked, without, warnings)


def render(step: VersionStep | RunStep) -> str:
    lines: list[str] = []
    if isinstance(step, VersionStep):
        lines.append(_version_line(step))
        _version_children(step, "", lines)
    else:
        lines.append(_describe_run(step.run))
        _run_children(step, "", lines)
    lines.append(f"checks: {verdict_of(step).text()}")
    return "\n".join(lines)


def _version_line(step: VersionStep) -> str:
    text = f"{step.dataset} @ {step.version or '?'}"
    if step.commits > 1:
        text += f" (holds the commits of {step.commits} runs)"
    if step.locations:
        text += f" — {', '.join(step.locations)}"
    if step.checked and not step.repeated:
        text += f" [checks: {verdict(step.checks)}]"
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
