"""The lineage receiver: where the hosts of the team deployment ship their lineage, on control.

Each host writes its lineage to its own files first (``outbox``) and ships them (``delivery``, the same
code that ships to DataHub or an OpenLineage server) to this program, which speaks the two endpoints the
clients already use: OpenLineage's (``POST /api/v1/lineage``) and DataHub GMS's ingestion
(``GET /config``, ``POST /aspects?action=ingestProposal``, ``POST /entities?action=ingest``). What it
accepts goes into control's own lineage files, one per file of the sending host (``from-<host>.<file>``),
so every reader on control (the site, the store, `lineage-replay` to a real server) sees the whole
deployment.

- **Who may send.** Every request carries a host's token (``Authorization: Bearer``): each host has its
  own, and the receiver's record maps each token to its host. Anything else is refused (401) and stored
  nowhere.
- **Once.** A sender ships each file's records in order and starts again at the first one it was not
  told was accepted; each request names its file (``X-Lineage-Source``). So a record sent again is the
  last one stored of its file: the receiver answers it as accepted and stores nothing. Its memory is
  its files, so a restart keeps it.
- **Whole or not at all.** A record is stored (an event line appended and synced, a DataHub segment
  written whole) before the answer goes out.

    python -m nyc_taxi.lineage.write.receiver --address A --port N   (STATE_DIR: control's state)
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.lineage.write.delivery import SOURCE_HEADER
from nyc_taxi.lineage.write.destinations import datahub_records_dir, openlineage_events_dir
from nyc_taxi.lineage.write.outbox import read_datahub_file, read_openlineage_file, replace_file

OPENLINEAGE_PATH = "/api/v1/lineage"
DATAHUB_INGEST_PATH = "/aspects?action=ingestProposal"
DATAHUB_ENTITY_PATH = "/entities?action=ingest"
# What DataHub GMS answers on /config: DataHub's emitter checks it talks to GMS, not to the frontend.
DATAHUB_CONFIG = {"noCode": "true", "versions": {"acryldata/datahub": {"version": "v1.2.0"}}, "models": {}}


# What a source file of a shipping host is called: a tool's OpenLineage events, or a DataHub segment
SOURCE = re.compile(r"^[A-Za-z0-9_-]+(_events\.jsonl|_mcps\.[0-9]+-[0-9]+\.json)$")


def stored_path(settings: Settings, host: str, source: str) -> Path:
    """Where the records of a host's source file go: a file of control's own, beside control's (readers
    take every file there), named by both."""
    folder = openlineage_events_dir(settings) if source.endswith(".jsonl") else datahub_records_dir(settings)
    return folder / f"from-{host}.{source}"


def _canonical(record: dict) -> str:
    """A record as the rule "sent again" compares it: without the system metadata DataHub's emitter
    stamps on each send (the time it observed it)."""
    return json.dumps({k: v for k, v in record.items() if k != "systemMetadata"}, sort_keys=True)


def datahub_record(path: str, body: dict) -> dict:
    """A request DataHub's REST emitter sent, as a record of DataHub's file format (what the outbox holds
    and DataHub's file source reads)."""
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.emitter.serialization_helper import post_json_transform
    from datahub.metadata.schema_classes import MetadataChangeEventClass, MetadataChangeProposalClass

    if path == DATAHUB_ENTITY_PATH:
        event = MetadataChangeEventClass.from_obj(
            post_json_transform(
                {"proposedSnapshot": body["entity"]["value"], "systemMetadata": body.get("systemMetadata")}
            )
        )
        return event.to_obj()
    proposal = MetadataChangeProposalClass.from_obj(post_json_transform(body["proposal"]))
    wrapper = MetadataChangeProposalWrapper.try_from_mcpc(proposal)
    return wrapper.to_obj(simplified_structure=True) if wrapper else proposal.to_obj()


class Receiver:
    """What the receiver stores, for a state directory: each host's records, each once."""

    def __init__(self, settings: Settings, tokens: dict[str, str]):
        self.settings, self.tokens, self.lock = settings, tokens, threading.Lock()

    def host_of(self, authorization: str | None) -> str | None:
        """The host whose token the request carries; None for anything else."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        for host, known in self.tokens.items():
            if hmac.compare_digest(token.encode(), known.encode()):
                return host
        return None

    def store(self, host: str, source: str, record: dict) -> bool:
        """Keep ``record`` of ``host``'s file ``source`` unless it is the one stored last of that file (sent
        again: its answer was lost); whether it was stored. A sender sends a file's records in order and
        starts again at the first one it was not told was accepted, so that is the only record that can
        come twice."""
        path = stored_path(self.settings, host, source)
        with self.lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.suffix == ".jsonl":
                held = read_openlineage_file(path)
                if held and _canonical(held[-1]) == _canonical(record):
                    return False
                with path.open("a") as out:
                    out.write(json.dumps(record) + "\n")
                    out.flush()
                    os.fsync(out.fileno())
            else:
                held = read_datahub_file(path)
                if held and _canonical(held[-1]) == _canonical(record):
                    return False
                replace_file(path, json.dumps([*held, record], indent=4))
            return True


def handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _host(self) -> str | None:
            host = receiver.host_of(self.headers.get("Authorization"))
            if host is None:
                self._answer(401, {"error": "a host's token is required (Authorization: Bearer)"})
            return host

        def do_GET(self):
            if self._host() is None:
                return
            if self.path == "/config":
                self._answer(200, DATAHUB_CONFIG)
            else:
                self._answer(404, {"error": f"no such endpoint: {self.path}"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            host = self._host()
            if host is None:
                return
            source = self.headers.get(SOURCE_HEADER) or ""
            try:
                if not SOURCE.match(source) or source.endswith(".jsonl") != (self.path == OPENLINEAGE_PATH):
                    raise ValueError(f"{SOURCE_HEADER} must name the local file the record is from, of its kind")
                sent = json.loads(body)
                if len(body) < length or not isinstance(sent, dict):
                    raise ValueError("a request without a whole JSON object")
                if self.path == OPENLINEAGE_PATH:
                    if not all(k in sent for k in ("eventTime", "run", "job")):
                        raise ValueError("not an OpenLineage run event (eventTime, run and job are required)")
                    record, status = sent, 201
                elif self.path in (DATAHUB_INGEST_PATH, DATAHUB_ENTITY_PATH):
                    record, status = datahub_record(self.path, sent), 200
                else:
                    self._answer(404, {"error": f"no such endpoint: {self.path}"})
                    return
            except Exception as error:  # a record this receiver cannot read is refused, not stored half
                self._answer(400, {"error": f"{type(error).__name__}: {error}"[:500]})
                return
            receiver.store(host, source, record)
            self._answer(status, {})

        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the sender gave up: it sends again
                pass

        def log_message(self, format, *args):  # one line per request, without its headers (the token)
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True


def main() -> None:
    from nyc_taxi.core import team

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    settings = get_settings()
    datahub_records_dir(settings).mkdir(parents=True, exist_ok=True)
    receiver = Receiver(settings, team.LineageReceiver(settings).tokens())
    server = Server((args.address, args.port), handler(receiver))
    print(f"lineage receiver on {args.address}:{args.port}, for {', '.join(sorted(receiver.tokens))}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
