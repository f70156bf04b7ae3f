"""The delivery tests' view of the lineage server stand-in (``nyc_taxi_proving.fixtures.lineage_server``): the
server itself, and what the local files hold to compare with what it accepted."""

from __future__ import annotations

import json
from types import SimpleNamespace

from nyc_taxi.core.processes import free_port
from nyc_taxi_proving.fixtures.lineage_server import DATAHUB_INGEST_PATH, OPENLINEAGE_PATH
from nyc_taxi_proving.fixtures.lineage_server import LineageServer as Receiver

__all__ = [
    "DATAHUB_INGEST_PATH",
    "OPENLINEAGE_PATH",
    "Receiver",
    "closed_port",
    "local_lineage",
    "local_records",
    "received_records",
]


def closed_port() -> int:
    return free_port()  # nothing listens there: connections are refused


def local_lineage(settings) -> SimpleNamespace:
    """What the run left in its local files: OpenLineage events, DataHub records (file order)."""
    from nyc_taxi.lineage.write.delivery import DataHubServer, OpenLineageServer

    ol, dh = OpenLineageServer(settings), DataHubServer(settings)
    return SimpleNamespace(
        openlineage=[e for p in ol.files() for e in ol.read(p)], datahub=[r for p in dh.files() for r in dh.read(p)]
    )


def received_records(server: Receiver) -> list[tuple]:
    """The DataHub proposals the server accepted, as (entity, aspect, value): comparable with local records."""
    found = []
    for request in server.accepted(DATAHUB_INGEST_PATH):
        proposal = request["body"]["proposal"]
        found.append((proposal["entityUrn"], proposal["aspectName"], json.loads(proposal["aspect"]["value"])))
    return found


def local_records(records: list[dict]) -> list[tuple]:
    return [(r["entityUrn"], r["aspectName"], r["aspect"]["json"]) for r in records]
