"""The whole lineage graph as a picture of its own, outside the site: an SVG laid out by Graphviz, and a
page with the SVG inline and the node list (`bash run lineage --graph`, the demo's picture). Drawn as
the site draws its graph (``drawing.lineage``), without the runs' states.
"""

from __future__ import annotations

import html
from pathlib import Path

from nyc_taxi.lineage.read.graph import LineageGraph
from nyc_taxi.lineage.read.site.drawing import lineage


def write_picture(graph: LineageGraph, out_dir: Path, stem: str = "lineage") -> tuple[Path, Path]:
    """Write ``<stem>.svg`` and ``<stem>.html`` (the SVG inline, plus the node list) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    dot = lineage(graph, with_state=False, title="NYC taxi: cross-tool lineage", rankdir="LR")
    svg = dot.pipe(format="svg").decode()
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
