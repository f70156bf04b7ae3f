"""The site's pages as HTML bodies: the graph, the evolution, the catalog, what is stale and the re-run plan,
a page per dataset, per job (task, step, DAG, flow) and per run. Layout and behaviour are in ``assets/`` (one stylesheet, one
script); the pictures come in already drawn (``drawing``), so this module only arranges facts.
"""

from __future__ import annotations

import json

from nyc_taxi.core import datasets as d
from nyc_taxi.core.comparison import TIE
from nyc_taxi.core.jobs import UPPER_BOUND
from nyc_taxi.lineage.read.graph import LineageGraph
from nyc_taxi.lineage.read.site.collect import SiteData
from nyc_taxi.lineage.read.site.dataset_page import DatasetPage
from nyc_taxi.lineage.read.site.drawing import STATE_COLOURS, STYLE
from nyc_taxi.lineage.read.site.markup import (
    badge,
    dataset_path,
    esc,
    job_path,
    link,
    millis,
    moment,
    seconds,
    section,
    table,
)
from nyc_taxi.lineage.read.site.parts import (
    Page,
    run_link,
    run_name,
    state_badge,
    tool_badge,
)
from nyc_taxi.lineage.read.site.plot import versions_chart
from nyc_taxi.lineage.read.site.run_pages import JobAndRunPages


class Pages(DatasetPage, JobAndRunPages):
    """Every page of the site, from the collected facts and the drawn pictures (keyed as ``build``
    keys them: ``graph``, ``evolution``, ``mini:<name>``, ``column:<dataset>.<column>``)."""

    def __init__(self, data: SiteData, svgs: dict[str, str]):
        self.data, self.svgs = data, svgs
        self.graph: LineageGraph = data.graph
        self.node_by_name = {n.name: n for n in self.graph.nodes.values()}

    def all(self) -> list[Page]:
        pages = [self.graph_page(), self.evolution_page(), self.catalog_page(), self.stale_page()]
        pages.append(self.backtests_page())
        pages += [self.dataset_page(facts) for facts in self.data.datasets.values()]
        pages += [self.job_page(job) for job in self.data.jobs.values()]
        pages += [self.run_page(run) for run in self.data.runs]
        return pages

    # ---- the graph -------------------------------------------------------------------------------
    def graph_page(self) -> Page:
        controls = """
<div class="controls" id="graph-controls">
  <label>depth <select id="depth"><option value="1">1</option><option value="2">2</option>
    <option value="3">3</option><option value="0" selected>all</option></select></label>
  <label>select <input id="select" type="text" size="28" placeholder="+yellow_taxi_raw+  2+evaluate  tool:Airflow"
    title="dbt-style: NAME, +NAME (and its upstream), NAME+ (and its downstream), 2+NAME+1 (to a depth), tool:TOOL, kind:KIND; several separated by spaces"></label>
  <button type="button" id="clear">clear</button>
  <span class="zoom"><button type="button" id="zoom-out" aria-label="zoom out">−</button><button type="button" id="zoom-fit">fit</button><button type="button" id="zoom-in" aria-label="zoom in">+</button></span>
</div>"""
        legend = self._legend()
        panel = """
<aside id="panel" class="panel" hidden>
  <h2 id="panel-title"></h2><p id="panel-label"></p><p><a id="panel-open" href="#">open its page</a></p>
  <div class="filters">show <label><input type="checkbox" value="dataset" checked> datasets</label>
    <label><input type="checkbox" value="job" checked> jobs</label><label><input type="checkbox" value="model" checked> models</label></div>
  <h3>upstream</h3><ol id="panel-up" class="degrees"></ol>
  <h3>downstream</h3><ol id="panel-down" class="degrees"></ol>
</aside>"""
        summary = (
            f"<p class='lead'>{len(self.graph.nodes)} nodes and {len(self.graph.edges)} edges, read from the records "
            "Airflow and Metaflow wrote (DataHub Lite); each job shows its last run. Click a node to highlight "
            "what it depends on (upstream) and what depends on it (downstream); double-click to open its page.</p>"
        )
        body = (
            f"<h1>Cross-tool lineage</h1>{summary}{controls}{legend}"
            f'<div class="graph-wrap"><div id="graph" class="graph">{self.svgs["graph"]}</div>{panel}</div>'
        )
        return Page("index.html", "Cross-tool lineage", body, "graph")

    def _legend(self) -> str:
        names = {
            "Airflow": "Airflow task",
            "Metaflow": "Metaflow step, model",
            "Iceberg": "Iceberg table",
            "files": "landed files",
            "source": "source (published) files",
        }
        tools = "".join(
            f'<span class="swatch" style="background:{STYLE[t]}"></span>{esc(n)} ' for t, n in names.items()
        )
        states = "".join(
            f'<span class="ring" style="border-color:{c}"></span>{esc(s)} ' for s, c in STATE_COLOURS.items()
        )
        return (
            f'<p class="legend">{tools}· last run: {states}· <span class="dash"></span> task/step order '
            '· <span class="dash starts"></span> starts another tool</p>'
        )

    # ---- what is stale ---------------------------------------------------------------------------
    def stale_page(self) -> Page:
        report = self.data.stale
        root = ""
        if not report.items:
            body = (
                "<h1>Stale</h1><p class='lead'>Nothing is stale: every output was computed from what its inputs "
                "hold now.</p>"
            )
        else:
            rows = [
                [badge("stale", "stale") + " " + esc(i.kind), self._stale_what(i, root), esc(i.reason)]
                for i in report.items
            ]
            plan = "".join(
                f"<li><code>{esc(p.dag)}</code> <code>{esc(json.dumps(p.conf, sort_keys=True))}</code> for {esc(p.because)}"
                + (f" — <b>cannot run</b>: {esc(p.blocked)}" if p.blocked else "")
                + "</li>"
                for p in report.plan
            )
            body = (
                "<h1>Stale</h1><p class='lead'>Outputs computed from versions that have since been superseded in "
                "what they read, transitively, from the records both tools wrote and the tables' own metadata "
                "(<code>bash run lineage --stale</code>).</p>"
                + table(["", "what", "why"], rows, "stale")
                + section(
                    "The re-run plan, in order",
                    f"<ol>{plan}</ol><p>Carried out by <code>bash run lineage --stale --rerun</code>: the same DAGs and "
                    "flow, through Airflow and Metaflow, with lineage as usual.</p>",
                    "plan",
                )
            )
        if not report.checked_sources:
            body += "<p class='warning'>The sources were not asked (or not reachable): only what was recorded was compared.</p>"
        return Page("stale.html", "Stale", body, "stale")

    def _stale_what(self, item, root: str) -> str:
        if item.run_id and item.run_id in self.data.runs.by_id:
            what = run_link(self.data.runs.by_id[item.run_id], root, item.name)
        elif item.dataset:
            what = link(root + dataset_path(item.dataset), item.name)
        else:
            what = esc(item.name)
        if item.outputs:
            what += "<br>wrote " + ", ".join(link(root + dataset_path(n), n) for n in sorted(item.outputs))
        if item.score:
            what += f"<br>its forecast's score is stale: {esc(item.score)}"
        return what

    def _stale_section(self, items, root: str) -> str:
        if not items:
            return ""
        rows = "".join(
            f"<li>{badge('stale', 'stale')} {self._stale_what(i, root)}: {esc(i.reason)}</li>" for i in items
        )
        return section("Stale", f"<ul>{rows}</ul><p>{link(root + 'stale.html', 'the re-run plan')}</p>", "stale")

    # ---- the models compared ---------------------------------------------------------------------
    def backtests_page(self) -> Page:
        compared = self.data.backtests
        scores = d.YELLOW_RIDES_FORECAST_SCORES.name
        lead = (
            "<h1>Backtests</h1><p class='lead'>Every kept forecast, scored once its hours have happened "
            f"({link(dataset_path(scores), scores)}: each flow run's last step scores them all). Models are compared "
            "at the origins where each has a score over its whole horizon; the lower WAPE wins "
            "(<code>bash run backtest</code> runs both models over weekly origins and prints this table).</p>"
        )
        if compared is None or not compared.scores:
            return Page(
                "backtests.html", "Backtests", lead + "<p class='empty'>No forecast scored yet.</p>", "backtests"
            )
        labels = [f"{o:%Y-%m-%d %H:%M}" for o in compared.origins]
        series = {
            m: [
                None if (s := compared.score(m, o)) is None or s["wape"] is None else 100 * s["wape"]
                for o in compared.origins
            ]
            for m in compared.models
        }
        chart = versions_chart(
            "WAPE by forecast origin",
            labels,
            series,
            "WAPE, %",
            x_label="forecast origin (oldest left)",
            short=lambda o: o[5:10],
        )
        rows = []
        for origin, label in zip(compared.origins, labels, strict=True):
            cells = [esc(label)]
            for model in compared.models:
                score = compared.score(model, origin)
                if score is None:
                    cells.append('<span class="empty">not scored</span>')
                    continue
                wape = "—" if score["wape"] is None else f"{score['wape']:.1%}"
                cells.append(
                    f"<b>{wape}</b> · MAE {score['mae']:.2f} · bias {score['bias']:+.2f}"
                    + (f" · {score['coverage']:.0%} of its hours" if score["coverage"] < 1 else "")
                    + (" · <b>stale</b>" if (model, origin) in compared.stale else "")
                    + (" · staleness not known" if (model, origin) in compared.unjudged else "")
                )
            cells.append(esc(compared.winner(origin) or f"not comparable: {compared.why_not(origin)}"))
            rows.append(cells)
        wins = compared.wins()
        counted = len(compared.compared)
        summary = ", ".join(f"<b>{esc(m)}</b> {wins[m]} of {counted}" for m in compared.models)
        means = ", ".join(f"{esc(m)} {w:.1%}" for m in compared.models if (w := compared.mean_wape(m)) is not None)
        caveats = "".join(
            f"<p class='caveat'><b>{esc(m)}</b>: {esc(UPPER_BOUND[m])}.</p>"
            for m in compared.models
            if m in UPPER_BOUND
        )
        body = (
            lead
            + caveats
            + section("WAPE by origin", chart, "chart")
            + section(
                "By origin and model",
                table(
                    ["origin", *(f"{m}*" if m in UPPER_BOUND else m for m in compared.models), "best"],
                    rows,
                    "backtests",
                )
                + f"<p>Wins: {summary}"
                + (f", ties {wins[TIE]}" if wins[TIE] else "")
                + "."
                + (f" WAPE over the compared origins' hours together: {means}." if means else "")
                + "</p>",
                "table",
            )
        )
        return Page("backtests.html", "Backtests", body, "backtests")

    # ---- evolution -------------------------------------------------------------------------------
    def evolution_page(self) -> Page:
        evolution = self.data.evolution
        options = []
        for run in evolution.pipeline_runs:
            model = f" ({run.parameters['model']})" if "model" in run.parameters else ""
            month = f" (month {run.parameters['month']})" if "month" in run.parameters else ""
            options.append(
                f'<option value="{esc(run.run_id)}">{esc(run.job)} · {esc(run_name(run))}{esc(model or month)} · '
                f"{moment(run.ended or run.started)}</option>"
            )
        choose = "".join(options)
        body = f"""<h1>Evolution</h1>
<p class="lead">The graph as the runs up to a moment recorded it (each job's last run up to then), two moments
side by side: edges only in the second are <span class="added">added</span>, edges only in the first
<span class="removed">removed</span>. Pick two runs — a run's moment is its end — or two times (UTC).</p>
<div class="controls" id="evolution-controls">
  <label>from <select id="from-run">{choose}</select></label> <label>or time <input id="from-time" type="datetime-local" step="1"></label>
  <label>to <select id="to-run">{choose}</select></label> <label>or time <input id="to-time" type="datetime-local" step="1"></label>
</div>
<div id="evolution-summary" class="summary"></div>
<div id="evolution-graph" class="graph">{self.svgs["evolution"]}</div>"""
        return Page("evolution.html", "Evolution", body, "evolution")

    # ---- catalog ---------------------------------------------------------------------------------
    def catalog_page(self) -> Page:
        datasets = table(
            ["dataset", "kind", "description", "last write"],
            (
                [
                    link(dataset_path(f.node.name), f.node.name),
                    tool_badge(f.node),
                    esc(getattr(f.declared, "description", "")),
                    millis(f.node.freshness.at) if f.node.freshness else "",
                ]
                for f in self.data.datasets.values()
            ),
        )
        jobs = table(
            ["job", "kind", "description", "last run"],
            (
                [
                    link(job_path(j.name), j.name),
                    esc(self._job_kind(j)),
                    esc(getattr(j.declared, "description", "")),
                    state_badge(j.runs[-1].state) + " " + moment(j.runs[-1].started) if j.runs else "",
                ]
                for j in self.data.jobs.values()
            ),
        )
        runs = table(
            ["run", "job", "state", "started", "took"],
            (
                [
                    run_link(r, ""),
                    link(job_path(r.job), r.job),
                    state_badge(r.state),
                    moment(r.started),
                    seconds(r.seconds),
                ]
                for r in reversed(list(self.data.runs))
            ),
        )
        body = (
            "<h1>Datasets, jobs and runs</h1>"
            + section("Datasets", datasets, "datasets")
            + section("Jobs: DAGs, tasks, flows, steps", jobs, "jobs")
            + section("Runs, newest first", runs, "runs")
        )
        return Page("catalog.html", "Datasets, jobs and runs", body, "catalog")
