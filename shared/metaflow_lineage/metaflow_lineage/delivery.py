"""Write locally, then ship: every event and record goes to a file first, and leaves for its
destination from there, so a destination that is down loses nothing. A step's files leave from a
process of their own (a destination down slows no step); the run's last step sends what is left of
the run before it ends, so a finished run's lineage has arrived, or its log says where it waits.

The destinations are the user's own settings, read by each tool's own client:

- OpenLineage: the client's configuration (``openlineage.yml`` where ``OPENLINEAGE_CONFIG``, the working
  directory or ``~/.openlineage`` holds one, ``OPENLINEAGE__TRANSPORT__*``, or ``OPENLINEAGE_URL``).
  ``OPENLINEAGE_DISABLED=true``: no event is made at all.
- DataHub: ``DATAHUB_GMS_URL`` (and ``DATAHUB_GMS_TOKEN``) or ``~/.datahubenv`` (``datahub init``).

A destination that is not set keeps its files pending; ``metaflow-lineage ship`` sends them once it is.
The outbox is ``METAFLOW_LINEAGE_DIR``, else ``.metaflow/lineage`` in the working directory, beside
Metaflow's local datastore. A pending file holds one step's events (a JSON list) or its DataHub
records (a metadata file, as ``datahub check metadata-file`` and ``datahub ingest`` read); a file
moves to ``shipped/`` once its destination took it; what a background shipper could not send it says in
``problems.log``. Sending it twice sends the same events and
records again (run ids are derived, records are upserts).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from metaflow_lineage.context import first_of_run

log = logging.getLogger(__name__)
EVENTS, RECORDS = ".openlineage.json", ".datahub.json"


def outbox_dir() -> Path:
    return Path(os.environ.get("METAFLOW_LINEAGE_DIR") or Path.cwd() / ".metaflow" / "lineage")


def openlineage_disabled() -> bool:
    return os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true"


def _openlineage_transport():
    """The user's OpenLineage transport, or None when none is set (the client would print to the console)."""
    from openlineage.client import OpenLineageClient

    client = OpenLineageClient()
    configured = bool((client.config.transport or {}).get("type")) or bool(os.environ.get("OPENLINEAGE_URL"))
    return client.transport if configured else None


def _datahub_emitter():
    """The user's DataHub, or None when none is set."""
    from datahub.cli.config_utils import MissingConfigError, load_client_config
    from datahub.ingestion.graph.client import DataHubGraph

    try:
        return DataHubGraph(load_client_config())
    except MissingConfigError:  # neither the environment nor ~/.datahubenv names one
        return None


class Outbox:
    def __init__(self, root: Path | None = None):
        self.root = root or outbox_dir()
        self.pending, self.shipped = self.root / "pending", self.root / "shipped"

    def _write(self, path: Path, write) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        write(partial)
        partial.replace(path)  # whole or absent: a reader never sees half a file
        return path

    def put(self, key: str, events: list[dict], records: list) -> list[Path]:
        """One step's events and records, as pending files named ``key``."""
        from datahub.ingestion.sink.file import write_metadata_file

        paths = []
        if events:
            paths.append(self._write(self.pending / f"{key}{EVENTS}", lambda p: p.write_text(json.dumps(events))))
        if records:
            paths.append(self._write(self.pending / f"{key}{RECORDS}", lambda p: write_metadata_file(p, records)))
        return paths

    def first_of_run(self, flow: str, run_id: str) -> bool:
        """True once per flow run: for the first step of it that runs."""
        return first_of_run(self.root / "runs", flow, run_id)

    def pending_files(self, prefix: str = "") -> list[Path]:
        return sorted(p for p in self.pending.glob(f"{prefix}*.json") if not p.name.startswith("."))

    def ship(self, paths: list[Path] | None = None, *, wait: bool = False) -> list[str]:
        """Send pending files to the destinations that are set; returns what could not be sent. A file
        another shipper is sending is skipped (or, with ``wait``, waited for). A destination that fails
        is not tried again in this call: its other files wait too."""
        paths = self.pending_files() if paths is None else [p for p in paths if p.exists()]
        senders = {
            EVENTS: _openlineage_sender() if any(p.name.endswith(EVENTS) for p in paths) else None,
            RECORDS: _datahub_sender() if any(p.name.endswith(RECORDS) for p in paths) else None,
        }
        problems: list[str] = []
        for path in paths:
            kind = EVENTS if path.name.endswith(EVENTS) else RECORDS
            if senders[kind] is None:
                continue  # its destination is not set (or failed in this call): it waits
            try:
                with _claimed(path, wait) as claimed:
                    if claimed:
                        senders[kind](path)
                        self.shipped.mkdir(parents=True, exist_ok=True)
                        path.replace(self.shipped / path.name)
            except Exception as error:  # a destination down: the file stays pending, the flow goes on
                senders[kind] = None
                problems.append(f"lineage kept for later in {path.parent}: {type(error).__name__}: {error}")
        return problems


@contextlib.contextmanager
def _claimed(path: Path, wait: bool):
    """True while this process holds the file (an advisory lock, released if the process dies)."""
    try:
        handle = open(path)  # noqa: SIM115 - held for the lock's life
    except FileNotFoundError:
        yield False  # shipped meanwhile
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield path.exists()  # another shipper may have sent it before this one held it


def _openlineage_sender():
    transport = _openlineage_transport()
    if transport is None:
        return None

    def send(path: Path) -> None:
        for event in json.loads(path.read_text()):
            transport.emit(event)  # the outbox holds events as JSON: the user's transport sends them as they are

    return send


def _datahub_sender():
    emitter = _datahub_emitter()
    if emitter is None:
        return None

    def send(path: Path) -> None:
        from datahub.ingestion.source.file import read_metadata_file

        for record in read_metadata_file(path):
            emitter.emit(record)

    return send


def ship_in_background(outbox: Outbox, paths: list[Path]) -> None:
    """Ship ``paths`` from a process of their own, so that a destination down slows no step; what it could
    not send it says in the outbox's ``problems.log``."""
    if not paths:
        return
    log_file = open(outbox.root / "problems.log", "a")  # noqa: SIM115 - the child's, from here on
    with log_file:
        subprocess.Popen(
            [sys.executable, "-m", "metaflow_lineage", "ship", "--dir", str(outbox.root), *map(str, paths)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            start_new_session=True,  # not stopped with the step's process group
        )
