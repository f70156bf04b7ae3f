"""The site's pages as HTML bodies: the graph, the evolution, the catalog, what is stale and the re-run plan,
a page per dataset, per job (task, step, DAG, flow) and per run. Layout and behaviour are in ``assets/`` (one stylesheet, one
script); the pictures come in already drawn (``drawing``), so this module only arranges facts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from nyc_taxi.core import datasets as d
from nyc_taxi.core.comparison import TIE
from nyc_taxi.core.datasets import PublishedFiles, Table
from nyc_taxi.core.jobs import UPPER_BOUND, Pipeline
from nyc_taxi.core.quality import declared_rule
from nyc_taxi.lineage.read.columns import ColumnStep
from nyc_taxi.lineage.read.graph import LineageGraph, Node
from nyc_taxi.lineage.read.quality import SYMBOLS
from nyc_taxi.lineage.read.runs import JobRun
from nyc_taxi.lineage.read.site.collect import DatasetFacts, JobFacts, SiteData
from nyc_taxi.lineage.read.site.drawing import STATE_COLOURS, STYLE, fold
from nyc_taxi.lineage.read.site.markup import (
    badge,
    card_path,
    check_anchor,
    code,
    column_anchor,
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
from nyc_taxi.lineage.read.site.plot import forecast_chart, versions_chart


@dataclass
class Page:
    path: str  # from the site's root
    title: str
    body: str
    kind: str  # graph | evolution | catalog | dataset | job | run

    @property
    def root(self) -> str:
        """The way back to the site's root from this page ("" or "../")."""
        return "../" * self.path.count("/")


def node_path(node: Node) -> str:
    return job_path(node.name) if node.kind == "job" else dataset_path(node.name)


def _run_name(run: JobRun) -> str:
    """What a user calls a run: the tool's run id (Airflow's run id, Metaflow's pathspec)."""
    return run.label or run.run_id


def _run_link(run: JobRun, root: str, text: str | None = None) -> str:
    return link(root + run_path(run.run_id), text or _run_name(run), title=f"OpenLineage run {run.run_id}")


def _job_and_run(run: JobRun, root: str) -> str:
    return f"{link(root + job_path(run.job), run.job)}<br>{_run_link(run, root)} {_state(run.state)}"


def _state(state: str) -> str:
    return badge(state, "state-" + state)


def _tool(node: Node) -> str:
    return badge(node.label, node.tool)


def _versions(pairs, root: str) -> str:
    """dataset@version links, one a line: the dataset's page, at that version (``pairs``: (dataset,
    version); a DAG or flow run names each version its runs read)."""
    return "<br>".join(
        link(root + dataset_path(name) + (f"#{version_anchor(version)}" if version else ""), name)
        + " @ "
        + short(version)
        for name, version in sorted(pairs, key=lambda pair: (pair[0], pair[1] or ""))
    )


def _version_ref(dataset: str, version: str | None, root: str) -> str:
    """A version of a dataset, linked to its row in the dataset's versions (rows checked but refused: no
    version)."""
    if not version:
        return '<span class="empty">not committed</span>'
    return link(root + dataset_path(dataset) + f"#{version_anchor(version)}", version[:24])


def origins(step: ColumnStep) -> str:
    """Where a column comes from in the end, by dataset: ``noaa…published.{day1…day31, month}``."""
    by_dataset: dict[str, list[str]] = {}
    for dataset, column in sorted(step.origins()):
        by_dataset.setdefault(dataset, []).append(column)
    return ", ".join(
        f"{dataset}.{columns[0]}" if len(columns) == 1 else f"{dataset}.{{{fold(columns)}}}"
        for dataset, columns in by_dataset.items()
    )


def _parameters(parameters: dict[str, str]) -> str:
    return "<br>".join(f"{esc(k)}={code(v)}" for k, v in sorted(parameters.items()) if k != "try_number")


class Pages:
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
            what = _run_link(self.data.runs.by_id[item.run_id], root, item.name)
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
                f'<option value="{esc(run.run_id)}">{esc(run.job)} · {esc(_run_name(run))}{esc(model or month)} · '
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
                    _tool(f.node),
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
                    _state(j.runs[-1].state) + " " + moment(j.runs[-1].started) if j.runs else "",
                ]
                for j in self.data.jobs.values()
            ),
        )
        runs = table(
            ["run", "job", "state", "started", "took"],
            (
                [_run_link(r, ""), link(job_path(r.job), r.job), _state(r.state), moment(r.started), seconds(r.seconds)]
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

    # ---- a dataset -------------------------------------------------------------------------------
    def dataset_page(self, facts: DatasetFacts) -> Page:
        node, root = facts.node, "../"
        declared = facts.declared
        head = f"<h1>{esc(node.name)} {_tool(node)}</h1>"
        if declared is None:
            head += '<p class="warning">Not in the registry: a name only the records know.</p>'
        else:
            head += f'<p class="lead">{esc(declared.description)}</p>'
        parts = [head, self._stale_section(self.data.stale.of_dataset(node.name), root)]
        parts += [self._identity(facts), self._last_write(node)]
        parts.append(section("Upstream and downstream", self._around(node.name, root), "around"))
        if node.name in self.data.current_traces:
            current = self.data.current_traces[node.name]
            trace = _trace_version(current, root, verb="")
            verdict = f'<p class="verdict">Its checks: {esc(current["checks_verdict"])}</p>'
            parts.append(
                section("Where the current version comes from", f'{verdict}<div class="trace">{trace}</div>', "trace")
            )
        if self.data.forecast and self.data.forecast.dataset == node.name:
            parts.append(section("Forecast vs actual", self._forecast(facts, root), "forecast"))
        if node.name == d.YELLOW_RIDES_FORECAST_SCORES.name:
            parts.append(
                section(
                    "Backtests",
                    f"<p>The models compared on these scores, origin by origin: {link(root + 'backtests.html', 'Backtests')}</p>",
                    "backtests",
                )
            )
        parts.append(section("Columns", self._columns(facts, root), "columns"))
        if facts.columns:
            parts.append(section("Column lineage", self._column_lineage(facts), "column-lineage"))
        parts.append(section("Versions", self._dataset_versions(facts, root), "versions"))
        if getattr(declared, "checks", ()) or (facts.quality and facts.quality.checks):
            parts.append(section("Quality", self._quality(facts, root), "quality"))
        if facts.quality and facts.quality.profiles:
            parts.append(section("Stats", self._stats(facts), "stats"))
        return Page(dataset_path(node.name), node.name, "".join(parts), "dataset")

    def _identity(self, facts: DatasetFacts) -> str:
        found = facts.identity
        rows = [("DataHub URN", code(facts.node.urn))]
        if found:
            rows += [
                ("OpenLineage namespace", code(found.ol_namespace)),
                ("OpenLineage name", code(found.ol_name)),
                *((f"OpenLineage symlink ({s.type})", code(f"{s.namespace} {s.name}")) for s in found.ol_symlinks),
                ("Airflow Asset URI", code(found.asset_uri) if found.asset_uri else ""),
                ("Iceberg identifier", code(facts.iceberg_identifier) if facts.iceberg_identifier else ""),
                ("location", code(found.location) if found.location else ""),
            ]
        if isinstance(facts.declared, Table) and facts.declared.primary_key:
            rows.append(("primary key", code(", ".join(facts.declared.primary_key))))
        if isinstance(facts.declared, PublishedFiles):
            rows.append(("publisher", esc(facts.declared.publisher)))
        return section("Identity in every system", pairs(rows), "identity")

    def _last_write(self, node: Node) -> str:
        fresh = node.freshness
        if not fresh:
            return ""
        text = f"{millis(fresh.at)} by {code(fresh.actor or '?')}"
        if fresh.snapshot_id:
            text += f", snapshot {link('#' + version_anchor(fresh.snapshot_id), fresh.snapshot_id)}"
        if fresh.rows is not None:
            text += f", {fresh.rows:,} rows"
        return f'<p class="fresh">Last write: {text}</p>'

    def _around(self, name: str, root: str) -> str:
        """The mini-map and the immediate parents and children, each with how it is linked; for a DAG
        or flow, what its jobs read and write."""
        node = self.node_by_name.get(name)
        if node is None and f"mini:{name}" not in self.svgs:
            return '<p class="empty">no lineage recorded yet</p>'
        lists = []
        for direction in ("upstream", "downstream"):
            found = self._neighbours(node, direction) if node else self._pipeline_neighbours(name, direction)
            items = [
                f"<li>{esc(verb)} {link(root + node_path(other), other.name)} {_tool(other)}</li>"
                for verb, other in found
            ]
            lists.append(
                f'<div class="{direction}"><h3>{direction}</h3><ul>{"".join(items) or "<li>nothing</li>"}</ul></div>'
            )
        whole = link(f"{root}index.html#node={name}", "show it in the whole graph") if node else ""
        return (
            f'<div class="minimap">{self.svgs.get("mini:" + name, "")}</div>'
            f'<div class="around">{"".join(lists)}</div><p>{whole}</p>'
        )

    def _neighbours(self, node: Node, direction: str) -> list[tuple[str, Node]]:
        return [(kind.verb(direction), self.graph.nodes[u]) for u, kind in self.graph.neighbours(node.urn, direction)]

    def _pipeline_neighbours(self, pipeline: str, direction: str) -> list[tuple[str, Node]]:
        """What a DAG's or flow's jobs read from outside it (upstream), and what they write (downstream)."""
        inside = {u for u, n in self.graph.nodes.items() if n.kind == "job" and n.pipeline == pipeline}
        made_inside = {e.target for e in self.graph.edges if e.source in inside}
        found = {}
        for urn in sorted(inside, key=lambda u: self.graph.nodes[u].name):
            for other, kind in self.graph.neighbours(urn, direction):
                if other not in inside and not (direction == "upstream" and other in made_inside):
                    found.setdefault(other, (kind.verb(direction), self.graph.nodes[other]))
        return list(found.values())

    def _forecast(self, facts: DatasetFacts, root: str) -> str:
        forecast = self.data.forecast
        card = self._card_of_current_version(facts)
        note = (
            f"<p>The Metaflow evaluation card of the flow run that wrote this version (MAE, WAPE, the busiest zones): "
            f"{link(root + card_path(card.run_id), 'open the card')} · {_run_link(card, root)}</p>"
            if card
            else "<p>No evaluation card found for the run that wrote this version.</p>"
        )
        return forecast_chart(forecast) + note

    def _card_of_current_version(self, facts: DatasetFacts) -> JobRun | None:
        """The card of a step run in the same flow run as the writer of the current version."""
        current = next((v for v in reversed(facts.versions) if v.current), None)
        writer = current.writer if current else None
        if writer is None or writer.parent is None:
            return None
        siblings = [r for r in self.data.runs if r.parent == writer.parent and r.run_id in self.data.cards]
        return siblings[-1] if siblings else None

    def _columns(self, facts: DatasetFacts, root: str) -> str:
        declared = getattr(facts.declared, "columns", ()) or ()
        names = [c.name for c in declared] + [n for n in facts.schema if n not in {c.name for c in declared}]
        by_name = {c.name: c for c in declared}
        rows = []
        for name in names:
            column, field = by_name.get(name), facts.schema.get(name, {})
            lineage = ""
            if name in facts.columns:
                lineage = link(f"#{column_anchor(name)}", "from " + origins(facts.columns[name]), cls="column-link")
            rows.append(
                [
                    f"<b>{esc(name)}</b>" + (" " + badge("key", "key") if field.get("isPartOfKey") else ""),
                    code(column.type) if column else "",
                    code(field.get("nativeDataType", "")) if field else '<span class="empty">–</span>',
                    esc(column.doc if column else field.get("description", "")),
                    lineage,
                ]
            )
        return table(["column", "type (registry)", "type (DataHub schema)", "meaning", "column lineage"], rows)

    def _column_lineage(self, facts: DatasetFacts) -> str:
        blocks = []
        for column, step in facts.columns.items():
            blocks.append(
                f'<details id="{column_anchor(column)}" class="column"><summary><b>{esc(column)}</b> ← '
                f"{esc(origins(step))}</summary>"
                f'<div class="graph small">{self.svgs.get(f"column:{facts.node.name}.{column}", "")}</div></details>'
            )
        return (
            "<p>Where each column comes from, back to the published files' columns; alike columns of one dataset "
            "share a box (day1…day31). Edges are coloured by the tool of the job that computed them.</p>"
            + "".join(blocks)
        )

    def _dataset_versions(self, facts: DatasetFacts, root: str) -> str:
        rows, ids = [], []
        for version in reversed(facts.versions):
            writer = version.writer
            records = ", ".join(f"{k} {int(v):,}" for k, v in version.records.items())
            rows.append(
                [
                    short(version.version, 40) + (" " + badge("current", "current") if version.current else ""),
                    moment(version.at),
                    esc(version.operation),
                    esc(records),
                    _job_and_run(writer, root) if writer else '<span class="empty">published: no run of ours</span>',
                    "<br>".join(code(location) for location in version.locations),
                ]
            )
            ids.append(version_anchor(version.version))
        return table(["version", "at", "operation", "records", "written by", "files"], rows, "versions", ids)

    def _quality(self, facts: DatasetFacts, root: str) -> str:
        """Every check declared on the dataset with its last result and its history, newest first (what
        DataHub's Quality tab shows: its assertions and their run events, from DataHub Lite)."""
        found = facts.quality
        histories = {h.check: h for h in (found.checks if found else [])}
        declared = [c.name for c in getattr(facts.declared, "checks", ())]
        rows, blocks = [], []
        for name in [*declared, *(n for n in histories if n not in declared)]:
            history = histories.get(name)
            check = next((c for c in getattr(facts.declared, "checks", ()) if c.name == name), None)
            last = history.last if history else None
            marks = "".join(
                f'<span class="mark q-{e.status}" title="{esc(e.status)} on {esc(e.version or "rows not committed")}">'
                f"{esc(SYMBOLS[e.status])}</span>"
                for e in reversed((history.evaluations if history else [])[:20])
            )
            rows.append(
                [
                    f'<a href="#{esc(check_anchor(name))}"><b>{esc(name)}</b></a>',
                    badge(
                        check.severity if check else history.severity,
                        "severity-" + (check.severity if check else history.severity),
                    ),
                    esc(check.doc if check else history.doc) + ("" if check else " <i>(no longer declared)</i>"),
                    (badge(last.status, "q-" + last.status) + " " + esc(last.counts()))
                    if last
                    else '<span class="empty">not evaluated yet</span>',
                    _version_ref(facts.node.name, last.version, root) if last else "",
                    f'<span class="marks">{marks}</span>',
                ]
            )
            if history and history.evaluations:
                blocks.append(self._check_history(facts, history, check, root))
        intro = (
            "<p>The checks declared with this dataset (<code>shared/nyc_taxi/core/datasets.py</code>), each "
            "evaluated on every version written, by the step that writes it. An <b>error</b> check that fails "
            "stops its run before the version is published; a <b>warn</b> check records the rows and the run "
            "goes on. The marks are the last results, oldest left.</p>"
        )
        return (
            intro
            + table(["check", "severity", "what it asserts", "last result", "on version", "history"], rows, "checks")
            + "".join(blocks)
        )

    def _check_history(self, facts: DatasetFacts, history, check, root: str) -> str:
        rows = []
        for evaluation in history.evaluations:
            run = self.data.runs.by_id.get(evaluation.run_id)
            rows.append(
                [
                    millis(evaluation.at_ms),
                    _version_ref(facts.node.name, evaluation.version, root),
                    _job_and_run(run, root) if run else code(evaluation.run_id),
                    badge(evaluation.status, "q-" + evaluation.status),
                    esc(evaluation.counts()),
                    "<br>".join(
                        esc(", ".join(f"{k}={v}" for k, v in example.items())) for example in evaluation.examples
                    ),
                ]
            )
        rule = code(declared_rule(check) if check else history.rule)
        return (
            f'<details id="{esc(check_anchor(history.check))}" class="check"><summary><b>{esc(history.check)}</b> '
            f"— {len(history.evaluations)} results {rule}</summary>"
            + table(["at", "version", "run", "result", "rows", "failing rows (examples)"], rows)
            + "</details>"
        )

    def _stats(self, facts: DatasetFacts) -> str:
        """The profile of every snapshot written (Iceberg's manifests, as DataHub's Stats tab shows a
        profile): rows and nulls over versions as small charts, the latest profile per column."""
        points = facts.quality.profiles
        versions = [p.version for p in points]
        rows_chart = versions_chart(
            f"{facts.node.name}: rows per version", versions, {"rows": [p.rows for p in points]}, "rows"
        )
        nullable = sorted(
            {name for p in points for name, f in p.fields.items() if f.get("nullCount")},
            key=lambda name: -max(p.fields.get(name, {}).get("nullCount") or 0 for p in points),
        )[:5]
        nulls_chart = (
            versions_chart(
                f"{facts.node.name}: nulls per version",
                versions,
                {name: [p.fields.get(name, {}).get("nullCount") for p in points] for name in nullable},
                "nulls",
            )
            if nullable
            else '<p class="empty">no column has a null in any version</p>'
        )
        latest = points[-1]
        columns = [
            [
                f"<b>{esc(name)}</b>",
                f"{f.get('nullCount'):,}" if f.get("nullCount") is not None else "",
                f"{f['nullProportion']:.2%}" if f.get("nullProportion") is not None else "",
                esc(f.get("min") or ""),
                esc(f.get("max") or ""),
                f"{f['uniqueCount']:,}" if f.get("uniqueCount") is not None else "",
            ]
            for name, f in latest.fields.items()
        ]
        history = [
            [
                short(p.version, 24),
                millis(p.at_ms),
                f"{p.rows:,}" if p.rows is not None else "",
                str(p.columns or ""),
                f"{p.size_bytes:,}" if p.size_bytes is not None else "",
            ]
            for p in reversed(points)
        ]
        return (
            "<p>The profile of every snapshot written, from Iceberg's manifests (rows, size, and per column its "
            "nulls, minimum and maximum; strings get no bounds: the manifests cut them to 16 characters); "
            "distinct values are counted for the columns of few values, in the pass that writes a load.</p>"
            f'<div class="charts">{rows_chart}{nulls_chart}</div>'
            f"<h3>Columns at version {short(latest.version)} ({millis(latest.at_ms)})</h3>"
            + table(["column", "nulls", "null share", "min", "max", "distinct"], columns, "profile")
            + "<h3>Versions profiled</h3>"
            + table(["version", "committed", "rows", "columns", "bytes"], history, "profiles")
        )

    # ---- a job -----------------------------------------------------------------------------------
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
                    ("last run (DataHub)", f"{_state(run.status)} {millis(run.started)} {seconds(run.seconds)}")
                )
        card = next((r for r in reversed(job.runs) if r.run_id in self.data.cards), None)
        if card:
            facts.append(
                ("latest card", link(root + card_path(card.run_id), "the Metaflow card of " + _run_name(card)))
            )
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
                _run_link(run, root),
                _state(run.state),
                moment(run.started),
                seconds(run.seconds),
                short(run.code_version, 12),
                short(run.job_version, 16) if run.job_version else "",
                _parameters(run.parameters),
                _versions(run.read, root),
                _versions(run.outputs.items(), root),
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
                blocks.append(f"<p>{_run_link(run, root)} failed; no good run before it.</p>")
                continue
            changed = run.changed_since_last_good or {}
            rows = [
                ["run", _run_link(good, root), _run_link(run, root)],
                ["state", _state(good.state), _state(run.state)],
                ["started", moment(good.started), moment(run.started)],
                ["code", short(good.code_version, 12), short(run.code_version, 12)],
                ["parameters", _parameters(good.parameters), _parameters(run.parameters)],
                ["read", _versions(good.read, root), _versions(run.read, root)],
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
                _run_link(runs[0], root) + " " + moment(runs[0].started),
                _run_link(runs[-1], root) + " " + moment(runs[-1].started),
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
        head = f"<h1>Run of {link(root + job_path(run.job), run.job)} {_state(run.state)}</h1>"
        facts = [
            ("run", code(_run_name(run))),
            ("OpenLineage run id", code(run.run_id)),
            ("started", moment(run.started)),
            ("ended", moment(run.ended) + (f" ({seconds(run.seconds)})" if run.seconds is not None else "")),
            ("code version", short(run.code_version, 40)),
            ("job version", short(run.job_version, 40) if run.job_version else ""),
            ("parameters", _parameters(run.parameters)),
        ]
        for name, ref in (("part of", run.parent), ("root", run.root if run.root != run.parent else None)):
            if ref and ref[1] in runs.by_id:
                facts.append((name, _run_link(runs.by_id[ref[1]], root) + f" ({esc(ref[0])})"))
        children = runs.children(run)
        if children:
            facts.append(("runs in it", "<br>".join(_run_link(c, root) + " " + _state(c.state) for c in children)))
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
                    '<div class="trace">' + _trace_run(trace, root, top=True) + "</div>",
                    "trace",
                )
            )
        return Page(run_path(run.run_id), f"Run of {run.job}", "".join(parts), "run")


# ---- the trace as a tree ------------------------------------------------------------------------------


def _trace_run(step: dict, root: str, top: bool = False) -> str:
    """A run and the versions it read, each with the runs that wrote it, down to the published files."""
    keep = ("month", "model", "as_of_datetime")
    extra = ", ".join(f"{k} {step['parameters'][k]}" for k in keep if k in step["parameters"])
    title = (
        f"{badge(step['state'], 'state-' + step['state'])} {link(root + job_path(step['job']), step['job'])} "
        f"{link(root + run_path(step['run_id']), step['label'] or step['run_id'])}"
        + (f" ({esc(extra)})" if extra else "")
        + f" · {moment(step['started'])}"
    )
    items = []
    if step["started_by"]:
        chain = " ← ".join(
            link(root + run_path(r["run_id"]), f"{r['job']} {r['label'] or r['run_id']}") for r in step["started_by"]
        )
        items.append(f'<li class="in">in {chain}</li>')
    items += [f"<li>{_trace_version(v, root)}</li>" for v in step["read"]]
    children = f"<ul>{''.join(items)}</ul>" if items else ""
    return f'<div class="trace-run{" top" if top else ""}">{title}{children}</div>'


def _trace_version(step: dict, root: str, verb: str = "read") -> str:
    version = step["version"] or ""
    target = root + dataset_path(step["dataset"]) + (f"#{version_anchor(version)}" if version else "")
    line = f"{verb} {link(target, step['dataset'], cls='version-link')} @ {short(version, 48)}"
    if step["commits"] > 1:
        line += f" (holds the commits of {step['commits']} runs)"
    if step["locations"]:
        line += '<div class="files">' + "<br>".join(code(loc) for loc in step["locations"]) + "</div>"
    if step["repeated"]:
        return line + ' <span class="empty">(traced above)</span>'
    if not step["written_by"]:
        return line + ' <span class="empty">— published: no run of ours wrote it</span>'
    writers = "".join(f"<li>written by {_trace_run(w, root)}</li>" for w in step["written_by"])
    return f"<details open><summary>{line}</summary><ul>{writers}</ul></details>"


__all__ = ["Page", "Pages", "node_path"]
