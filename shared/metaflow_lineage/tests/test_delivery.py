"""Delivery by the user's settings: destinations down, then back; OpenLineage disabled."""

from __future__ import annotations

import json
import subprocess
import sys

from places import LineageServer, closed_port

USERS_SERVERS = {"OPENLINEAGE__TRANSPORT__TYPE": "", "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": ""}


def _text(event: dict) -> str:
    return json.dumps(event, sort_keys=True)


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
    assert sorted(name.split(".", 2)[2] for name in pending) == sorted(
        [
            "start.1.0.start.openlineage.json",
            "start.1.0.end.openlineage.json",
            "start.1.0.end.datahub.json",
            "end.2.0.start.openlineage.json",
            "end.2.0.end.openlineage.json",
            "end.2.0.end.datahub.json",
            "start.1.0.start.datahub.json",
        ]
    ), pending
    assert not (place.outbox / "shipped").exists() or not list((place.outbox / "shipped").iterdir())

    server = LineageServer()
    try:
        env = {**place.env, **USERS_SERVERS, "OPENLINEAGE_URL": server.url, "DATAHUB_GMS_URL": server.url}
        shipped = subprocess.run(
            [sys.executable, "-m", "metaflow_lineage", "ship"], env=env, cwd=place.root, capture_output=True, text=True
        )
        assert shipped.returncode == 0, shipped.stderr
        assert "nothing pending" in shipped.stdout
        events = [e for name, body in pending.items() if name.endswith(".openlineage.json") for e in body]
        records = [r for name, body in pending.items() if name.endswith(".datahub.json") for r in body]
        assert sorted(map(_text, server.bodies("/api/v1/lineage"))) == sorted(map(_text, events))
        proposals = [b["proposal"] for b in server.bodies("/aspects?action=ingestProposal")]
        assert sorted((p["entityUrn"], p["aspectName"]) for p in proposals) == sorted(
            (r["entityUrn"], r["aspectName"]) for r in records
        )
        assert _files(place.outbox / "shipped") == pending and not _files(place.outbox / "pending")
    finally:
        server.close()


def test_openlineage_disabled_makes_no_event_and_datahub_still_gets_its_records(place):
    code, _, output = place.run("daily_orders_flow.py", OPENLINEAGE_DISABLED="true")
    assert code == 0, output
    assert place.events() == []
    files = list((place.outbox / "pending").glob("*.json")) + list((place.outbox / "shipped").glob("*.json"))
    assert files and all(f.name.endswith(".datahub.json") for f in files)
