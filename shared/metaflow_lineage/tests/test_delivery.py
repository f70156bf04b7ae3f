"""Delivery by the user's settings: destinations down, then back; OpenLineage disabled."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from places import LineageServer, closed_port

USERS_SERVERS = {"OPENLINEAGE__TRANSPORT__TYPE": "", "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": ""}


def _text(event: dict) -> str:
    return json.dumps(event, sort_keys=True)


def _proposal(record: dict, aspect) -> tuple:
    return record["entityUrn"], record["aspectName"], record.get("changeType", "UPSERT"), _text(aspect)


def _files(folder) -> dict[str, list]:
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def test_with_both_servers_down_the_flow_runs_and_its_lineage_waits_then_ships_to_the_users_servers(place):
    down = f"http://127.0.0.1:{closed_port()}"
    users_retries = {  # each client's own setting: no retry, so that the test does not wait for them
        "OPENLINEAGE__TRANSPORT__TYPE": "http",
        "OPENLINEAGE__TRANSPORT__URL": down,
        "OPENLINEAGE__TRANSPORT__RETRY": '{"total": 0}',
        "DATAHUB_REST_EMITTER_DEFAULT_RETRY_MAX_TIMES": "0",
    }
    code, _, output = place.run("daily_orders_flow.py", **{**USERS_SERVERS, **users_retries}, DATAHUB_GMS_URL=down)
    assert code == 0, output
    # the run's last step says where its lineage waits: once for each destination
    assert output.count("lineage kept for later") == 2, output
    assert "ConnectionError" in output and "Unable to emit metadata to DataHub GMS" in output
    pending = _files(place.outbox / "pending")
    assert [name.split(".", 3)[3] for name in sorted(pending)] == [  # in the order they were written
        "start.1.0.start.datahub.json",
        "start.1.0.start.openlineage.json",
        "start.1.0.end.datahub.json",
        "start.1.0.end.openlineage.json",
        "end.2.0.start.openlineage.json",
        "end.2.0.end.datahub.json",
        "end.2.0.end.openlineage.json",
    ], pending
    assert not (place.outbox / "shipped").exists() or not list((place.outbox / "shipped").iterdir())

    server = LineageServer()
    try:
        env = {**place.env, **USERS_SERVERS, "OPENLINEAGE_URL": server.url, "DATAHUB_GMS_URL": server.url}
        shipped = subprocess.run(
            [sys.executable, "-m", "metaflow_lineage", "ship"], env=env, cwd=place.root, capture_output=True, text=True
        )
        assert shipped.returncode == 0, shipped.stderr
        assert "nothing pending" in shipped.stdout
        # every event and record, whole, in the order they were written (a run's START before its end)
        written = [place.outbox / "shipped" / name for name in sorted(pending)]  # named when they were written
        events = [e for p in written if p.name.endswith(".openlineage.json") for e in json.loads(p.read_text())]
        records = [r for p in written if p.name.endswith(".datahub.json") for r in json.loads(p.read_text())]
        assert list(map(_text, server.bodies("/api/v1/lineage"))) == list(map(_text, events))
        flow = [e["eventType"] for e in server.bodies("/api/v1/lineage") if e["job"]["name"] == "DailyOrdersFlow"]
        assert flow == ["START", "COMPLETE"]
        proposals = [b["proposal"] for b in server.bodies("/aspects?action=ingestProposal")]
        assert [_proposal(p, json.loads(p["aspect"]["value"])) for p in proposals] == [
            _proposal(r, r["aspect"]["json"]) for r in records
        ]
        assert _files(place.outbox / "shipped") == pending and not _files(place.outbox / "pending")
    finally:
        server.close()


def test_openlineage_disabled_makes_no_event_and_datahub_still_gets_its_records(place):
    code, _, output = place.run("daily_orders_flow.py", OPENLINEAGE_DISABLED="true")
    assert code == 0, output
    assert place.events() == []
    files = sorted((place.outbox / "pending").glob("*.json"))
    assert [f.name.split(".", 3)[3] for f in files] == [  # in the order they were written
        "start.1.0.start.datahub.json",
        "start.1.0.end.datahub.json",
        "end.2.0.end.datahub.json",
    ]
    records = [r for f in files for r in json.loads(f.read_text())]
    runs = {r["entityUrn"] for r in records if r["entityType"] == "dataProcessInstance"}
    assert len(runs) == 3  # the flow run, and each step's
    job = "urn:li:dataJob:(urn:li:dataFlow:(metaflow,DailyOrdersFlow,PROD),start)"
    assert any(r["entityUrn"] == job and r["aspectName"] == "dataJobInputOutput" for r in records)


def test_a_steps_files_leave_from_a_process_of_their_own(place, monkeypatch):
    """What a step that does not end the run does: its files are written, and a shipper of their own
    sends them (the run's last step ships the rest itself)."""
    from metaflow_lineage.delivery import Outbox, ship_in_background

    for name, value in place.env.items():
        monkeypatch.setenv(name, value)
    outbox = Outbox()
    event = {"eventType": "START", "run": {"runId": "0f6c4f5e-3c5e-4f4a-9f3e-1b2c3d4e5f60"}, "job": {"name": "F.s"}}
    outbox.put("F.1.s.1.0.start", [event], [])
    ship_in_background(outbox, "F.1.")
    for _ in range(300):
        if not outbox.pending_files():
            break
        time.sleep(0.1)
    assert place.events() == [event]
    assert not outbox.pending_files() and (outbox.shipped / "F.1.s.1.0.start.openlineage.json").exists()
    assert (outbox.root / "problems.log").read_text() == ""
