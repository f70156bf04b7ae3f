"""Runs real flows with Metaflow (local datastore and metadata), each in a folder of its own, with a
home of its own (no ~/.datahubenv or ~/.openlineage of the machine's) and OpenLineage's file transport
as the user's setting."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

FLOWS = Path(__file__).parent / "flows"


@dataclass
class Place:
    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def outbox(self) -> Path:
        return self.root / "outbox"

    @property
    def events_file(self) -> Path:
        return self.root / "openlineage-events.jsonl"

    def events(self) -> list[dict]:
        """What the user's OpenLineage transport received (the file transport: one event per line)."""
        if not self.events_file.exists():
            return []
        return [json.loads(line) for line in self.events_file.read_text().splitlines() if line.strip()]

    def run(self, flow: str, *, resume: bool = False, **more_env: str):
        from metaflow import Runner

        runner = Runner(str(FLOWS / flow), show_output=False, env={**self.env, **more_env}, cwd=str(self.root))
        with runner:
            executing = runner.resume() if resume else runner.run()
            return executing.returncode, executing.run.id, executing.stdout + executing.stderr


def datahub_check(path: Path) -> str:
    """``datahub check metadata-file``: DataHub's own check of a metadata file; its output when it fails."""
    import subprocess

    datahub = Path(sys.executable).parent / "datahub"
    done = subprocess.run([str(datahub), "check", "metadata-file", str(path)], capture_output=True, text=True)
    return "" if done.returncode == 0 else done.stdout + done.stderr


class LineageServer:
    """A stand-in for an OpenLineage server and DataHub's GMS on 127.0.0.1 (no DataHub server runs here):
    it answers GMS's /config as GMS does, and keeps every body it was sent, by path."""

    CONFIG: ClassVar = {"noCode": "true", "versions": {"acryldata/datahub": {"version": "v1.2.0"}}, "models": {}}

    def __init__(self, refuse: str | None = None, status: int = 400):
        """``refuse``: a body holding this text is answered ``status``, as a server answers what it will not take."""
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self._answer(json.dumps(LineageServer.CONFIG if self.path == "/config" else {}).encode())

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if refuse and refuse in body.decode():
                    self._answer(b'{"message": "refused"}', status)
                    return
                received.append((self.path, json.loads(body)))
                self._answer(b"{}")

            def _answer(self, body: bytes, status: int = 200):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self, path_start: str) -> list[dict]:
        return [body for path, body in self.received if path.startswith(path_start)]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> int:
    """A port nothing listens on: connections to it are refused."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
