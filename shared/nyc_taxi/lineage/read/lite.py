"""Build the lineage graph from DataHub Lite, through its public API (``list_ids``, ``get``).

Nodes and edges come only from the records both tools wrote, as DataHub stores them:
dataJobInputOutput (reads, writes, task order), mlModelProperties (the jobs that train and use a
model), dataProcessInstance* (each job's last run; a flow run's parent run: the Airflow task that
started it) and operation (each dataset's last write and Iceberg snapshot id). The registry is used
to show datasets by the names users type, never to add a node or an edge.
"""

from __future__ import annotations

from collections import defaultdict

from nyc_taxi.core import registry
from nyc_taxi.core.datasets import LandedFiles, Model, PublishedFiles, Table
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.lineage.read.graph import EdgeKind, Freshness, LineageGraph, Node, Run

TOOLS = {"airflow": "Airflow", "metaflow": "Metaflow"}
DATASET_KINDS = {
    PublishedFiles: ("source", "published files"),
    LandedFiles: ("files", "landed files"),
    Table: ("Iceberg", "Iceberg table"),
    Model: ("Metaflow", "Metaflow model"),
}
RUN_ASPECTS = ["dataProcessInstanceRelationships", "dataProcessInstanceProperties", "dataProcessInstanceRunEvent"]


def dataset_node(urn: str, settings: Settings) -> Node:
    """A dataset or model node, named as the registry names it (or as DataHub does, if unknown)."""
    from datahub.metadata.urns import DatasetUrn, MlModelUrn, Urn

    known = registry.by_urn(urn, settings)
    parsed = Urn.from_string(urn)
    fallback = parsed.name if isinstance(parsed, (DatasetUrn, MlModelUrn)) else urn
    tool, label = DATASET_KINDS.get(type(known), ("files", f"{parsed.entity_type}"))
    kind = "model" if isinstance(known, Model) or parsed.entity_type == "mlModel" else "dataset"
    return Node(urn, kind, known.name if known else fallback, tool, label, in_registry=known is not None)


def job_node(urn: str) -> Node:
    """A task or step node, named ``<dag>.<task>`` / ``<Flow>.<step>``."""
    from datahub.metadata.urns import DataFlowUrn, DataJobUrn

    job = DataJobUrn.from_string(urn)
    flow = DataFlowUrn.from_string(str(job.get_data_flow_urn()))
    tool = TOOLS.get(flow.orchestrator, flow.orchestrator)
    kind = "task" if flow.orchestrator == "airflow" else "step"
    return Node(urn, "job", f"{flow.flow_id}.{job.job_id}", tool, f"{tool} {kind}", pipeline=flow.flow_id)


class _Builder:
    def __init__(self, lite, settings: Settings):
        self.lite, self.settings, self.graph = lite, settings, LineageGraph()

    def dataset(self, urn: str) -> Node:
        if urn not in self.graph.nodes:
            self.graph.nodes[urn] = dataset_node(urn, self.settings)
        return self.graph.nodes[urn]

    def job(self, urn: str) -> Node:
        if urn not in self.graph.nodes:
            self.graph.nodes[urn] = job_node(urn)
        return self.graph.nodes[urn]

    def add_job(self, urn: str) -> None:
        self.job(urn)
        io = (self.lite.get(urn, aspects=["dataJobInputOutput"]) or {}).get("dataJobInputOutput", {})
        for dataset in io.get("inputDatasets", []):
            self.graph.add(self.dataset(dataset).urn, urn, EdgeKind.READ)
        for dataset in io.get("outputDatasets", []):
            self.graph.add(urn, self.dataset(dataset).urn, EdgeKind.WRITE)
        for upstream in io.get("inputDatajobs", []):
            self.graph.add(self.job(upstream).urn, urn, EdgeKind.THEN)

    def add_model(self, urn: str) -> None:
        properties = (self.lite.get(urn, aspects=["mlModelProperties"]) or {}).get("mlModelProperties", {})
        self.dataset(urn)
        for job in properties.get("trainingJobs", []):
            self.graph.add(self.job(job).urn, urn, EdgeKind.TRAINED)
        for job in properties.get("downstreamJobs", []):
            self.graph.add(urn, self.job(job).urn, EdgeKind.USED)

    def freshness(self, urn: str) -> Freshness | None:
        operation = (self.lite.get(urn, aspects=["operation"]) or {}).get("operation")
        if not operation:
            return None
        props = operation.get("customProperties", {})
        return Freshness(
            at=operation.get("lastUpdatedTimestamp") or operation["timestampMillis"],
            actor=props.get("actor"),
            snapshot_id=props.get("snapshot_id"),
            rows=operation.get("numAffectedRows"),
        )

    def run(self, urn: str) -> tuple[dict, Run]:
        aspects = self.lite.get(urn, aspects=RUN_ASPECTS) or {}
        relationships = aspects.get("dataProcessInstanceRelationships", {})
        properties = aspects.get("dataProcessInstanceProperties", {})
        event = aspects.get("dataProcessInstanceRunEvent", {})
        started = properties.get("created", {}).get("time")
        if event.get("status") == "COMPLETE":
            status = (event.get("result") or {}).get("type", "UNKNOWN").lower()
            ended = event.get("timestampMillis")
        else:
            status, ended = "running", None
        return relationships, Run(
            urn=urn,
            name=properties.get("name", urn),
            status=status,
            started=started,
            ended=ended,
            attempt=event.get("attempt"),
        )

    def build(self) -> LineageGraph:
        from datahub.metadata.urns import Urn

        runs: dict[str, list[Run]] = defaultdict(list)
        run_relationships: dict[str, dict] = {}
        for urn in self.lite.list_ids():
            entity = Urn.from_string(urn).entity_type
            if entity == "dataJob":
                self.add_job(urn)
            elif entity == "mlModel":
                self.add_model(urn)
            elif entity == "dataset":
                self.dataset(urn).freshness = self.freshness(urn)
            elif entity == "dataProcessInstance":
                relationships, run = self.run(urn)
                run_relationships[urn] = relationships
                if relationships.get("parentTemplate"):
                    runs[relationships["parentTemplate"]].append(run)
        for job, job_runs in runs.items():
            if job in self.graph.nodes:
                self.graph.nodes[job].last_run = max(job_runs, key=lambda r: r.started or 0)
        self._starts(run_relationships)
        return self.graph

    def _starts(self, run_relationships: dict[str, dict]) -> None:
        """A flow run whose parent is another tool's task run: that task starts the flow's first job."""
        from datahub.metadata.urns import DataFlowUrn, Urn

        for relationships in run_relationships.values():
            template, parent = relationships.get("parentTemplate"), relationships.get("parentInstance")
            if not (template and parent and Urn.from_string(template).entity_type == "dataFlow"):
                continue
            starter = run_relationships.get(parent, {}).get("parentTemplate")
            if not starter or starter not in self.graph.nodes:
                continue
            flow_id = DataFlowUrn.from_string(template).flow_id
            jobs = {u for u, n in self.graph.nodes.items() if n.kind == "job" and n.pipeline == flow_id}
            followers = {e.target for e in self.graph.edges if e.kind == EdgeKind.THEN}
            for first in jobs - followers:
                self.graph.add(starter, first, EdgeKind.STARTS)


def graph_from_lite(lite, settings: Settings | None = None) -> LineageGraph:
    return _Builder(lite, settings or get_settings()).build()


def load_graph(settings: Settings | None = None, load: bool = True) -> LineageGraph:
    """Load new records into DataHub Lite, then read the graph from it."""
    from nyc_taxi.lineage.read.store import LineageStore

    store = LineageStore(settings)
    if load:
        store.load()
    with store.open() as lite:
        return graph_from_lite(lite, store.settings)
