"""The lineage receiver: where the hosts of the team deployment ship their lineage, on control.

Each host writes its lineage to its own files first (``outbox``) and ships them (``delivery``, the same
code that ships to DataHub or an OpenLineage server) to this program, which speaks the two endpoints the
clients already use: OpenLineage's (``POST /api/v1/lineage``) and DataHub GMS's ingestion
(``GET /config``, ``POST /aspects?action=ingestProposal``, ``POST /entities?action=ingest``). What it
accepts goes into control's own lineage files, one per file of the sending host
(``from-<host>.<file>``, with the file's head), so every reader on control (the site, the store, `lineage-replay` to a
real server) sees the whole deployment.

- **Who may send.** Every request carries a host's token (``Authorization: Bearer``): each host has its
  own, and the receiver's record maps each token to its host. Anything else is refused (401) and stored
  nowhere.
- **Once.** Each request says which file of its host the record is from and its place there, with the
  file's head (``X-Lineage-Source``, ``X-Lineage-Position``: ``delivery.position``). The receiver stores
  the record at the place after the last one it holds of that file, answers one it holds already as
  accepted without storing it (sent again: its answer was lost, or it came late), and refuses one past
  that place (409: records it never got). It counts each file's records once, from its files at the
  first request, so a restart keeps them.
- **Only what a server takes.** An OpenLineage event is checked against the spec (a facet of a schema the
  spec lacks passes, as a server takes it), a DataHub record against DataHub's model as GMS checks it
  (``datahub_spec``); what fails is refused (400, 422) with the reasons, as the server behind control
  would refuse it, so it stops its host's shipping there and not control's onward shipping later.
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
from nyc_taxi.lineage.datahub_spec import record_errors
from nyc_taxi.lineage.spec import validation_errors
from nyc_taxi.lineage.write.delivery import POSITION_HEADER, SOURCE_HEADER
from nyc_taxi.lineage.write.destinations import datahub_records_dir, openlineage_events_dir
from nyc_taxi.lineage.write.outbox import read_datahub_file, read_openlineage_file, replace_file

OPENLINEAGE_PATH = "/api/v1/lineage"
DATAHUB_INGEST_PATH = "/aspects?action=ingestProposal"
DATAHUB_ENTITY_PATH = "/entities?action=ingest"
# What DataHub GMS answers on /config: DataHub's emitter checks it talks to GMS, not to the frontend.
DATAHUB_CONFIG = {"noCode": "true", "versions": {"acryldata/datahub": {"version": "v1.2.0"}}, "models": {}}


# What a source file of a shipping host is called: a tool's OpenLineage events, or a DataHub segment
SOURCE = re.compile(r"^[A-Za-z0-9_-]+(_events\.jsonl|_mcps\.[0-9]+-[0-9]+\.json)$")
POSITION = re.compile(r"^([0-9]+) ([0-9a-f]{16})$")
LARGEST = 16 * 1024 * 1024  # bytes of one request's body: more is refused unread (413)


def stored_path(settings: Settings, host: str, source: str, head: str) -> Path:
    """Where the records of a host's source file go: a file of control's own, beside control's (readers
    take every file there), named by the host, the file's name and its head (its first record's hash:
    another file of the same name is another file)."""
    folder = openlineage_events_dir(settings) if source.endswith(".jsonl") else datahub_records_dir(settings)
    stem, suffix = source.rsplit(".", 1)
    return folder / f"from-{host}.{stem}.{head}.{suffix}"  # in the host's order of its files


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


class Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Receiver:
    """What the receiver stores, for a state directory: each host's records, each once."""

    def __init__(self, settings: Settings, tokens: dict[str, str] | None = None):
        self.settings, self.lock = settings, threading.Lock()
        self.tokens = tokens if tokens is not None else self._tokens()
        self.held: dict[Path, int] = {}  # each stored file's records, counted once

    def _tokens(self) -> dict[str, str]:
        from nyc_taxi.core import team

        return team.LineageReceiver(self.settings).tokens()

    def host_of(self, authorization: str | None) -> str | None:
        """The host whose token the request carries (the record read again for one not known yet: a host
        added since the receiver started); None for anything else."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        for tokens in (self.tokens, None):
            if tokens is None:
                tokens = self.tokens = self._tokens()
            for host, known in tokens.items():
                if hmac.compare_digest(token.encode(), known.encode()):
                    return host
        return None

    def _count(self, path: Path) -> int:
        """The records ``path`` holds; a line an interrupted write left half is cut off first."""
        if path not in self.held:
            if path.suffix == ".jsonl":
                if path.exists():
                    text = path.read_bytes()
                    whole = text[: text.rfind(b"\n") + 1]
                    if len(whole) < len(text):
                        with path.open("r+b") as out:
                            out.truncate(len(whole))
                self.held[path] = len(read_openlineage_file(path))
            else:
                self.held[path] = len(read_datahub_file(path))
        return self.held[path]

    def store(self, host: str, source: str, index: int, head: str, record: dict) -> bool:
        """Keep ``record``, the ``index``-th of ``host``'s file ``source`` (whose first record's hash is
        ``head``): stored when it is the next one, answered without storing when it is held already;
        Refused (409) when records before it never came. Whether it was stored."""
        path = stored_path(self.settings, host, source, head)
        with self.lock:
            held = self._count(path)
            if index < held:
                return False
            if index > held:
                raise Refused(
                    409,
                    f"{held} records of {source} are held here, so the next one is {held}, not {index} (this "
                    f"receiver lost records it had accepted): delete {host}'s ledger for this receiver "
                    "(<state>/lineage/delivery/) and it sends the file again, each record stored once",
                )
            new = not path.exists()
            path.parent.mkdir(parents=True, exist_ok=True)
            size = path.stat().st_size if path.exists() else 0
            try:
                if path.suffix == ".jsonl":
                    with path.open("a") as out:
                        out.write(json.dumps(record) + "\n")
                        out.flush()
                        os.fsync(out.fileno())
                else:  # a segment written whole, never half
                    replace_file(path, json.dumps([*read_datahub_file(path), record], indent=4))
                if new:  # the file's name, durable too: a record answered as stored is not lost with it
                    directory = os.open(path.parent, os.O_RDONLY)
                    try:
                        os.fsync(directory)
                    finally:
                        os.close(directory)
            except BaseException:  # not stored: the file as it was, and counted again from it
                if path.suffix == ".jsonl" and path.exists():
                    with path.open("r+b") as out:
                        out.truncate(size)
                self.held.pop(path, None)
                raise
            self.held[path] = held + 1
            return True


def handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _host(self) -> str | None:
            host = receiver.host_of(self.headers.get("Authorization"))
            if host is None:
                self.close_connection = True  # what else a stranger sent is not read
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
            host = self._host()  # before the body is read: nothing of a stranger's is
            if host is None:
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if length < 0:
                    raise Refused(400, "a negative Content-Length")
                if length > LARGEST:
                    raise Refused(413, f"a record of {length:,} bytes: at most {LARGEST:,}")
                body = self.rfile.read(length)
                source = self.headers.get(SOURCE_HEADER) or ""
                place = POSITION.match(self.headers.get(POSITION_HEADER) or "")
                if not SOURCE.match(source) or source.endswith(".jsonl") != (self.path == OPENLINEAGE_PATH):
                    raise Refused(400, f"{SOURCE_HEADER} must name the local file the record is from, of its kind")
                if not place:
                    raise Refused(
                        400, f"{POSITION_HEADER} must give the record's place in its file and the file's head"
                    )
                sent = json.loads(body)
                if len(body) < length or not isinstance(sent, dict):
                    raise Refused(400, "a request without a whole JSON object")
                if self.path == OPENLINEAGE_PATH:
                    if not all(k in sent for k in ("eventTime", "eventType", "run", "job")):  # what control reads
                        raise Refused(400, "not an OpenLineage run event (eventTime, eventType, run and job)")
                    record, status, errors = sent, 201, validation_errors(sent, any_facet=True)
                elif self.path in (DATAHUB_INGEST_PATH, DATAHUB_ENTITY_PATH):
                    record, status = datahub_record(self.path, sent), 200
                    errors = record_errors(record)
                else:
                    raise Refused(404, f"no such endpoint: {self.path}")
                if errors:  # what the server behind control would refuse is refused here, where it is sent
                    raise Refused(400 if status == 201 else 422, "; ".join(errors)[:1000])
                receiver.store(host, source, int(place.group(1)), place.group(2), record)
            except Refused as refused:
                self._refuse(host, refused.status, str(refused))
                return
            except Exception as error:  # a record this receiver cannot read or store is refused, not kept half
                self._refuse(host, 400, f"{type(error).__name__}: {error}"[:500])
                return
            self._answer(status, {})

        def _refuse(self, host: str, status: int, reason: str) -> None:
            """The reason in the answer (as GMS gives it, ``message``, which DataHub's emitter reports) and in
            this receiver's log: a refusal stops its host's shipping there until it is mended."""
            self.close_connection = True  # a body it did not read is not taken for the next request
            sys.stderr.write(f"refused {host}'s {self.headers.get(SOURCE_HEADER)} record: {status} {reason}\n")
            self._answer(status, {"error": reason, "message": reason, "status": status})

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

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    settings = get_settings()
    datahub_records_dir(settings).mkdir(parents=True, exist_ok=True)
    receiver = Receiver(settings)
    server = Server((args.address, args.port), handler(receiver))
    print(f"lineage receiver on {args.address}:{args.port}, for {', '.join(sorted(receiver.tokens))}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
