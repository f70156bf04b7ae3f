"""The cross-tool lineage graph, read from DataHub Lite.

Nodes and edges come only from the records both tools wrote (DataHub's own aspects:
dataJobInputOutput, mlModelProperties, dataProcessInstance*, operation); the registry is used to
show datasets by the names users type, never to add nodes or edges.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from datahub.metadata.urns import DataFlowUrn, DataJobUrn, DatasetUrn, MlModelUrn, Urn

from nyc_taxi import registry
from nyc_taxi.settings import Settings, get_settings

TOOLS = {"airflow": "Airflow", "metaflow": "Metaflow"}
# edge kinds: data flows along read/write/trained/used; "then" is task/step order inside a DAG or flow
DATA_EDGES = ("read", "write", "trained", "used")


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
    """The last write a dataset's Operation aspects record."""

    at: int
    actor: str | None
    snapshot_id: str | None
    rows: int | None


@dataclass
class Node:
    urn: str
    kind: str  # dataset | job | flow | model
    name: str  # as users type it: registry name, "dag.task", "Flow.step"
    tool: str  # Airflow | Metaflow | Iceberg | files
    label: str  # what it is: "Airflow task", "Iceberg table", ...
    flow: str | None = None  # the DAG / flow a job belongs to
    in_registry: bool = False
    last_run: Run | None = None
    freshness: Freshness | None = None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class LineageGraph:
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: set[tuple[str, str, str]] = field(default_factory=set)  # (source urn, target urn, kind)

    # ---- building -----------------------------------------------------------------------
    @classmethod
    def from_lite(cls, lite, settings: Settings | None = None) -> "LineageGraph":
        settings = settings or get_settings()
        graph = cls()
        runs: dict[str, list[Run]] = defaultdict(list)
        for urn in lite.list_ids():
            entity_type = Urn.from_string(urn).entity_type
            if entity_type == "dataJob":
                graph._add_job(lite.get(urn, aspects=["dataJobInputOutput"]) or {}, urn, settings)
            elif entity_type == "mlModel":
                graph._add_model(urn, (lite.get(urn, aspects=["mlModelProperties"]) or {}).get("mlModelProperties", {}),
                                 settings)
            elif entity_type == "dataset":
                graph._dataset(urn, settings).freshness = _freshness(lite, urn)
            elif entity_type == "dataProcessInstance":
                parent, run = _run(lite, urn)
                if parent:
                    runs[parent].append(run)
        for job, job_runs in runs.items():
            if job in graph.nodes:
                graph.nodes[job].last_run = max(job_runs, key=lambda r: r.started or 0)
        return graph

    def _dataset(self, urn: str, settings: Settings) -> Node:
        if urn not in self.nodes:
            known, parsed = registry.by_urn(urn, settings), DatasetUrn.from_string(urn)
            platform = parsed.platform.split(":")[-1]
            tool, label = ("Iceberg", "Iceberg table") if platform == "iceberg" else ("files", "source files")
            self.nodes[urn] = Node(urn, "dataset", known.name if known else parsed.name,
                                   tool, label, in_registry=known is not None)
        return self.nodes[urn]

    def _job(self, urn: str) -> Node:
        if urn not in self.nodes:
            job = DataJobUrn.from_string(urn)
            flow = DataFlowUrn.from_string(str(job.get_data_flow_urn()))
            tool = TOOLS.get(flow.orchestrator, flow.orchestrator)
            kind = "task" if flow.orchestrator == "airflow" else "step"
            self.nodes[urn] = Node(urn, "job", f"{flow.flow_id}.{job.job_id}", tool, f"{tool} {kind}", flow=flow.flow_id)
        return self.nodes[urn]

    def _add_job(self, aspects: dict, urn: str, settings: Settings) -> None:
        self._job(urn)
        io = aspects.get("dataJobInputOutput", {})
        for dataset in io.get("inputDatasets", []):
            self.edges.add((self._dataset(dataset, settings).urn, urn, "read"))
        for dataset in io.get("outputDatasets", []):
            self.edges.add((urn, self._dataset(dataset, settings).urn, "write"))
        for upstream in io.get("inputDatajobs", []):
            self.edges.add((self._job(upstream).urn, urn, "then"))

    def _add_model(self, urn: str, properties: dict, settings: Settings) -> None:
        known = registry.by_urn(urn, settings)
        platform = MlModelUrn.from_string(urn).platform.split(":")[-1]
        tool = TOOLS.get(platform, platform)
        self.nodes[urn] = Node(urn, "model", known.name if known else MlModelUrn.from_string(urn).name, tool,
                               f"{tool} model", in_registry=known is not None)
        for job in properties.get("trainingJobs", []):
            self.edges.add((self._job(job).urn, urn, "trained"))
        for job in properties.get("downstreamJobs", []):
            self.edges.add((urn, self._job(job).urn, "used"))

    # ---- reading ------------------------------------------------------------------------
    def resolve(self, name: str) -> str:
        """A node's URN from what a user types: a URN, a registry name, "dag.task" / "Flow.step"."""
        if name in self.nodes:
            return name
        matches = [n.urn for n in self.nodes.values() if n.name.lower() == name.lower()]
        if len(matches) == 1:
            return matches[0]
        close = sorted(n.name for n in self.nodes.values() if name.lower() in n.name.lower())
        hint = f"; did you mean: {', '.join(close)}" if close else f"; known: {', '.join(sorted(n.name for n in self.nodes.values()))}"
        raise KeyError(f"no dataset or job named {name!r} in the lineage store{hint}")

    def neighbours(self, urn: str, direction: str) -> list[tuple[str, str]]:
        """(node, edge kind) one step upstream or downstream."""
        if direction == "upstream":
            found = [(s, k) for s, t, k in self.edges if t == urn]
        else:
            found = [(t, k) for s, t, k in self.edges if s == urn]
        return sorted(found, key=lambda item: (self.nodes[item[0]].kind != "dataset", self.nodes[item[0]].name))

    def reachable(self, urn: str, direction: str) -> set[tuple[str, str, str]]:
        """Every edge met walking upstream or downstream from ``urn``, recursively, across tools."""
        edges, todo, seen = set(), [urn], {urn}
        while todo:
            current = todo.pop()
            for other, kind in self.neighbours(current, direction):
                edges.add((other, current, kind) if direction == "upstream" else (current, other, kind))
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        return edges

    def as_json(self, urn: str) -> dict:
        up, down = self.reachable(urn, "upstream"), self.reachable(urn, "downstream")
        involved = {urn} | {u for e in up | down for u in e[:2]}
        return {"subject": self.nodes[urn].as_dict(),
                "nodes": {u: self.nodes[u].as_dict() for u in sorted(involved)},
                "upstream": [list(e) for e in sorted(up)], "downstream": [list(e) for e in sorted(down)]}

    def tree(self, urn: str) -> str:
        lines = [_describe(self.nodes[urn])]
        for direction in ("upstream", "downstream"):
            lines.append(f"{direction}:")
            shown: set[str] = set()
            self._tree_lines(urn, direction, "", shown, lines)
            if lines[-1] == f"{direction}:":
                lines.append("  (nothing recorded)")
        return "\n".join(lines)

    def _tree_lines(self, urn, direction, prefix, shown, lines) -> None:
        children = self.neighbours(urn, direction)
        for i, (child, kind) in enumerate(children):
            last = i == len(children) - 1
            verb = {"read": "read by" if direction == "downstream" else "reads",
                    "write": "writes" if direction == "downstream" else "written by",
                    "trained": "trains" if direction == "downstream" else "trained by",
                    "used": "used by" if direction == "downstream" else "uses",
                    "then": "followed by" if direction == "downstream" else "runs after"}[kind]
            repeat = child in shown
            lines.append(f"  {prefix}{'└── ' if last else '├── '}{verb} {_describe(self.nodes[child])}"
                         + (" (see above)" if repeat else ""))
            if not repeat:
                shown.add(child)
                self._tree_lines(child, direction, prefix + ("    " if last else "│   "), shown, lines)


def _when(millis: int | None) -> str:
    if not millis:
        return "?"
    return dt.datetime.fromtimestamp(millis / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _describe(node: Node) -> str:
    text = f"{node.name} [{node.label}]"
    if node.last_run:
        run = node.last_run
        took = f", {run.seconds:.1f} s" if run.seconds is not None else ""
        text += f" — last run {run.status}, started {_when(run.started)}{took}"
    if node.freshness:
        fresh = node.freshness
        text += f" — last write {_when(fresh.at)}" + (f", snapshot {fresh.snapshot_id}" if fresh.snapshot_id else "")
    if node.kind == "dataset" and not node.in_registry:
        text += " — NOT IN THE REGISTRY"
    return text


def aspect_versions(lite, urn: str, aspect: str) -> list[dict]:
    """Every stored value of an aspect, oldest first (Lite keeps versions ≥1 as history, like GMS)."""
    rows = lite._execute("SELECT metadata FROM metadata_aspect_v2 WHERE urn = ? AND aspect_name = ? AND version > 0 "
                         "ORDER BY version", [urn, aspect])
    return [json.loads(r[0]) for r in rows]


def _freshness(lite, urn: str) -> Freshness | None:
    """The newest Operation that carries a snapshot id (ours), else the newest at all (the plugin's)."""
    operations = aspect_versions(lite, urn, "operation")
    if not operations:
        return None
    ours = [o for o in operations if o.get("customProperties", {}).get("snapshot_id")]
    newest = max(ours or operations, key=lambda o: o.get("lastUpdatedTimestamp") or o["timestampMillis"])
    props = newest.get("customProperties", {})
    return Freshness(at=newest.get("lastUpdatedTimestamp") or newest["timestampMillis"], actor=props.get("actor"),
                     snapshot_id=props.get("snapshot_id"), rows=newest.get("numAffectedRows"))


def _run(lite, urn: str) -> tuple[str | None, Run]:
    aspects = lite.get(urn, aspects=["dataProcessInstanceRelationships", "dataProcessInstanceProperties",
                                     "dataProcessInstanceRunEvent"]) or {}
    parent = aspects.get("dataProcessInstanceRelationships", {}).get("parentTemplate")
    properties = aspects.get("dataProcessInstanceProperties", {})
    event = aspects.get("dataProcessInstanceRunEvent", {})
    started = properties.get("created", {}).get("time")
    if event.get("status") == "COMPLETE":
        status = (event.get("result") or {}).get("type", "UNKNOWN").lower()
        ended = event.get("timestampMillis")
    else:
        status, ended = "running", None
    return parent, Run(urn=urn, name=properties.get("name", urn), status=status, started=started, ended=ended,
                       attempt=event.get("attempt"))


def load_graph(settings: Settings | None = None, load: bool = True) -> LineageGraph:
    """Load new records into DataHub Lite, then read the graph from it."""
    from nyc_taxi.lineage.store import LineageStore

    store = LineageStore(settings)
    if load:
        store.load()
    with store.open() as lite:
        return LineageGraph.from_lite(lite, store.settings)
