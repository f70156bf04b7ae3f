"""`bash run lineage-replay`: send what the local files hold to the configured lineage backends.

For runs made while a backend was down or not configured yet. OpenLineage: every event not replayed
before goes to OPENLINEAGE_URL, in order; a ledger counts the events of each file already sent, so
a replay that stops half-way (backend down again) continues where it stopped and nothing is sent
twice. DataHub: the record files go to DATAHUB_GMS_URL (`datahub-push`; upserts, so repeating is
harmless).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nyc_taxi.lineage.destinations import openlineage_http
from nyc_taxi.lineage.runs import event_files
from nyc_taxi.settings import Settings, get_settings


def _ledger_path(settings: Settings) -> Path:
    return settings.lineage_dir / "replay" / "openlineage_sent.json"


def replay_openlineage(settings: Settings) -> int:
    """Send the events not sent yet; returns how many were sent. Raises when the backend refuses one."""
    from filelock import FileLock
    from openlineage.client import OpenLineageClient

    ledger_path = _ledger_path(settings)
    ledger_path.parent.mkdir(parents=True, exist_ok=True)
    transport = OpenLineageClient(config={"transport": openlineage_http(settings)}).transport
    sent = 0
    with FileLock(str(ledger_path.with_suffix(".lock"))):
        ledger = json.loads(ledger_path.read_text()) if ledger_path.exists() else {}
        try:
            for path in event_files(settings):
                lines = [line for line in path.read_text().splitlines() if line.strip()]
                for index in range(ledger.get(path.name, 0), len(lines)):
                    transport.emit(json.loads(lines[index]))
                    ledger[path.name] = index + 1
                    sent += 1
        finally:
            ledger_path.write_text(json.dumps(ledger, indent=1))
    return sent


def main() -> int:
    settings = get_settings()
    if not (settings.openlineage_url or settings.datahub_gms_url):
        print("error: nothing to replay to: set OPENLINEAGE_URL and/or DATAHUB_GMS_URL", file=sys.stderr)
        return 2
    status = 0
    if settings.openlineage_url:
        try:
            print(f"OpenLineage: {replay_openlineage(settings)} events sent to {settings.openlineage_url}")
        except Exception as error:
            print(f"error: OpenLineage backend {settings.openlineage_url} failed: {str(error).splitlines()[0]}; "
                  "what was sent is remembered, run this again to send the rest", file=sys.stderr)
            status = 1
    if settings.datahub_gms_url:
        from nyc_taxi.lineage.datahub_server import main as datahub_main

        try:
            datahub_main(["push"])
        except SystemExit as stop:
            status = status or int(stop.code or 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
