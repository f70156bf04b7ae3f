"""Delivery by the user's settings: destinations down, then back; OpenLineage disabled."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
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
        # as the server received them: each run's START before its end
        received = [(e["run"]["runId"], e["eventType"]) for e in server.bodies("/api/v1/lineage")]
        runs = {run: [state for r, state in received if r == run] for run, _ in received}
        assert len(runs) == 3 and {states[0] for states in runs.values()} == {"START"}, runs
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


def _event(run_id: str, state: str) -> dict:
    return {"eventType": state, "run": {"runId": run_id}, "job": {"namespace": "default", "name": "F.s"}}


def test_a_steps_files_leave_from_a_process_of_their_own_one_shipper_at_a_time(place, monkeypatch):
    """What a step that does not end the run does: its files are written, and a shipper of their own
    sends them once no other shipper holds the outbox."""
    import fcntl

    from metaflow_lineage.delivery import Outbox, ship_in_background

    for name, value in place.env.items():
        monkeypatch.setenv(name, value)
    outbox = Outbox()
    event = _event("0f6c4f5e-3c5e-4f4a-9f3e-1b2c3d4e5f60", "START")
    outbox.put("F.1.0001.s.1.0.start", [event], [])
    with open(outbox.root / "ship.lock", "a") as held:  # another shipper, sending
        fcntl.flock(held, fcntl.LOCK_EX)
        ship_in_background(outbox, "F.1.")
        time.sleep(2)
        assert len(outbox.pending_files()) == 1 and place.events() == []
    for _ in range(300):
        if not outbox.pending_files():
            break
        time.sleep(0.1)
    assert place.events() == [event]
    assert (outbox.shipped / "F.1.0001.s.1.0.start.openlineage.json").exists()
    assert (outbox.root / "problems.log").read_text() == ""


def test_a_file_the_server_refuses_is_set_aside_and_the_later_ones_go_on(place, monkeypatch):
    from metaflow_lineage.delivery import Outbox

    server = LineageServer(refuse="refuse-me")
    try:
        for name, value in {**place.env, **USERS_SERVERS, "OPENLINEAGE_URL": server.url}.items():
            monkeypatch.setenv(name, value)
        outbox = Outbox()
        first, second = _event("refuse-me", "START"), _event("0f6c4f5e-3c5e-4f4a-9f3e-1b2c3d4e5f60", "START")
        outbox.put("F.1.0001.s.1.0.start", [first], [])
        outbox.put("F.1.0002.s.1.0.start", [second], [])
        problems = outbox.ship("F.1.")
        assert len(problems) == 1 and "refused by the server" in problems[0], problems
        assert [p.name for p in outbox.refused.iterdir()] == ["F.1.0001.s.1.0.start.openlineage.json"]
        assert server.bodies("/api/v1/lineage") == [second] and outbox.pending_files() == []
    finally:
        server.close()


def test_a_refused_request_a_token_or_an_address_keeps_the_files_pending(place, monkeypatch):
    from metaflow_lineage.delivery import Outbox

    server = LineageServer(refuse="START", status=401)
    try:
        for name, value in {**place.env, **USERS_SERVERS, "OPENLINEAGE_URL": server.url}.items():
            monkeypatch.setenv(name, value)
        outbox = Outbox()
        outbox.put("F.1.0001.s.1.0.start", [_event("0f6c4f5e-3c5e-4f4a-9f3e-1b2c3d4e5f60", "START")], [])
        outbox.put("F.1.0002.s.1.0.start", [_event("1f6c4f5e-3c5e-4f4a-9f3e-1b2c3d4e5f60", "START")], [])
        problems = outbox.ship("F.1.")
        assert len(problems) == 1 and "kept for later" in problems[0], problems
        assert len(outbox.pending_files()) == 2 and not outbox.refused.exists()
    finally:
        server.close()


def test_an_outbox_another_user_may_write_to_is_refused(place, tmp_path):
    from metaflow_lineage.delivery import Outbox

    shared = tmp_path / "shared-outbox"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(PermissionError, match="not the user's alone"):
        Outbox(shared).put("F.1.0001.s.1.0.start", [_event("x", "START")], [])
    assert not (shared / "pending").exists()
