"""The lineage receiver (``nyc_taxi.lineage.write.receiver``), as a process of its own on 127.0.0.1: a
host's local lineage files shipped to it by the delivery code (OpenLineage's HTTP transport, DataHub's
REST emitter) arrive in the receiver's state directory whole and once, also when a sender's ledger is
lost after the receiver stored a record; a request without a token, with an unknown one or another scheme, or naming
no file and place of its own is refused and stored nowhere. Across hosts, with the deployment's own network:
tests/test_team_hosts.py."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest

from nyc_taxi.core.processes import free_port, write_private
from nyc_taxi.core.settings import Settings
from nyc_taxi.lineage.write import delivery
from nyc_taxi.lineage.write.destinations import DataHubTarget, OpenLineageTarget
from nyc_taxi.lineage.write.receiver import OPENLINEAGE_PATH

TARGETS: dict = {}  # a host's state directory -> the receiver it ships to, with its token


def ship(settings: Settings) -> delivery.ShipResult:
    return delivery.ship(settings, **TARGETS[settings.state_dir])


def servers(settings: Settings) -> list:
    return delivery.servers(settings, **TARGETS[settings.state_dir])


def _records(settings: Settings, count: int) -> None:
    """``count`` OpenLineage events and DataHub records in ``settings``'s lineage files, as a tool writes
    them (the client's typed event; DataHub's wrapper, and a snapshot event)."""
    from datahub.emitter.mce_builder import make_dataset_urn
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.metadata.schema_classes import (
        DatasetPropertiesClass,
        DatasetSnapshotClass,
        MetadataChangeEventClass,
        StatusClass,
    )
    from openlineage.client.event_v2 import Job, Run, RunEvent, RunState

    from nyc_taxi.lineage.write.outbox import Outbox

    outbox = Outbox(settings, "airflow")
    for n in range(count):
        outbox.add_events(
            [
                RunEvent(
                    eventType=RunState.COMPLETE,
                    eventTime=dt.datetime(2024, 1, 1, 0, n, tzinfo=dt.UTC).isoformat(),
                    run=Run(runId=str(uuid.uuid4())),
                    job=Job(namespace="nyc_taxi", name=f"task_{n}"),
                    producer="https://example.org/test",
                )
            ]
        )
        urn = make_dataset_urn("iceberg", f"nyc_taxi.table_{n}")
        outbox.add_records(
            [
                MetadataChangeProposalWrapper(entityUrn=urn, aspect=DatasetPropertiesClass(name=f"table_{n}")),
                MetadataChangeEventClass(
                    proposedSnapshot=DatasetSnapshotClass(urn=urn, aspects=[StatusClass(False)])
                ).to_obj(),
            ]
        )


def _without_system_metadata(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "systemMetadata"} for r in records]


@pytest.fixture
def receiver(tmp_path):
    """A receiver for two hosts' tokens, and the settings of a host that ships to it."""
    control = Settings(_env_file=None, state_dir=tmp_path / "control", profile="team")
    tokens = {"worker-a": "token-of-a-" + uuid.uuid4().hex, "worker-b": "token-of-b-" + uuid.uuid4().hex}
    port = free_port()
    write_private(control.state_dir / "team" / "services.json", {"lineage": {"port": port, "tokens": tokens}})
    env = {**os.environ, "STATE_DIR": str(control.state_dir), "PROFILE": "team"}
    running = []

    def start() -> subprocess.Popen:
        """The receiver's process (again, on the same port, after the one before is killed)."""
        for before in running:
            before.kill()
            before.wait()
        process = subprocess.Popen(
            [sys.executable, "-m", "nyc_taxi.lineage.write.receiver", "--address", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert "lineage receiver on 127.0.0.1" in process.stdout.readline()
        running.append(process)
        return process

    process = start()
    url = f"http://127.0.0.1:{port}"

    def host(name: str, token: str) -> Settings:
        """A host's settings, and the receiver it ships to with its token (what ``delivery.servers`` gives
        a host of the layout: ``LineageReceiver``)."""
        settings = Settings(_env_file=None, state_dir=tmp_path / name)
        TARGETS[settings.state_dir] = {
            "openlineage": [
                OpenLineageTarget({"type": "http", "url": url, "auth": {"type": "api_key", "apiKey": token}}, "")
            ],
            "datahub": [DataHubTarget(url, token)],
        }
        return settings

    yield control, tokens, host, url, process, start
    for each in running:
        each.kill()
        each.wait()


def test_a_hosts_lineage_arrives_whole_and_once_in_controls_files_whatever_its_ledger_says(receiver):
    from nyc_taxi.lineage.read.runs import Runs
    from nyc_taxi.lineage.write.receiver import stored_path

    control, tokens, host, _, _, _ = receiver
    worker = host("worker-a", tokens["worker-a"])
    _records(worker, 3)
    shipped = ship(worker)
    assert [(s.sent, s.pending, s.error) for s in shipped.shipments] == [(3, 0, None), (6, 0, None)]

    def received(kind) -> list[dict]:
        return [r for p in kind(control).files() for r in kind(control).read(p)]

    def sent(kind) -> list[dict]:
        return [r for p in kind(worker).files() for r in kind(worker).read(p)]

    def arrived_once() -> None:
        assert received(delivery.OpenLineageServer) == sent(delivery.OpenLineageServer)
        datahub = received(delivery.DataHubServer)
        assert _without_system_metadata(datahub) == _without_system_metadata(sent(delivery.DataHubServer))
        assert all(r["systemMetadata"]["properties"]["clientId"] for r in datahub)  # as the emitter sent it

    arrived_once()
    for kind in (delivery.OpenLineageServer, delivery.DataHubServer):  # each file of the host, a file of control's
        for path in kind(worker).files():
            head = delivery.file_head(kind(worker).read(path))
            assert stored_path(control, "worker-a", path.name, head).exists()
    assert {r.job for r in Runs.read(control)} >= {"task_0", "task_1", "task_2"}  # control's readers see them

    # the host's ledgers one record short of each file (the receiver stored it, its answer never arrived):
    # each file's last record is sent again, answered as accepted, and not stored twice
    for server in servers(worker):
        ledger = json.loads(server.ledger_path.read_text())
        for entry in ledger.values():
            entry["shipped"] -= 1
        server.ledger_path.write_text(json.dumps(ledger))
    again = ship(worker)
    assert [(s.sent, s.error) for s in again.shipments] == [(1, None), (3, None)]  # one event file, three segments
    arrived_once()
    # the ledgers lost altogether: every record is sent again, none stored twice
    for server in servers(worker):
        server.ledger_path.unlink()
    assert [(s.sent, s.error) for s in ship(worker).shipments] == [(3, None), (6, None)]
    arrived_once()

    # new records go on where each file left off; a record the same as the one before it is a record too
    _records(worker, 1)
    repeated = sent(delivery.OpenLineageServer)[-1]
    with (worker.lineage_dir / "openlineage" / "airflow_events.jsonl").open("a") as out:
        out.write(json.dumps(repeated) + "\n")
    assert ship(worker).sent == 4
    arrived_once()
    assert len(received(delivery.OpenLineageServer)) == 5


def _send(url: str, path: str, body: dict, headers: dict) -> tuple[int, str]:
    """POST ``body`` to the receiver: its status, and its error when it refused."""
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, ""
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())["error"]


def _post(url: str, body: dict, headers: dict) -> int:
    return _send(url, OPENLINEAGE_PATH, body, headers)[0]


def _event(n: int) -> dict:
    """An OpenLineage run event as the client serialises it."""
    from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
    from openlineage.client.serde import Serde

    event = RunEvent(
        eventType=RunState.COMPLETE,
        eventTime=f"2024-01-01T00:0{n}:00+00:00",
        run=Run(runId=str(uuid.uuid4())),
        job=Job(namespace="nyc_taxi", name=f"j{n}"),
        producer="https://example.org/test",
    )
    return json.loads(Serde.to_json(event))


def test_a_record_that_comes_late_or_after_a_gap_is_not_stored(receiver):
    """A request that arrives after its sender sent it again and went on is answered without being
    stored; one whose earlier records never came is refused (409): nothing is stored twice or out of order."""
    from nyc_taxi.lineage.write.receiver import stored_path

    control, tokens, _, url, _, start = receiver
    head, events = "0123456789abcdef", [_event(n) for n in range(3)]

    def send(index: int, event: dict | None = None) -> int:
        place = {"X-Lineage-Source": "metaflow_events.jsonl", "X-Lineage-Position": f"{index} {head}"}
        return _post(url, event or events[index], {"Authorization": f"Bearer {tokens['worker-b']}", **place})

    assert [send(0), send(1), send(0), send(2), send(1)] == [201] * 5  # 0 and 1 again: late, or sent again
    assert send(5, _event(5)) == 409  # records 3 and 4 never came
    # a receiver started again counts what its files hold, a line a killed write left half cut off
    stored = stored_path(control, "worker-b", "metaflow_events.jsonl", head)
    with stored.open("a") as out:
        out.write('{"eventTime": "2024-01-01T00:0')
    start()
    events.append(_event(3))
    assert [send(2), send(3), send(1)] == [201] * 3
    assert [json.loads(line) for line in stored.read_text().splitlines()] == events


def test_the_receiver_refuses_a_request_without_a_hosts_token_or_a_file_of_its_own_and_stores_nothing(receiver):

    control, tokens, host, url, process, _ = receiver
    event = _event(0)

    def post(headers: dict) -> int:
        return _post(url, event, headers)

    source = {"X-Lineage-Source": "airflow_events.jsonl", "X-Lineage-Position": "0 0123456789abcdef"}
    assert post(source) == 401  # no token
    assert post({**source, "Authorization": "Bearer not-a-hosts-token"}) == 401
    assert post({**source, "Authorization": f"Basic {tokens['worker-a']}"}) == 401  # a token, not as a bearer's
    assert post({"Authorization": f"Bearer {tokens['worker-a']}"}) == 400  # no file named
    assert (
        post({"Authorization": f"Bearer {tokens['worker-a']}", "X-Lineage-Source": "airflow_events.jsonl"}) == 400
    )  # no place
    assert (
        post({"Authorization": f"Bearer {tokens['worker-a']}", **source, "X-Lineage-Source": "../x_events.jsonl"})
        == 400
    )
    assert (
        post({"Authorization": f"Bearer {tokens['worker-a']}", **source, "X-Lineage-Source": "a_mcps.1-2.json"}) == 400
    )
    assert not list((control.state_dir / "lineage").rglob("*.json*"))

    # a host with a wrong token ships nothing and keeps everything for later; the same host's token works
    stranger = host("worker-a", "a-wrong-token")
    _records(stranger, 1)
    refused = ship(stranger)
    assert [s.sent for s in refused.shipments] == [0, 0] and all(s.error for s in refused.shipments)
    assert not list((control.state_dir / "lineage").rglob("*.json*"))
    assert post({**source, "Authorization": f"Bearer {tokens['worker-b']}"}) == 201
    assert (
        control.state_dir / "lineage" / "openlineage" / "from-worker-b.airflow_events.0123456789abcdef.jsonl"
    ).exists()
    time.sleep(0.2)
    process.kill()
    output = process.stdout.read()
    assert tokens["worker-a"] not in output and tokens["worker-b"] not in output  # its log names no token


def test_the_receiver_refuses_what_a_server_would_and_stores_it_nowhere(receiver):
    """An event the OpenLineage spec refuses, a DataHub aspect its entity type lacks, a URN of another
    entity type than its field holds: each refused with its reason, as the server behind control would
    (so it stops its host's shipping there, not control's onward shipping later); another producer's
    facet, of a schema the copied spec lacks, is taken as a server takes it."""
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.emitter.serialization_helper import pre_json_transform
    from datahub.metadata.schema_classes import DataJobInputOutputClass, UpstreamClass, UpstreamLineageClass

    from nyc_taxi.lineage.write.receiver import DATAHUB_INGEST_PATH

    control, tokens, host, url, process, _ = receiver
    token = {"Authorization": f"Bearer {tokens['worker-a']}"}

    def event_at(index: int, event: dict) -> tuple[int, str]:
        place = {"X-Lineage-Source": "airflow_events.jsonl", "X-Lineage-Position": f"{index} 0123456789abcdef"}
        return _send(url, OPENLINEAGE_PATH, event, {**token, **place})

    def proposal(wrapper) -> tuple[int, str]:
        place = {"X-Lineage-Source": "airflow_mcps.1-2.json", "X-Lineage-Position": "0 0123456789abcdef"}
        body = {"proposal": pre_json_transform(wrapper.make_mcp().to_obj())}
        return _send(url, DATAHUB_INGEST_PATH, body, {**token, **place})

    without_producer = {k: v for k, v in _event(0).items() if k != "producer"}
    status, reason = event_at(0, without_producer)
    assert status == 400 and "is not valid under any of the given schemas" in reason, reason  # no kind of event
    not_a_uuid = {**_event(0), "run": {"runId": "run-1", "facets": {}}}  # a server parses the run's id as a UUID
    status, reason = event_at(0, not_a_uuid)
    assert status == 400 and "'runId': 'run-1'" in reason and "is not valid under any" in reason, reason
    no_type = {k: v for k, v in _event(0).items() if k != "eventType"}  # the spec lets it by; control reads runs
    assert event_at(0, no_type) == (400, "not an OpenLineage run event (eventTime, eventType, run and job)")
    dataset = "urn:li:dataset:(urn:li:dataPlatform:iceberg,nyc_taxi.t,PROD)"
    status, reason = proposal(
        MetadataChangeProposalWrapper(entityUrn=dataset, aspect=DataJobInputOutputClass([dataset], []))
    )
    assert (status, reason) == (422, f"{dataset} dataJobInputOutput: a dataset has no aspect dataJobInputOutput")
    upstream = UpstreamClass(dataset="urn:li:corpuser:someone", type="TRANSFORMED")
    status, reason = proposal(MetadataChangeProposalWrapper(entityUrn=dataset, aspect=UpstreamLineageClass([upstream])))
    assert status == 422 and reason.endswith("dataset is a corpuser (urn:li:corpuser:someone), not dataset"), reason
    assert not list((control.state_dir / "lineage").rglob("*.json*"))

    elsewhere = _event(1)
    elsewhere["run"]["facets"] = {
        "theirs": {"_producer": "https://example.org/x", "_schemaURL": "https://example.org/x/Theirs.json#/$defs/X"}
    }
    assert event_at(0, elsewhere) == (201, "")

    # a host shipping a record the receiver refuses is told why, and so is the receiver's log

    worker = host("worker-b", tokens["worker-b"])
    (worker.lineage_dir / "openlineage").mkdir(parents=True)
    (worker.lineage_dir / "openlineage" / "airflow_events.jsonl").write_text(json.dumps(no_type) + "\n")
    shipment = ship(worker).shipments[0]
    assert shipment.sent == 0 and "not an OpenLineage run event" in shipment.error, shipment
    process.kill()
    assert "refused worker-b's airflow_events.jsonl record: 400 not an OpenLineage run event" in process.stdout.read()
