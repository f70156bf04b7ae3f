"""`bash run lineage --site [--out DIR]`: write the lineage site, a folder that opens from ``file://``.

    index.html            the whole graph (depth, highlight, selection), search on every page
    evolution.html        the graph between two runs or two times, what was added and removed
    catalog.html          every dataset, job and run
    datasets/<name>.html  description, identity in every system, columns, column lineage, versions, quality
    jobs/<name>.html      a task, step, DAG or flow: runs, failed vs last good, job versions
    runs/<run id>.html    a run: what it read and wrote, its version trace back to the source files
    cards/<run id>.html   the Metaflow cards the runs produced, copied
    graph.svg             the whole graph, alone: byte-identical from the same records, no machine path
    data.js               what the pages' script needs (a global: no fetch, so ``file://`` works)

Pictures are laid out by Graphviz in one ``dot`` run (``drawing.render``); the pages are rendered from the
Jinja templates in ``templates/`` (``markup.render``), with the facts ``pages`` arranges for each.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from nyc_taxi.core.jobs import PIPELINES
from nyc_taxi.core.settings import Settings
from nyc_taxi.lineage.read.graph import Edge, LineageGraph
from nyc_taxi.lineage.read.site import drawing
from nyc_taxi.lineage.read.site.collect import SiteData, collect
from nyc_taxi.lineage.read.site.markup import (
    card_path,
    column_anchor,
    dataset_path,
    job_path,
    kind_class,
    node_path,
    render,
    run_path,
)
from nyc_taxi.lineage.read.site.pages import Pages
from nyc_taxi.lineage.read.site.parts import Page
from nyc_taxi.lineage.read.stale import StaleReport

HERE = Path(__file__).parent
ASSETS = HERE / "assets"
OWNED = (
    "index.html",
    "evolution.html",
    "catalog.html",
    "stale.html",
    "backtests.html",
    "graph.svg",
    "data.js",
)  # what a rebuild replaces
OWNED_DIRS = ("assets", "datasets", "jobs", "runs", "cards")
XML_PROLOGUE = '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n'


def default_dir(settings: Settings) -> Path:
    return settings.lineage_dir / "site"


def build_site(settings: Settings, out_dir: Path | None = None, stale: StaleReport | None = None) -> Path:
    """Read the records and write the site into ``out_dir``; the path of its index.html. ``stale``: the
    staleness report to show (default: from the records and the tables, no source asked)."""
    return write_site(collect(settings, stale), out_dir or default_dir(settings))


def write_site(data: SiteData, out_dir: Path) -> Path:
    """Write the site for already collected facts (the tests hand in synthetic ones)."""
    svgs = draw(data)
    _clear(out_dir)
    built_from = {"nodes": len(data.graph.nodes), "edges": len(data.graph.edges), "runs": len(data.runs.by_id)}
    for page in Pages(data, svgs).all():
        _write(out_dir / page.path, _html(page, built_from))
    _write(out_dir / "graph.svg", XML_PROLOGUE + svgs["graph"] + "\n")
    _write(out_dir / "data.js", "window.LINEAGE = " + json.dumps(site_data(data), sort_keys=True) + ";\n")
    shutil.copytree(ASSETS, out_dir / "assets")
    _write(out_dir / "assets" / "tools.css", tool_css())
    for run_id, card in data.cards.items():
        (out_dir / card_path(run_id)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(card, out_dir / card_path(run_id))
    return out_dir / "index.html"


def _clear(out_dir: Path) -> None:
    """Remove what an earlier build wrote (and only that: ``--out`` may name a folder with other files)."""
    for name in OWNED:
        (out_dir / name).unlink(missing_ok=True)
    for name in OWNED_DIRS:
        shutil.rmtree(out_dir / name, ignore_errors=True)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _html(page: Page, built_from: dict) -> str:
    """A page from its template, in the layout every page shares (``templates/layout.html``)."""
    return render(page.template, title=page.title, root=page.root, kind=page.kind, built_from=built_from, **page.facts)


# ---- pictures ----------------------------------------------------------------------------------------


def _tool_of(data: SiteData):
    """A dataset's or a job's tool, by name (the column graphs colour boxes and edges with it)."""
    tools = {n.name: n.tool for n in data.graph.nodes.values()}
    tools.update({f.node.name: f.node.tool for f in data.datasets.values()})
    orchestrators = {p.name: p.orchestrator.capitalize() for p in PIPELINES.values()}  # airflow -> Airflow
    return lambda name: tools.get(name) or orchestrators.get(name.split(".", 1)[0], "")


def _pipeline_neighbourhood(graph: LineageGraph, pipeline: str) -> LineageGraph:
    """A DAG's or flow's jobs with their parents and children: the DAG's or flow's mini-map."""
    around = LineageGraph()
    for urn, node in graph.nodes.items():
        if node.kind == "job" and node.pipeline == pipeline:
            near = drawing.neighbourhood(graph, urn)
            around.nodes.update(near.nodes)
            around.edges |= near.edges
    return around


def stale_nodes(data: SiteData) -> dict[str, str]:
    """Dataset name -> why its current version is stale (a stale landed month, raw month, or run's output)."""
    found: dict[str, list[str]] = {}
    for item in data.stale.items:
        for name in [item.dataset] if item.dataset else list(item.outputs):
            found.setdefault(name, []).append(f"{item.name}: {item.reason}")
    return {name: "\n".join(reasons) for name, reasons in found.items()}


def draw(data: SiteData) -> dict[str, str]:
    """Every picture of the site, by key: ``graph``, ``evolution``, ``mini:<name>``, ``column:<dataset>.<column>``."""
    graph = data.graph

    def below_root(node) -> str:  # the mini-maps are on the pages one folder down
        return "../" + node_path(node)

    def dataset_below_root(name: str) -> str:
        return "../" + dataset_path(name)

    dots = {
        "graph": drawing.lineage(graph, page_of=node_path, stale=stale_nodes(data)),
        "evolution": drawing.lineage(data.evolution.union, page_of=node_path, with_state=False, prefix="ev-"),
    }
    for node in graph.nodes.values():
        dots["mini:" + node.name] = drawing.lineage(
            drawing.neighbourhood(graph, node.urn), page_of=below_root, prefix="m-", compact=True, rankdir="LR"
        )
    for pipeline in sorted({n.pipeline for n in graph.nodes.values() if n.pipeline}):
        dots["mini:" + pipeline] = drawing.lineage(
            _pipeline_neighbourhood(graph, pipeline), page_of=below_root, prefix="m-", compact=True, rankdir="LR"
        )
    tool_of = _tool_of(data)
    for facts in data.datasets.values():
        for column, step in facts.columns.items():
            dots[f"column:{facts.node.name}.{column}"] = drawing.column_graph(
                step,
                tool_of=tool_of,
                page_of=dataset_below_root,
                prefix=column_anchor(column) + "-",
            )
    return dict(zip(dots, drawing.render(list(dots.values())), strict=True))


# ---- what the scripts read ------------------------------------------------------------------------------


def _graph_json(graph: LineageGraph, prefix: str = "") -> dict:
    urns = sorted(graph.nodes)
    index = {urn: i for i, urn in enumerate(urns)}
    nodes = []
    for urn in urns:
        node = graph.nodes[urn]
        nodes.append(
            {
                "id": prefix + drawing.node_id(urn),
                "urn": urn,
                "name": node.name,
                "kind": node.kind,
                "tool": node.tool,
                "label": node.label,
                "page": node_path(node),
                "state": node.last_run.status if node.last_run else None,
            }
        )
    edges = [[index[e.source], index[e.target], e.kind.value, drawing.edge_id(e, prefix)] for e in _in_order(graph)]
    return {"nodes": nodes, "edges": edges}


def _in_order(graph: LineageGraph) -> list[Edge]:
    """The edges in the order data.js lists them (the scripts refer to an edge by its position)."""
    return sorted(graph.edges, key=lambda e: e.as_list())


def _search(data: SiteData) -> list[dict]:
    """What the search box finds: datasets and jobs (by name, URN and every other identity), columns, runs."""
    entries = []
    for facts in data.datasets.values():
        found = facts.identity
        also = [facts.node.urn] + ([found.ol_name, found.asset_uri or "", found.ol_namespace] if found else [])
        entries.append(
            {
                "n": facts.node.name,
                "k": facts.node.label,
                "p": dataset_path(facts.node.name),
                "d": getattr(facts.declared, "description", ""),
                "a": [a for a in also if a],
            }
        )
        for column in getattr(facts.declared, "columns", ()) or ():
            entries.append(
                {
                    "n": f"{facts.node.name}.{column.name}",
                    "k": "column",
                    "p": dataset_path(facts.node.name) + "#" + column_anchor(column.name),
                    "d": column.doc,
                    "a": [],
                }
            )
    for job in data.jobs.values():
        entries.append(
            {
                "n": job.name,
                "k": job.node.label if job.node else "DAG or flow",
                "p": job_path(job.name),
                "d": getattr(job.declared, "description", ""),
                "a": [job.node.urn] if job.node else [],
            }
        )
    for run in data.runs:
        entries.append(
            {
                "n": run.label or run.run_id,
                "k": f"run of {run.job}",
                "p": run_path(run.run_id),
                "d": run.state,
                "a": [run.run_id],
            }
        )
    return entries


def _default_pair(data: SiteData) -> list[str]:
    """The two runs the evolution view opens with: the last two runs of the Metaflow flow, else of
    whichever DAG or flow ran last (and ran twice)."""
    runs = data.evolution.pipeline_runs
    flows = {p.name for p in PIPELINES.values() if p.orchestrator == "metaflow"}
    for pool in ([r for r in runs if r.job in flows], runs):
        same = [r for r in pool if pool and r.job == pool[-1].job]
        if len(same) >= 2:
            return [r.run_id for r in same[-2:]]
    return [r.run_id for r in runs[-2:]]


def _evolution_json(data: SiteData) -> dict:
    evolution = data.evolution
    drawn = _graph_json(evolution.union, prefix="ev-")
    position = {edge: i for i, edge in enumerate(_in_order(evolution.union))}
    return {
        **drawn,
        "states": [
            {"at": at, "edges": sorted(position[edge] for edge in edges)}
            for at, edges in zip(evolution.moments, evolution.states, strict=True)
        ],
        "runs": [
            {
                "id": run.run_id,
                "job": run.job,
                "name": run.label or run.run_id,
                "at": run.ended or run.started,
                "state": evolution.state_at(run.ended or run.started or ""),
                "parameters": {k: v for k, v in run.parameters.items() if k not in ("try_number", "nominal_time")},
            }
            for run in evolution.pipeline_runs
        ],
        "defaults": _default_pair(data),
    }


def site_data(data: SiteData) -> dict:
    return {
        "graph": _graph_json(data.graph),
        "search": _search(data),
        "evolution": _evolution_json(data),
    }


def tool_css() -> str:
    """The tools' colours for the pages (badges, swatches), from the one place they are defined."""
    rules = [f".{kind_class(tool)}{{background:{colour};}}" for tool, colour in sorted(drawing.STYLE.items())]
    rules += [
        f".{kind_class('state-' + state)}{{background:{colour};color:#fff;}}"
        for state, colour in sorted(drawing.STATE_COLOURS.items())
    ]
    return "/* generated from drawing.STYLE and drawing.STATE_COLOURS */\n" + "\n".join(rules) + "\n"


__all__ = ["build_site", "default_dir", "draw", "site_data", "write_site"]
