"""Every graph of the site, laid out by Graphviz (dot): the whole lineage, each node's neighbourhood,
each column's lineage, the evolution. We say what is a node and an edge; dot places them.

Node and edge ids come from URNs (``node_id``, ``edge_id``), so the site's scripts find a node by its
URN, and a picture only changes when the graph does. Tool colours, shapes and edge styles are
defined here once, for the site and for the picture of the whole graph (``picture``).
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Callable

from nyc_taxi.lineage.read.columns import ColumnStep
from nyc_taxi.lineage.read.graph import Edge, EdgeKind, LineageGraph, Node

FONT = "Helvetica"
STYLE = {  # per tool: fill colour of its nodes and boxes, the same everywhere
    "Airflow": "#e3f0fc",
    "Metaflow": "#fdebd8",
    "Iceberg": "#e6f4ea",
    "files": "#f1f1f1",
    "source": "#fff6d5",
}
SHAPES = {"dataset": "cylinder", "job": "box", "model": "box3d"}
EDGE_STYLE = {
    EdgeKind.THEN: {"style": "dashed", "color": "#888888"},
    EdgeKind.TRAINED: {"color": "#b35900"},
    EdgeKind.USED: {"color": "#b35900"},
    EdgeKind.STARTS: {"style": "bold", "color": "#1f6feb"},
}


def node_id(urn: str) -> str:
    return "n" + hashlib.sha1(urn.encode()).hexdigest()[:12]  # stable, so the picture only changes with the graph


def pipeline_box(tool: str, pipeline: str, font: str = "Helvetica") -> dict:
    """The box around a DAG's tasks or a flow's steps: the same in every picture."""
    return {
        "label": f"{tool} {'DAG' if tool == 'Airflow' else 'flow'} {pipeline}",
        "style": "rounded,filled",
        "color": "#9aa0a6",
        "fillcolor": STYLE.get(tool, "#ffffff") + "80",
        "fontname": font,
        "fontsize": "12",
    }


STATE_COLOURS = {"success": "#1a7f37", "failure": "#cf222e", "running": "#0969da", "skipped": "#6e7781"}
STATE_MARKS = {"success": "✓", "failure": "✗", "running": "…", "skipped": "–"}
STALE_COLOUR = "#bc4c00"

__all__ = [
    "STALE_COLOUR",
    "STATE_COLOURS",
    "STYLE",
    "column_graph",
    "edge_id",
    "fold",
    "line_colour",
    "lineage",
    "neighbourhood",
    "node_id",
    "render",
]


def edge_id(edge: Edge, prefix: str = "") -> str:
    return prefix + "e" + hashlib.sha1(f"{edge.source} {edge.target} {edge.kind.value}".encode()).hexdigest()[:12]


def _short_name(node: Node) -> str:
    """A job inside its DAG or flow box shows its own name; the box shows the pipeline's."""
    return node.name.split(".", 1)[1] if node.kind == "job" and "." in node.name else node.name


def _label(node: Node, with_state: bool) -> str:
    """The name, then what it is and (for a job) how its last run went, on one line."""
    second = f"<font point-size='10'>{html.escape(node.label)}</font>"
    run = node.last_run
    if with_state and run:
        took = f" {run.seconds:.1f} s" if run.seconds is not None else ""
        colour = STATE_COLOURS.get(run.status, "#333333")
        mark = STATE_MARKS.get(run.status, "?")
        # no-break spaces: SVG collapses a text's leading space, and the separator would touch the kind
        second += f"<font point-size='10' color='{colour}'>&#160;·&#160;{mark} {html.escape(run.status)}{took}</font>"
    return f"<<b>{html.escape(_short_name(node))}</b><br/>{second}>"


def _node_attrs(node: Node, page: str | None, with_state: bool, prefix: str, stale: str | None = None) -> dict:
    label = _label(node, with_state)
    if stale:  # a badge under the name: what it holds was computed from versions since superseded
        label = label[:-1] + f"<br/><font point-size='10' color='{STALE_COLOUR}'><b>⚠ stale</b></font>>"
    attrs = {
        "label": label,
        "shape": SHAPES.get(node.kind, "box"),
        "fillcolor": STYLE.get(node.tool, "#ffffff"),
        "tooltip": node.urn + (f"\nstale: {stale}" if stale else ""),
        "id": prefix + node_id(node.urn),
    }
    if with_state and node.last_run:  # the last run's state, at a glance: the border
        attrs.update(color=STATE_COLOURS.get(node.last_run.status, "#333333"), penwidth="2")
    if stale:
        attrs["class"] = "stale"
    if page:
        attrs["URL"] = page
    return attrs


def lineage(
    graph: LineageGraph,
    *,
    page_of: Callable[[Node], str | None] = lambda node: None,
    with_state: bool = True,
    prefix: str = "",
    title: str | None = None,
    compact: bool = False,
    rankdir: str = "TB",
    stale: dict[str, str] | None = None,
):
    """The graph in Graphviz: jobs in a box per DAG or flow, datasets and models between them. Top to
    bottom by default: the whole graph is then about as wide as a screen, where left to right it is
    twice as wide (the chains from source file to forecast are long, the graph is narrow). ``stale``: node
    name -> why it is stale, for a badge."""
    import graphviz

    stale = stale or {}

    dot = graphviz.Digraph(
        "lineage",
        graph_attr={
            "rankdir": rankdir,
            "fontname": FONT,
            "nodesep": "0.2",
            "ranksep": "0.3" if compact else "0.35",
            "bgcolor": "transparent",
            "id": prefix + "graph",
            **({"label": title, "labelloc": "t", "fontsize": "16"} if title else {}),
        },
        node_attr={
            "fontname": FONT,
            "fontsize": "11",
            "style": "filled,rounded",
            "penwidth": "1",
            "margin": "0.1,0.04",
        },
        edge_attr={"color": "#4a4a4a", "arrowsize": "0.7"},
    )
    boxes: dict[str | None, list[Node]] = {}
    for node in graph.nodes.values():
        boxes.setdefault(node.pipeline if node.kind == "job" else None, []).append(node)
    for pipeline, nodes in sorted(boxes.items(), key=lambda item: item[0] or ""):
        nodes = sorted(nodes, key=lambda n: n.name)
        if pipeline is None:
            for node in nodes:
                dot.node(
                    node_id(node.urn), **_node_attrs(node, page_of(node), with_state, prefix, stale.get(node.name))
                )
            continue
        with dot.subgraph(name=f"cluster_{pipeline}") as box:
            box.attr(**pipeline_box(nodes[0].tool, pipeline, FONT), id=prefix + "box_" + re.sub(r"\W", "_", pipeline))
            for node in nodes:
                box.node(
                    node_id(node.urn), **_node_attrs(node, page_of(node), with_state, prefix, stale.get(node.name))
                )
    for edge in sorted(graph.edges, key=lambda e: e.as_list()):
        style = EDGE_STYLE.get(edge.kind, {})
        dot.edge(
            node_id(edge.source),
            node_id(edge.target),
            id=edge_id(edge, prefix),
            tooltip=f"{graph.nodes[edge.source].name} → {graph.nodes[edge.target].name} ({edge.kind.value})",
            **style,
        )
    return dot


def neighbourhood(graph: LineageGraph, urn: str) -> LineageGraph:
    """The node, its parents and its children, and the edges between them (a page's mini-map)."""
    edges = graph.reachable(urn, "upstream", depth=1) | graph.reachable(urn, "downstream", depth=1)
    near = {urn} | {u for e in edges for u in (e.source, e.target)}
    around = LineageGraph({u: graph.nodes[u] for u in near})
    around.edges = {e for e in graph.edges if e.source in near and e.target in near}
    return around


# ---- column lineage -------------------------------------------------------------------------------


def fold(columns: list[str]) -> str:
    """``day1…day31, month`` for a group of columns: numbered runs folded, the rest listed."""
    numbered: dict[str, list[int]] = {}
    plain = []
    for column in columns:
        match = re.fullmatch(r"(\D+)(\d+)", column)
        if match:
            numbered.setdefault(match[1], []).append(int(match[2]))
        else:
            plain.append(column)
    parts = []
    for stem, numbers in sorted(numbered.items()):
        numbers.sort()
        contiguous = numbers == list(range(numbers[0], numbers[-1] + 1))
        if len(numbers) > 2 and contiguous:
            parts.append(f"{stem}{numbers[0]}…{stem}{numbers[-1]}")
        else:
            parts += [f"{stem}{n}" for n in numbers]
    return ", ".join(parts + sorted(plain))


def _column_edges(root: ColumnStep) -> dict[tuple[str, str], dict[tuple[str, str], set[tuple[str, str]]]]:
    """(dataset, column) -> {upstream (dataset, column): {(job, transformation)}}, from the tree."""
    edges: dict = {}

    def walk(step: ColumnStep) -> None:
        downstream = edges.setdefault((step.dataset, step.column), {})
        for up in step.upstream:
            downstream.setdefault((up.dataset, up.column), set()).add((up.via or "", up.transformation or "IDENTITY"))
            walk(up)

    walk(root)
    return edges


def _column_groups(edges: dict, root: tuple[str, str]) -> dict[tuple[str, str], str]:
    """(dataset, column) -> its group. Columns of one dataset are one box when they are linked the same
    way, by the same jobs, to the same groups up- and downstream (NOAA's day1 … day31 would be 31 rows
    otherwise): partition refinement, starting from one group per dataset (the column asked about
    alone), splitting until no group splits any more."""
    links: dict[tuple[str, str], set] = {}
    for downstream, ups in edges.items():
        for up, via in ups.items():
            links.setdefault(downstream, set()).update(("up", up, v) for v in via)
            links.setdefault(up, set()).update(("down", downstream, v) for v in via)
    block = {column: repr((column[0], column == root)) for column in links or {root: set()}}
    while True:
        signature = {
            column: repr((block[column], sorted((side, block[other], v) for side, other, v in links.get(column, ()))))
            for column in block
        }
        if len(set(signature.values())) == len(set(block.values())):
            break
        block = signature
    members: dict[str, list[tuple[str, str]]] = {}
    for column, key in block.items():
        members.setdefault(key, []).append(column)
    return {
        column: "g" + hashlib.sha1(repr(sorted(group)).encode()).hexdigest()[:10]
        for group in members.values()
        for column in group
    }


def column_graph(
    root: ColumnStep,
    *,
    tool_of: Callable[[str], str],
    page_of: Callable[[str], str | None],
    prefix: str,
):
    """One column's lineage: a box per dataset in its tool's colour, a row per column (or group of
    alike columns), an edge per job that computed a column from another, in the job's tool colour.
    ``tool_of`` and ``page_of`` take a dataset's or a job's name."""
    import graphviz

    edges = _column_edges(root)
    group = _column_groups(edges, (root.dataset, root.column))
    members: dict[str, list[tuple[str, str]]] = {}
    for column, key in group.items():
        members.setdefault(key, []).append(column)
    dot = graphviz.Digraph(
        "columns",
        graph_attr={"rankdir": "LR", "fontname": FONT, "nodesep": "0.15", "ranksep": "0.6", "bgcolor": "transparent"},
        node_attr={"fontname": FONT, "fontsize": "11", "shape": "box", "style": "filled,rounded", "height": "0.3"},
        edge_attr={"arrowsize": "0.6", "fontname": FONT, "fontsize": "9"},
    )
    by_dataset: dict[str, list[str]] = {}
    for key, columns in members.items():
        by_dataset.setdefault(columns[0][0], []).append(key)
    for dataset, keys in sorted(by_dataset.items()):
        with dot.subgraph(name="cluster_" + re.sub(r"\W", "_", dataset)) as box:
            box.attr(
                label=dataset,
                style="rounded,filled",
                color="#9aa0a6",
                fillcolor=STYLE.get(tool_of(dataset), "#ffffff"),
                fontname=FONT,
                fontsize="11",
            )
            if page := page_of(dataset):
                box.attr(URL=page)
            for key in sorted(keys, key=lambda k: fold([c for _, c in members[k]])):
                names = fold([c for _, c in members[key]])
                is_root = (root.dataset, root.column) in members[key]
                box.node(
                    key,
                    label=names,
                    id=prefix + key,
                    tooltip=f"{dataset}: {names}",
                    fillcolor="#fff3b0" if is_root else "#ffffff",
                    penwidth="2" if is_root else "1",
                )
    drawn = set()
    for downstream, ups in sorted(edges.items()):
        for up, via in sorted(ups.items()):
            for job, transformation in sorted(via):
                key = (group[up], group[downstream], job)
                if key in drawn:
                    continue
                drawn.add(key)
                dot.edge(
                    group[up],
                    group[downstream],
                    color=line_colour(STYLE.get(tool_of(job), "#888888")),
                    penwidth="1.5",
                    tooltip=f"{job}: {transformation.lower()}",
                    id=prefix + "c" + hashlib.sha1(repr(key).encode()).hexdigest()[:10],
                )
    return dot


def line_colour(fill: str) -> str:
    """A tool's fill colour made strong enough for a line: the same hue, saturated and darker."""
    import colorsys

    red, green, blue = (int(fill[i : i + 2], 16) / 255 for i in (1, 3, 5))
    hue, _, saturation = colorsys.rgb_to_hls(red, green, blue)
    strong = colorsys.hls_to_rgb(hue, 0.38, 0.75 if saturation > 0.1 else 0)  # a grey stays grey
    return "#{:02x}{:02x}{:02x}".format(*(round(c * 255) for c in strong))


# ---- rendering ----------------------------------------------------------------------------------------


def render(dots: list) -> list[str]:
    """Lay out many graphs with one run of dot (one process, not one per graph); each SVG without its
    XML prologue, ready to inline in a page."""
    import graphviz

    if not dots:
        return []
    source = "\n".join(dot.source for dot in dots)
    output = graphviz.pipe("dot", "svg", source.encode()).decode()
    svgs = [chunk[chunk.index("<svg") :].strip() for chunk in output.split("<?xml")[1:]]
    assert len(svgs) == len(dots), f"dot drew {len(svgs)} pictures for {len(dots)} graphs"
    return svgs
