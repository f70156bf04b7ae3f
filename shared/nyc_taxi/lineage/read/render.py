"""The lineage graph as text: a tree upstream and downstream of one node, each node with its tool,
its last run or its last write."""

from __future__ import annotations

from nyc_taxi.lineage.read.graph import LineageGraph, Node, when


def describe(node: Node) -> str:
    text = f"{node.name} [{node.label}]"
    if node.last_run:
        run = node.last_run
        took = f", {run.seconds:.1f} s" if run.seconds is not None else ""
        text += f" — last run {run.status}, started {when(run.started)}{took}"
    if node.freshness:
        fresh = node.freshness
        text += f" — last write {when(fresh.at)}" + (f", snapshot {fresh.snapshot_id}" if fresh.snapshot_id else "")
    if node.kind in ("dataset", "model") and not node.in_registry:
        text += " — NOT IN THE REGISTRY"
    return text


def tree(graph: LineageGraph, urn: str) -> str:
    lines = [describe(graph.nodes[urn])]
    for direction in ("upstream", "downstream"):
        lines.append(f"{direction}:")
        _branch(graph, urn, direction, "", set(), lines)
        if lines[-1] == f"{direction}:":
            lines.append("  (nothing recorded)")
    return "\n".join(lines)


def _branch(graph: LineageGraph, urn: str, direction: str, prefix: str, shown: set[str], lines: list[str]) -> None:
    children = graph.neighbours(urn, direction)
    for i, (child, kind) in enumerate(children):
        last = i == len(children) - 1
        repeat = child in shown
        lines.append(
            f"  {prefix}{'└── ' if last else '├── '}{kind.verb(direction)} {describe(graph.nodes[child])}"
            + (" (see above)" if repeat else "")
        )
        if not repeat:
            shown.add(child)
            _branch(graph, child, direction, prefix + ("    " if last else "│   "), shown, lines)


def summary(graph: LineageGraph) -> str:
    from collections import Counter

    counts = Counter(n.label for n in graph.nodes.values())
    return f"{len(graph.nodes)} nodes, {len(graph.edges)} edges: " + ", ".join(
        f"{v} {k}" for k, v in sorted(counts.items())
    )
