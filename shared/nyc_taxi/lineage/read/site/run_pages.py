"""A job's page (its runs, failures and versions) and a run's page (what it read and wrote, its parent and
children, and the trace of its versions across tools back to the source files)."""

from __future__ import annotations

from nyc_taxi.core.jobs import Pipeline
from nyc_taxi.lineage.read.runs import JobRun
from nyc_taxi.lineage.read.site.collect import JobFacts
from nyc_taxi.lineage.read.site.markup import (
    badge,
    card_path,
    code,
    dataset_path,
    esc,
    job_path,
    link,
    millis,
    moment,
    pairs,
    run_path,
    seconds,
    section,
    short,
    table,
    version_anchor,
)
from nyc_taxi.lineage.read.site.parts import (
    Page,
    parameter_list,
    run_link,
    run_name,
    state_badge,
    trace_run,
    version_links,
)


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
        root = "../"
        kind = self._job_kind(job)
        head = f"<h1>{esc(job.name)} {badge(kind, job.node.tool if job.node else kind.split(' ')[0])}</h1>"
        if job.declared is not None:
            head += f'<p class="lead">{esc(job.declared.description)}</p>'
        facts = [("kind", esc(kind))]
        if not job.is_pipeline:
            pipeline = job.name.split(".", 1)[0]
            facts.append(("in", link(root + job_path(pipeline), pipeline)))
        if isinstance(job.declared, Pipeline):
            facts.append(("code", code(job.declared.code)))
            facts.append(
                ("jobs", ", ".join(link(root + job_path(j.qualified_name), j.name) for j in job.declared.jobs))
            )
        elif job.declared is not None:
            declared = [(n, [d.name for d in getattr(job.declared, n)]) for n in ("reads", "writes")]
            facts += [
                (f"declared {n}", ", ".join(link(root + dataset_path(d), d) for d in names)) for n, names in declared
            ]
        if job.node is not None:
            facts.append(("DataHub URN", code(job.node.urn)))
            if job.node.last_run:
                run = job.node.last_run
                facts.append(
                    ("last run (DataHub)", f"{state_badge(run.status)} {millis(run.started)} {seconds(run.seconds)}")
                )
        card = next((r for r in reversed(job.runs) if r.run_id in self.data.cards), None)
        if card:
            facts.append(("latest card", link(root + card_path(card.run_id), "the Metaflow card of " + run_name(card))))
        parts = [head, pairs(facts)]
        parts.append(section("Upstream and downstream", self._around(job.name, root), "around"))
        parts.append(section("Runs, newest first", self._job_runs(job, root), "runs"))
        failed = [r for r in job.runs if r.state == "failure"]
        if failed:
            parts.append(
                section("Failed runs next to the last good one", self._failures(job, failed, root), "failures")
            )
        if any(r.job_version for r in job.runs):
            parts.append(section("Job versions", self._job_versions(job, root), "versions"))
        return Page(job_path(job.name), job.name, "".join(parts), "job")

    def _job_runs(self, job: JobFacts, root: str) -> str:
        rows = [
            [
                run_link(run, root),
                state_badge(run.state),
                moment(run.started),
                seconds(run.seconds),
                short(run.code_version, 12),
                short(run.job_version, 16) if run.job_version else "",
                parameter_list(run.parameters),
                version_links(run.read, root),
                version_links(run.outputs.items(), root),
            ]
            for run in reversed(job.runs)
        ]
        return table(
            ["run", "state", "started", "took", "code", "job version", "parameters", "read", "wrote"], rows, "runs"
        )

    def _failures(self, job: JobFacts, failed: list[JobRun], root: str) -> str:
        blocks = []
        for run in failed:
            good = next((r for r in reversed(job.runs[: job.runs.index(run)]) if r.state == "success"), None)
            if good is None:
                blocks.append(f"<p>{run_link(run, root)} failed; no good run before it.</p>")
                continue
            changed = run.changed_since_last_good or {}
            rows = [
                ["run", run_link(good, root), run_link(run, root)],
                ["state", state_badge(good.state), state_badge(run.state)],
                ["started", moment(good.started), moment(run.started)],
                ["code", short(good.code_version, 12), short(run.code_version, 12)],
                ["parameters", parameter_list(good.parameters), parameter_list(run.parameters)],
                ["read", version_links(good.read, root), version_links(run.read, root)],
                ["error", "", f"<pre>{esc((run.error or '').strip()[:2000])}</pre>"],
            ]
            what = "; ".join(f"{esc(k)}: {esc(a)} → {esc(b)}" for k, (a, b) in changed.items()) or "nothing"
            blocks.append(
                f'<div class="failure"><p class="changed">Changed since the last good run: {what}</p>'
                + table(["", "last good run", "failed run"], rows, "compare")
                + "</div>"
            )
        return "".join(blocks)

    def _job_versions(self, job: JobFacts, root: str) -> str:
        versions: dict[str, list[JobRun]] = {}
        for run in job.runs:
            if run.job_version:
                versions.setdefault(run.job_version, []).append(run)
        rows = [
            [
                short(version, 20),
                str(len(runs)),
                run_link(runs[0], root) + " " + moment(runs[0].started),
                run_link(runs[-1], root) + " " + moment(runs[-1].started),
                ", ".join(link(root + dataset_path(n), n) for n in sorted({n for r in runs for n in r.inputs})),
            ]
            for version, runs in versions.items()
        ]
        return "<p>A job's version changes when what it reads or writes, its model or its code changes.</p>" + table(
            ["job version", "runs", "first run", "last run", "read"], rows
        )

    # ---- a run -----------------------------------------------------------------------------------
    def run_page(self, run: JobRun) -> Page:
        root = "../"
        runs = self.data.runs
        head = f"<h1>Run of {link(root + job_path(run.job), run.job)} {state_badge(run.state)}</h1>"
        facts = [
            ("run", code(run_name(run))),
            ("OpenLineage run id", code(run.run_id)),
            ("started", moment(run.started)),
            ("ended", moment(run.ended) + (f" ({seconds(run.seconds)})" if run.seconds is not None else "")),
            ("code version", short(run.code_version, 40)),
            ("job version", short(run.job_version, 40) if run.job_version else ""),
            ("parameters", parameter_list(run.parameters)),
        ]
        for name, ref in (("part of", run.parent), ("root", run.root if run.root != run.parent else None)):
            if ref and ref[1] in runs.by_id:
                facts.append((name, run_link(runs.by_id[ref[1]], root) + f" ({esc(ref[0])})"))
        children = runs.children(run)
        if children:
            facts.append(("runs in it", "<br>".join(run_link(c, root) + " " + state_badge(c.state) for c in children)))
        if run.run_id in self.data.cards:
            facts.append(("card", link(root + card_path(run.run_id), "the Metaflow card of this run")))
        flow_run = runs.by_id.get(run.parent[1]) if run.parent else None
        stale = [
            i for i in (self.data.stale.of_run(run.run_id), flow_run and self.data.stale.of_run(flow_run.run_id)) if i
        ]
        parts = [head, self._stale_section(stale, root), pairs(facts)]
        if answer := self.data.reproductions.get(run.run_id):
            status = answer["status"]
            parts.append(
                section(
                    "Reproduced from its lineage",
                    f"<p>{badge(status, 'reproduce-' + status)} {moment(answer.get('at'))} with the code of "
                    f"{esc(answer.get('code', '?'))} (<code>bash run lineage --reproduce</code>)</p>"
                    f"<pre>{esc(answer.get('text', ''))}</pre>",
                    "reproduce",
                )
            )
        if run.error:
            parts.append(section("Error", f"<pre>{esc(run.error.strip()[:4000])}</pre>", "error"))
        inputs_outputs = table(
            ["", "dataset", "version", "files", "rows written"],
            [
                [
                    side,
                    link(root + dataset_path(name), name),
                    link(root + dataset_path(name) + f"#{version_anchor(version)}", version) if version else "?",
                    "<br>".join(code(loc) for loc in run.locations.get(name, [])),
                    f"{run.rows[name]:,}" if name in run.rows and side == "wrote" else "",
                ]
                for side, uses in (("read", run.inputs), ("wrote", run.outputs))
                for name, version in sorted(uses.items())
            ],
            "io",
        )
        parts.append(section("Read and wrote", inputs_outputs, "io"))
        trace = self.data.traces.get(run.run_id)
        if trace:
            parts.append(
                section(
                    "Version trace, across tools, back to the source files",
                    '<div class="trace">' + trace_run(trace, root, top=True) + "</div>",
                    "trace",
                )
            )
        return Page(run_path(run.run_id), f"Run of {run.job}", "".join(parts), "run")
