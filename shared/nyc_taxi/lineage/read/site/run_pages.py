"""A job's page (its runs, failures and versions; ``templates/pages/job.html``) and a run's page (what it read
and wrote, its parent and children, and the trace of its versions across tools back to the source files;
``templates/pages/run.html``)."""

from __future__ import annotations

from nyc_taxi.core.jobs import Pipeline
from nyc_taxi.lineage.read.runs import JobRun
from nyc_taxi.lineage.read.site.collect import JobFacts
from nyc_taxi.lineage.read.site.markup import job_path, run_path
from nyc_taxi.lineage.read.site.parts import Page


class JobAndRunPages:
    """The job and run pages of ``Pages`` (its facts, graph and pictures)."""

    @staticmethod
    def _job_kind(job: JobFacts) -> str:
        if job.node is not None:
            return job.node.label
        if isinstance(job.declared, Pipeline):
            return "Airflow DAG" if job.declared.orchestrator == "airflow" else "Metaflow flow"
        return "DAG or flow" if job.is_pipeline else "job"

    def job_page(self, job: JobFacts) -> Page:
        kind = self._job_kind(job)
        declared = job.declared
        uses = (
            [(side, [d.name for d in getattr(declared, side)]) for side in ("reads", "writes")]
            if declared is not None and not isinstance(declared, Pipeline)
            else []
        )
        shown = {
            "name": job.name,
            "job_kind": kind,
            "badge_kind": job.node.tool if job.node else kind.split(" ")[0],
            "declared": declared,
            "node": job.node,
            "pipeline": None if job.is_pipeline else job.name.split(".", 1)[0],
            "pipeline_jobs": declared.jobs if isinstance(declared, Pipeline) else None,
            "declared_uses": uses,
            "card": next((r for r in reversed(job.runs) if r.run_id in self.data.cards), None),
            "around": self.around(job.name),
            "runs": list(reversed(job.runs)),
            "failures": [self._failure(job, run) for run in job.runs if run.state == "failure"],
            "versions": self._job_versions(job),
        }
        return Page(job_path(job.name), job.name, "job", "pages/job.html", shown)

    @staticmethod
    def _failure(job: JobFacts, run: JobRun) -> dict:
        """A failed run, the last good run before it (None: none) and what changed since."""
        good = next((r for r in reversed(job.runs[: job.runs.index(run)]) if r.state == "success"), None)
        changed = [(key, before, after) for key, (before, after) in (run.changed_since_last_good or {}).items()]
        return {"run": run, "good": good, "changed": changed}

    @staticmethod
    def _job_versions(job: JobFacts) -> list[dict]:
        versions: dict[str, list[JobRun]] = {}
        for run in job.runs:
            if run.job_version:
                versions.setdefault(run.job_version, []).append(run)
        return [
            {"version": version, "runs": runs, "read": sorted({n for r in runs for n in r.inputs})}
            for version, runs in versions.items()
        ]

    def run_page(self, run: JobRun) -> Page:
        runs = self.data.runs
        related = [
            (term, runs.by_id[ref[1]], ref[0])
            for term, ref in (("part of", run.parent), ("root", run.root if run.root != run.parent else None))
            if ref and ref[1] in runs.by_id
        ]
        flow_run = runs.by_id.get(run.parent[1]) if run.parent else None
        stale = [
            i for i in (self.data.stale.of_run(run.run_id), flow_run and self.data.stale.of_run(flow_run.run_id)) if i
        ]
        uses = [
            {"side": side, "dataset": name, "version": version}
            for side, used in (("read", run.inputs), ("wrote", run.outputs))
            for name, version in sorted(used.items())
        ]
        shown = {
            "run": run,
            "stale": self._stale(stale),
            "related": related,
            "children": runs.children(run),
            "has_card": run.run_id in self.data.cards,
            "reproduction": self.data.reproductions.get(run.run_id),
            "uses": uses,
            "trace": self.data.traces.get(run.run_id),
        }
        return Page(run_path(run.run_id), f"Run of {run.job}", "run", "pages/run.html", shown)
