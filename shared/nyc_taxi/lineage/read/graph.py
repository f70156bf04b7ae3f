"""The cross-tool lineage graph: nodes, typed edges, and walking them. No reading, no rendering
(``lite.py`` builds a graph from DataHub Lite; ``render.py`` and ``site/`` show one)."""

from __future__ import annotations

import datetime as dt
from collections import deque
from dataclasses import asdict, dataclass, field
from enum import StrEnum


class EdgeKind(StrEnum):
    """How two nodes are linked. Data flows along READ, WRITE, TRAINED and USED; THEN is task or step
    order inside a DAG or flow; STARTS is one tool starting another (an Airflow task starting a flow)."""

    READ = "read"
    WRITE = "write"
    TRAINED = "trained"
    USED = "used"
    THEN = "then"
    STARTS = "starts"

    def verb(self, direction: str) -> str:
        """How the tree says it, seen from the node it starts at."""
        downstream = {
            "read": "read by",
            "write": "writes",
            "trained": "trains",
            "used": "used by",
            "then": "followed by",
            "starts": "starts",
        }
        upstream = {
            "read": "reads",
            "write": "written by",
            "trained": "trained by",
            "used": "uses",
            "then": "runs after",
            "starts": "started by",
        }
        return (downstream if direction == "downstream" else upstream)[self.value]

    @property
    def carries_data(self) -> bool:
        return self in (EdgeKind.READ, EdgeKind.WRITE, EdgeKind.TRAINED, EdgeKind.USED)


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: EdgeKind

    def as_list(self) -> list[str]:
        return [self.source, self.target, self.kind.value]


@dataclass
class Run:
    """One run of a job, as DataHub's DataProcessInstance records it."""

    urn: str
    name: str
    status: str  # success | failure | skipped | running
    started: int | None
    ended: int | None
    attempt: int | None = None

    @property
    def seconds(self) -> float | None:
        return (self.ended - self.started) / 1000 if self.started and self.ended else None


@dataclass
class Freshness:
    """The last write a dataset's Operation aspect records."""

    at: int
    actor: str | None
    snapshot_id: str | None
    rows: int | None


@dataclass
class Node:
    urn: str
    kind: str  # dataset | job | model
    name: str  # as users type it: registry name, "dag.task", "Flow.step"
    tool: str  # Airflow | Metaflow | Iceberg | files | source
    label: str  # what it is: "Airflow task", "Iceberg table", ...
    pipeline: str | None = None  # the DAG / flow a job belongs to
    in_registry: bool = False
    last_run: Run | None = None
    freshness: Freshness | None = None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class LineageGraph:
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: set[Edge] = field(default_factory=set)

    def add(self, source: str, target: str, kind: EdgeKind) -> None:
        self.edges.add(Edge(source, target, kind))

    def resolve(self, name: str) -> str:
        """A node's URN from what a user types: a URN, a registry name, "dag.task" / "Flow.step"."""
        if name in self.nodes:
            return name
        matches = [n.urn for n in self.nodes.values() if n.name.lower() == name.lower()]
        if len(matches) == 1:
            return matches[0]
        close = sorted(n.name for n in self.nodes.values() if name.lower() in n.name.lower())
        hint = (
            f"; did you mean: {', '.join(close)}"
            if close
            else f"; known: {', '.join(sorted(n.name for n in self.nodes.values()))}"
        )
        raise KeyError(f"no dataset or job named {name!r} in the lineage store{hint}")

    def neighbours(self, urn: str, direction: str) -> list[tuple[str, EdgeKind]]:
        """(node, edge kind) one step upstream or downstream, datasets first, then by name."""
        if direction == "upstream":
            found = [(e.source, e.kind) for e in self.edges if e.target == urn]
        else:
            found = [(e.target, e.kind) for e in self.edges if e.source == urn]
        return sorted(found, key=lambda item: (self.nodes[item[0]].kind != "dataset", self.nodes[item[0]].name))

    def reachable(self, urn: str, direction: str, depth: int | None = None) -> set[Edge]:
        """Every edge met walking upstream or downstream from ``urn`` (to ``depth`` steps), across tools."""
        edges, todo, seen = set(), deque([(urn, 0)]), {urn}
        while todo:
            current, steps = todo.popleft()
            if depth is not None and steps >= depth:
                continue
            for other, kind in self.neighbours(current, direction):
                edges.add(Edge(other, current, kind) if direction == "upstream" else Edge(current, other, kind))
                if other not in seen:
                    seen.add(other)
                    todo.append((other, steps + 1))
        return edges

    def as_json(self, urn: str) -> dict:
        up, down = self.reachable(urn, "upstream"), self.reachable(urn, "downstream")
        involved = {urn} | {u for e in up | down for u in (e.source, e.target)}
        return {
            "subject": self.nodes[urn].as_dict(),
            "nodes": {u: self.nodes[u].as_dict() for u in sorted(involved)},
            "upstream": sorted(e.as_list() for e in up),
            "downstream": sorted(e.as_list() for e in down),
        }

    def everything_as_json(self) -> dict:
        return {
            "nodes": {u: n.as_dict() for u, n in sorted(self.nodes.items())},
            "edges": sorted(e.as_list() for e in self.edges),
        }


def when(millis: int | None) -> str:
    if not millis:
        return "?"
    return dt.datetime.fromtimestamp(millis / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
