"""The lineage graph as a picture: Graphviz lays it out (dot), we only say what is a node and an edge.

Jobs sit inside a box per Airflow DAG / Metaflow flow; datasets and the model between them. Every
node and edge comes from the graph read out of DataHub Lite.
"""

from __future__ import annotations

import hashlib
import html
from pathlib import Path

from nyc_taxi.lineage.read.graph import EdgeKind, LineageGraph

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


def to_dot(graph: LineageGraph, title: str = "NYC taxi: cross-tool lineage"):
    import graphviz

    dot = graphviz.Digraph(
        "lineage",
        graph_attr={
            "rankdir": "LR",
            "fontname": "Helvetica",
            "label": title,
            "labelloc": "t",
            "fontsize": "18",
            "nodesep": "0.25",
            "ranksep": "0.45",
        },
        node_attr={"fontname": "Helvetica", "fontsize": "11", "style": "filled,rounded", "penwidth": "1"},
        edge_attr={"color": "#4a4a4a", "arrowsize": "0.7"},
    )
    flows: dict[str, list] = {}
    for node in graph.nodes.values():
        (flows.setdefault(node.pipeline, []) if node.kind == "job" else flows.setdefault(None, [])).append(node)
    for flow, nodes in sorted(flows.items(), key=lambda item: item[0] or ""):
        if flow is not None:
            with dot.subgraph(name=f"cluster_{flow}") as box:
                box.attr(**pipeline_box(nodes[0].tool, flow))
                for node in sorted(nodes, key=lambda n: n.name):
                    box.node(node_id(node.urn), **_node_attrs(node))
            continue
        for node in sorted(nodes, key=lambda n: n.name):
            dot.node(node_id(node.urn), **_node_attrs(node))
    for edge in sorted(graph.edges, key=lambda e: e.as_list()):
        dot.edge(node_id(edge.source), node_id(edge.target), **EDGE_STYLE.get(edge.kind, {}))
    return dot


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


def _node_attrs(node) -> dict:
    name = node.name.split(".", 1)[1] if node.kind == "job" else node.name
    label = f"<<b>{html.escape(name)}</b><br/><font point-size='9'>{html.escape(node.label)}</font>>"
    return {
        "label": label,
        "shape": SHAPES[node.kind],
        "fillcolor": STYLE.get(node.tool, "#ffffff"),
        "tooltip": node.urn,
        "id": node.urn,
    }


def write_picture(graph: LineageGraph, out_dir: Path, stem: str = "lineage") -> tuple[Path, Path]:
    """Write ``<stem>.svg`` and ``<stem>.html`` (the SVG inline, plus the node list) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    svg = to_dot(graph).pipe(format="svg").decode()
    svg_path, html_path = out_dir / f"{stem}.svg", out_dir / f"{stem}.html"
    svg_path.write_text(svg)
    rows = "\n".join(
        f"<tr><td>{html.escape(n.name)}</td><td>{html.escape(n.label)}</td><td><code>{html.escape(n.urn)}</code></td></tr>"
        for n in sorted(graph.nodes.values(), key=lambda n: (n.kind, n.name))
    )
    svg_body = svg[svg.index("<svg") :]
    html_path.write_text(f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>NYC taxi: cross-tool lineage</title>
<style>body{{font-family:Helvetica,Arial,sans-serif;margin:2em}} table{{border-collapse:collapse}}
td{{border-top:1px solid #ddd;padding:4px 10px;font-size:13px}} svg{{max-width:100%;height:auto}}</style></head>
<body><h1>NYC taxi: cross-tool lineage</h1>
<p>Airflow and Metaflow records, loaded into DataHub Lite; {len(graph.nodes)} nodes, {len(graph.edges)} edges.
Dashed edges: task/step order. Hover a node for its URN.</p>
{svg_body}
<h2>Nodes</h2><table>{rows}</table></body></html>
""")
    return svg_path, html_path
