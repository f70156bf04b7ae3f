"""The graph code on a small synthetic DataHub Lite store (no pipeline runs): reading records into a
graph, walking it, the text tree and the picture, each against a hand-written expectation."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from nyc_taxi.core import datasets as d
from nyc_taxi.core.naming import identity
from nyc_taxi.core.settings import Settings

AIRFLOW_FLOW = "urn:li:dataFlow:(airflow,load_things,PROD)"
METAFLOW_FLOW = "urn:li:dataFlow:(metaflow,UseThings,PROD)"
LOAD = f"urn:li:dataJob:({AIRFLOW_FLOW},load)"
COUNT = f"urn:li:dataJob:({METAFLOW_FLOW},count)"
FIT = f"urn:li:dataJob:({METAFLOW_FLOW},fit)"


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """An Airflow task writing raw from staging, a Metaflow step reading raw and writing actuals, and a
    step training the model after it; loaded into DataHub Lite through the project's store."""
    from datahub.api.entities.datajob import DataFlow, DataJob
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.metadata import schema_classes as dhs
    from datahub.metadata.urns import DataFlowUrn, DataJobUrn, DatasetUrn

    from nyc_taxi.lineage.read.store import LineageStore
    from nyc_taxi.lineage.write.outbox import Outbox

    settings = Settings(_env_file=None, state_dir=tmp_path_factory.mktemp("synthetic"))
    urn = {
        t: identity(t, settings).datahub_urn
        for t in (
            d.YELLOW_TAXI_STAGING,
            d.YELLOW_TAXI_RAW,
            d.YELLOW_RIDES_HOURLY_ACTUALS,
            d.YELLOW_RIDES_FORECAST_MODEL,
        )
    }
    records = []
    for flow, job, inlets, outlets, upstream in (
        (AIRFLOW_FLOW, "load", [d.YELLOW_TAXI_STAGING], [d.YELLOW_TAXI_RAW], []),
        (METAFLOW_FLOW, "count", [d.YELLOW_TAXI_RAW], [d.YELLOW_RIDES_HOURLY_ACTUALS], []),
        (METAFLOW_FLOW, "fit", [d.YELLOW_RIDES_HOURLY_ACTUALS], [], [COUNT]),
    ):
        parsed = DataFlowUrn.from_string(flow)
        records += DataFlow(orchestrator=parsed.orchestrator, id=parsed.flow_id, env="PROD").generate_mcp()
        data_job = DataJob(
            id=job,
            flow_urn=parsed,
            inlets=[DatasetUrn.from_string(urn[t]) for t in inlets],
            outlets=[DatasetUrn.from_string(urn[t]) for t in outlets],
            upstream_urns=[DataJobUrn.from_string(u) for u in upstream],
        )
        records += data_job.generate_mcp()
    records.append(
        MetadataChangeProposalWrapper(
            entityUrn=urn[d.YELLOW_RIDES_FORECAST_MODEL],
            aspect=dhs.MLModelPropertiesClass(name="model", trainingJobs=[FIT]),
        )
    )
    records.append(
        MetadataChangeProposalWrapper(
            entityUrn=urn[d.YELLOW_TAXI_RAW],
            aspect=dhs.OperationClass(
                timestampMillis=1_700_000_000_000,
                lastUpdatedTimestamp=1_700_000_000_000,
                operationType="UPDATE",
                customProperties={"snapshot_id": "42", "actor": "airflow:load_things.load"},
            ),
        )
    )
    Outbox(settings, "synthetic").add_records(records)
    assert LineageStore(settings).load().new_records == len(records)
    return settings, urn


@pytest.fixture(scope="module")
def graph(synthetic):
    from nyc_taxi.lineage.read.lite import load_graph

    return load_graph(synthetic[0], load=False)


def test_the_graph_is_exactly_the_records(graph, synthetic):
    urn = synthetic[1]
    assert {(e.source, e.target, e.kind.value) for e in graph.edges} == {
        (urn[d.YELLOW_TAXI_STAGING], LOAD, "read"),
        (LOAD, urn[d.YELLOW_TAXI_RAW], "write"),
        (urn[d.YELLOW_TAXI_RAW], COUNT, "read"),
        (COUNT, urn[d.YELLOW_RIDES_HOURLY_ACTUALS], "write"),
        (urn[d.YELLOW_RIDES_HOURLY_ACTUALS], FIT, "read"),
        (COUNT, FIT, "then"),
        (FIT, urn[d.YELLOW_RIDES_FORECAST_MODEL], "trained"),
    }
    names = {n.name: (n.kind, n.tool, n.pipeline) for n in graph.nodes.values()}
    assert names == {
        "yellow_taxi_staging": ("dataset", "Iceberg", None),
        "yellow_taxi_raw": ("dataset", "Iceberg", None),
        "yellow_rides_hourly_actuals": ("dataset", "Iceberg", None),
        "yellow_rides_forecast_model": ("model", "Metaflow", None),
        "load_things.load": ("job", "Airflow", "load_things"),
        "UseThings.count": ("job", "Metaflow", "UseThings"),
        "UseThings.fit": ("job", "Metaflow", "UseThings"),
    }
    assert graph.nodes[urn[d.YELLOW_TAXI_RAW]].freshness.snapshot_id == "42"


def test_walking_upstream_and_downstream_with_a_depth(graph, synthetic):
    urn = synthetic[1]
    raw = urn[d.YELLOW_TAXI_RAW]
    assert {(e.source, e.target) for e in graph.reachable(raw, "upstream")} == {
        (urn[d.YELLOW_TAXI_STAGING], LOAD),
        (LOAD, raw),
    }
    assert {(e.source, e.target) for e in graph.reachable(raw, "downstream", depth=1)} == {(raw, COUNT)}
    assert len(graph.reachable(raw, "downstream")) == 5
    assert graph.resolve("usethings.COUNT") == COUNT and graph.resolve(raw) == raw
    with pytest.raises(KeyError, match="did you mean: UseThings.count"):
        graph.resolve("count")


def test_the_tree_reads_as_expected(graph, synthetic):
    from nyc_taxi.lineage.read.render import tree

    text = tree(graph, synthetic[1][d.YELLOW_TAXI_RAW])
    assert text.splitlines() == [
        "yellow_taxi_raw [Iceberg table] — last write 2023-11-14 22:13:20 UTC, snapshot 42",
        "upstream:",
        "  └── written by load_things.load [Airflow task]",
        "      └── reads yellow_taxi_staging [Iceberg table]",
        "downstream:",
        "  └── read by UseThings.count [Metaflow step]",
        "      ├── writes yellow_rides_hourly_actuals [Iceberg table]",
        "      │   └── read by UseThings.fit [Metaflow step]",
        "      │       └── trains yellow_rides_forecast_model [Metaflow model]",
        "      └── followed by UseThings.fit [Metaflow step] (see above)",
    ]


def test_the_picture_has_every_node_and_edge_and_no_machine_path(graph, tmp_path):
    from nyc_taxi.lineage.read.site.drawing import node_id
    from nyc_taxi.lineage.read.site.picture import write_picture

    svg, page = write_picture(graph, tmp_path)
    text = svg.read_text()
    # every node once, by the id its URN gives it (the site's convention), its URN in its tooltip
    assert sorted(re.findall(r'<g id="(n[0-9a-f]{12})" class="node"', text)) == sorted(map(node_id, graph.nodes))
    assert all(f"<title>{urn}" in text or urn in text for urn in graph.nodes)
    assert text.count('class="edge"') == len(graph.edges)
    assert str(tmp_path) not in text and str(tmp_path) not in page.read_text()


def test_the_store_loads_every_files_new_records_once_as_loading_each_file_alone_would(tmp_path, monkeypatch):
    """LineageStore.load() sends the new records of every record file through one run of DataHub's pipeline,
    in the files' order: DataHub Lite then holds what loading each file through a run of its own holds (the
    same aspects, the same versions: the newer file's value is the latest), and a load after another file
    arrives adds that file's records only."""
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.metadata import schema_classes as dhs

    from nyc_taxi.lineage.read import store as stores
    from nyc_taxi.lineage.read.store import LineageStore
    from nyc_taxi.lineage.write.datahub_pipeline import run_file_pipeline
    from nyc_taxi.lineage.write.outbox import Outbox, datahub_files, read_datahub_file

    settings = Settings(_env_file=None, state_dir=tmp_path / "state")
    raw, staging = (identity(t, settings).datahub_urn for t in (d.YELLOW_TAXI_RAW, d.YELLOW_TAXI_STAGING))

    def operation(urn: str, snapshot: str) -> MetadataChangeProposalWrapper:
        at = 1_700_000_000_000 + int(snapshot)
        return MetadataChangeProposalWrapper(
            entityUrn=urn,
            aspect=dhs.OperationClass(
                timestampMillis=at,
                lastUpdatedTimestamp=at,
                operationType="UPDATE",
                customProperties={"snapshot_id": snapshot},
            ),
        )

    runs: list[list[str]] = []  # each run of the pipeline: its records' snapshot ids, in order

    def counted(records, sink, name):
        runs.append([r["aspect"]["json"]["customProperties"]["snapshot_id"] for r in records])
        return run_file_pipeline(records, sink, name)

    monkeypatch.setattr(stores, "run_file_pipeline", counted)
    outbox, store = Outbox(settings, "synthetic"), LineageStore(settings)
    outbox.add_records([operation(raw, "1"), operation(staging, "1")])
    outbox.add_records([operation(raw, "2")])
    assert store.load().new_records == 3
    outbox.add_records([operation(raw, "3"), operation(staging, "2")])
    assert store.load().new_records == 2
    assert store.load().new_records == 0
    assert runs == [["1", "1", "2"], ["3", "2"]]  # one run per load that had new records, in the files' order

    alone = tmp_path / "alone.db"
    for path in datahub_files(settings):
        sink = {"type": "datahub-lite", "config": {"type": "sqlite", "config": {"file": str(alone)}}}
        run_file_pipeline(read_datahub_file(path), sink, path.stem)

    def aspects(database) -> list[tuple]:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
            return connection.execute(
                "SELECT urn, aspect_name, version, metadata FROM metadata_aspect_v2 ORDER BY 1, 2, 3"
            ).fetchall()

    loaded = aspects(store.database)
    assert loaded == aspects(alone)
    latest = {
        urn: json.loads(value)["customProperties"]["snapshot_id"] for urn, _, version, value in loaded if version == 0
    }
    assert latest == {raw: "3", staging: "2"}
    history = sorted(
        json.loads(value)["customProperties"]["snapshot_id"] for urn, _, v, value in loaded if urn == raw and v
    )
    assert history == ["1", "2", "3"]  # every value it had, each once (version 0 is the latest's copy)
