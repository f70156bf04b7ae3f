"""A lineage server for the delivery tests, in a process of its own on 127.0.0.1: it speaks OpenLineage's
endpoint (POST /api/v1/lineage) and DataHub GMS's ingestion endpoint (GET /config, POST
/aspects?action=ingestProposal) and appends every request to a JSON-lines log: what came, when it
came, when the answer went, with which status and headers.

    python tests/lineage_receiver.py LOG [--port N] [--mode ok|fail-first:N|hang|die-after:N]

- ok: accepts everything (OpenLineage 201, DataHub 200);
- fail-first:N: answers 500 to the first N records, then accepts (a server that comes back);
- hang: accepts the connection and never answers (a stuck server);
- die-after:N: accepts N records, then the process exits at once (a server killed mid-run).

It prints its port on the first line of stdout. The tests drive it with ``Receiver`` (below) and
compare what it accepted with the local lineage files; no product code here.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

OPENLINEAGE_PATH = "/api/v1/lineage"
DATAHUB_INGEST_PATH = "/aspects?action=ingestProposal"
# What DataHub GMS answers on /config (the emitter checks it is talking to GMS, not the frontend).
DATAHUB_CONFIG = {"noCode": "true", "versions": {"acryldata/datahub": {"version": "v1.2.0"}}, "models": {}}


# ---- the tests' side: start, stop, read what it accepted ------------------------------------------------


@dataclass
class Receiver:
    """A lineage server process: start it in a mode, read its log, kill it, start it again on its port."""

    log: Path
    port: int = 0
    process: subprocess.Popen | None = None
    lives: list[str] = field(default_factory=list)

    def start(self, mode: str = "ok") -> Receiver:
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(self.log), "--port", str(self.port), "--mode", mode],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.port = int(self.process.stdout.readline())
        self.lives.append(mode)
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
        if self.process:
            self.process.wait()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def accepted(self, path: str) -> list[dict]:
        return [r for r in self.requests() if r["path"] == path and r["status"] in (200, 201)]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connections are refused


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


# ---- the server ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("log")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", default="ok")
    args = parser.parse_args()
    mode, _, number = args.mode.partition(":")
    lock, records = threading.Lock(), {"count": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out at once, as a real server's do

        def _log(self, entry: dict) -> None:
            with lock, open(args.log, "a") as out:
                out.write(json.dumps(entry) + "\n")
                out.flush()

        def do_GET(self):
            body = json.dumps(DATAHUB_CONFIG if self.path == "/config" else {}).encode()
            self._answer(200, body)

        def do_POST(self):
            received = time.time()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if mode == "hang":
                self._log({"path": self.path, "received": received, "status": None, "headers": dict(self.headers)})
                time.sleep(3600)  # the client gives up; this thread never answers
                return
            with lock:
                records["count"] += 1
                nth = records["count"]
            status = (
                500 if mode == "fail-first" and nth <= int(number) else (201 if self.path == OPENLINEAGE_PATH else 200)
            )
            self._log(
                {
                    "path": self.path,
                    "received": received,
                    "status": status,
                    "headers": dict(self.headers),
                    "body": json.loads(body) if body else None,
                }
            )
            self._answer(status, b"{}")
            if mode == "die-after" and nth >= int(number):
                self.wfile.flush()
                os._exit(0)  # gone, between two requests, like a killed server

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
