"""Write locally, then ship: every event and record goes to a file first, and leaves for its
destination from there, so a destination that is down loses nothing. A step's files leave from a
process of its own (a destination down slows no step); the run's last step sends what is left of the
run before it ends (within ``ship_seconds``), so a finished run's lineage has arrived, or its log says
where it waits.

The destinations are the user's own settings, read by each tool's own client:

- OpenLineage: the client's configuration (``openlineage.yml`` where ``OPENLINEAGE_CONFIG``, the working
  directory or ``~/.openlineage`` holds one, ``OPENLINEAGE__TRANSPORT__*``, or ``OPENLINEAGE_URL``).
  ``OPENLINEAGE_DISABLED=true``: no event is made at all.
- DataHub: ``DATAHUB_GMS_URL`` (and ``DATAHUB_GMS_TOKEN``) or ``~/.datahubenv`` (``datahub init``).

A destination that is not set keeps its files pending; ``metaflow-lineage ship`` sends them once it is.
The outbox is ``METAFLOW_LINEAGE_DIR``, else ``metaflow-lineage`` in the user's state folder. A pending
file holds one step's events (a JSON list) or its DataHub records (a metadata file, as ``datahub check
metadata-file`` and ``datahub ingest`` read); a file moves to ``shipped/`` once its destination took it,
to ``refused/`` when the server refused it (a 4xx: later files go on); what a background shipper could
not send it says in ``problems.log``. A run's files are named by the time they were written and leave
in that order, one shipper at a time, so a run's START goes before its end. ``ship_seconds`` is checked
between files: a send in progress runs to its client's own timeouts and retries. Sending a file twice
sends the same events and records again (run ids are derived, records are upserts and patches that
add). The outbox is the user's alone (0700, refused otherwise): what is in it is sent with the user's
DataHub token.

The outbox holds finished events as JSON, and the user's transport sends them as they are: the
transports that send JSON and raise when they cannot (http, file, console) are supported; any other
(kafka, which logs a failed delivery without raising; composite; the ones that take only the client's
own event objects) is refused with a clear line, and its files wait.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from metaflow_lineage.context import first_of_run

log = logging.getLogger(__name__)
EVENTS, RECORDS = ".openlineage.json", ".datahub.json"


def outbox_dir() -> Path:
    """``METAFLOW_LINEAGE_DIR``, else the user's state folder (``$XDG_STATE_HOME``, else ``~/.local/state``):
    not beside Metaflow's datastore, whose ``.metaflow`` folder Metaflow looks for upwards."""
    if os.environ.get("METAFLOW_LINEAGE_DIR"):
        return Path(os.environ["METAFLOW_LINEAGE_DIR"])
    state = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(state) / "metaflow-lineage"


def openlineage_disabled() -> bool:
    return os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true"


# the transports that send an event as JSON (Serde) whatever it is, and raise when they cannot: they take the
# outbox's events as they are, and a file they could not send stays pending (Kafka's logs a failed delivery
# without raising: the file would be lost)
JSON_TRANSPORTS = {"http", "file", "console"}
# background shippers give up waiting for the outbox after this long (the next step's shipper, or `ship`, goes on)
BACKGROUND_SECONDS = 600


def _openlineage_transport():
    """The user's OpenLineage transport, or None when none is set (the client would print to the console)."""
    from openlineage.client import OpenLineageClient

    client = OpenLineageClient()
    configured = bool((client.config.transport or {}).get("type")) or bool(os.environ.get("OPENLINEAGE_URL"))
    if not configured or client.transport.kind == "noop":  # noop: OPENLINEAGE_DISABLED while shipping
        return None
    if client.transport.kind not in JSON_TRANSPORTS:
        raise ValueError(
            f"the OpenLineage transport {client.transport.kind!r} takes only the client's own event objects: "
            f"metaflow-lineage ships from files, to {', '.join(sorted(JSON_TRANSPORTS))}"
        )
    return client.transport


def _datahub_emitter():
    """The user's DataHub, or None when none is set."""
    from datahub.cli.config_utils import MissingConfigError, load_client_config
    from datahub.ingestion.graph.client import DataHubGraph

    try:
        return DataHubGraph(load_client_config())
    except MissingConfigError:  # neither the environment nor ~/.datahubenv names one
        return None
    except SystemExit as exit:  # DataHub's client exits on a ~/.datahubenv it cannot read
        raise ValueError(f"DataHub's settings (~/.datahubenv) could not be read (exit {exit.code})") from None


class Outbox:
    def __init__(self, root: Path | None = None):
        self.root = root or outbox_dir()
        self.pending, self.shipped = self.root / "pending", self.root / "shipped"
        self.refused = self.root / "refused"  # what a server refused (a 4xx): to look at, not to send again

    def _ensure_root(self) -> None:
        """The outbox, the user's alone: what is in it is sent with the user's DataHub token, so one that
        another user owns or may write to is refused."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = self.root.stat()
        if found.st_uid != os.getuid() or found.st_mode & 0o022:
            raise PermissionError(
                f"the lineage outbox {self.root} is not the user's alone (owner {found.st_uid}, mode "
                f"{found.st_mode & 0o777:o}): its files would be sent with the user's DataHub token"
            )

    def _write(self, path: Path, write) -> Path:
        self._ensure_root()
        path.parent.mkdir(mode=0o700, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        os.close(os.open(partial, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600))  # the user's alone
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
        self._ensure_root()
        return first_of_run(self.root / "runs", flow, run_id)

    def pending_files(self, prefix: str = "") -> list[Path]:
        """The files waiting, by name: a run's in the order they were written (their names say when)."""
        return sorted(p for p in self.pending.glob(f"{prefix}*.json") if not p.name.startswith("."))

    def ship(self, prefix: str = "", *, seconds: float | None = None) -> list[str]:
        """Send the pending files whose names start with ``prefix`` (a run's: ``Flow.run id.``), in the
        order they were written, to the destinations that are set; returns what could not be sent. One
        shipper at a time (a lock on the outbox, released if its process dies): a file is sent once, and
        a later one never before an earlier. A destination that fails is not tried again in this call: its
        other files wait too. After ``seconds`` (waiting for the lock included), what is left waits."""
        deadline = None if seconds is None else time.monotonic() + seconds
        with self._lock(deadline) as held:
            if not held:
                return [
                    f"lineage kept for later in {self.pending}: another shipper held the outbox until the time to ship ran out"
                ]
            return self._ship(self.pending_files(prefix), deadline)

    @contextlib.contextmanager
    def _lock(self, deadline: float | None):
        self._ensure_root()
        with open(self.root / "ship.lock", "a") as handle:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline is not None and time.monotonic() > deadline:
                        yield False
                        return
                    time.sleep(0.05)
            yield True

    def _ship(self, paths: list[Path], deadline: float | None) -> list[str]:
        problems: list[str] = []
        senders = {}
        for kind, sender in ((EVENTS, _openlineage_sender), (RECORDS, _datahub_sender)):
            try:
                senders[kind] = sender() if any(p.name.endswith(kind) for p in paths) else None
            except Exception as error:  # a setting that cannot be used: its files wait
                senders[kind] = None
                problems.append(f"lineage kept for later in {self.pending}: {error}")
        for number, path in enumerate(paths):
            if deadline is not None and time.monotonic() > deadline:
                problems.append(
                    f"lineage kept for later in {self.pending}: {len(paths) - number} file(s) left when the time to ship ran out"
                )
                break
            kind = EVENTS if path.name.endswith(EVENTS) else RECORDS
            if senders[kind] is None or not path.exists():
                continue  # its destination is not set (or failed in this call): it waits
            try:
                senders[kind](path)
                self.shipped.mkdir(mode=0o700, parents=True, exist_ok=True)
                path.replace(self.shipped / path.name)
            except Exception as error:
                if _refused(error):  # the server said no to this file: set aside, so that later files go on
                    self.refused.mkdir(mode=0o700, parents=True, exist_ok=True)
                    path.replace(self.refused / path.name)
                    problems.append(f"lineage refused by the server, kept in {self.refused / path.name}: {error}")
                    continue
                senders[kind] = None  # a destination down: the file stays pending, the flow goes on
                problems.append(f"lineage kept for later in {path.parent}: {type(error).__name__}: {error}")
        return problems


def _refused(error: BaseException) -> bool:
    """Whether a server refused what the request carried (400, 409, 413, 415, 422), in the error or the one it
    was raised from. A refusal of the request itself (401, 403, 404: a token, a key, an address) is a
    setting to mend: the files wait for it."""
    while error is not None:
        status = getattr(getattr(error, "response", None), "status_code", None)
        if status is not None:
            return status in (400, 409, 413, 415, 422)
        error = error.__cause__
    return False


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


def ship_in_background(outbox: Outbox, prefix: str) -> None:
    """Ship what is pending of a run (``prefix``) from a process of its own, so that a destination down
    slows no step; what it could not send it says in the outbox's ``problems.log``."""
    outbox._ensure_root()
    log_file = open(outbox.root / "problems.log", "a")  # noqa: SIM115 - the child's, from here on
    os.chmod(log_file.name, 0o600)
    with log_file:
        subprocess.Popen(
            [sys.executable, "-m", "metaflow_lineage", "ship", "--dir", str(outbox.root), "--run", prefix]
            + ["--seconds", str(BACKGROUND_SECONDS)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            start_new_session=True,  # not stopped with the step's process group
        )
