"""The spool: a step hands what it read and wrote to a background recorder and goes on with its work.

Building the OpenLineage events and DataHub records costs a fresh process about a second (importing
the two SDKs is most of it) — more than the own work of a small Metaflow step. So a step only writes
plain entries (JSON, standard library) into ``<state>/lineage/spool/<tool>-<configuration>/`` and
makes sure one recorder process runs for them (``python -m <recorder module>``). The recorder imports
the SDKs once, turns the entries into records in the order they were spooled (into the outbox: the
local files), ships what is pending, and waits for the next entry; after the entry that ends a run it
leaves. The step that ends a run (the last one, or one that fails) waits until the spool is empty, so
when a run is over its lineage is complete, as if every step had recorded it itself.

Nothing is lost when a recorder dies: an entry leaves the spool only after its records are in the
outbox, and whoever finds entries with no recorder alive (the next step, the run's end, a reader of
the lineage, `bash run lineage-replay`) records them itself. The directory is per configuration (a
hash of the settings that shape records and shipping), so a recorder never records another
configuration's entries with its own.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from nyc_taxi.core.settings import Settings, get_settings

log = logging.getLogger(__name__)

# Per-run settings travel in the entries; everything else of the configuration names the directory.
_PER_RUN = {"openlineage_parent_id", "openlineage_root_parent_id", "parent_airflow_task"}
IDLE_SECONDS = 120.0  # a recorder whose run was killed (no entry ends it) leaves after this long idle
LOG_BYTES = 1_000_000  # the recorder's log is started afresh beyond this size
POLL_SECONDS = 0.005  # how often a recorder looks for entries, and a waiting step for the end

Convert = Callable[[dict], None]  # one entry -> its records in the outbox
Ship = Callable[[list[dict]], None]  # after a batch of entries is recorded: ship what is pending


def _configuration(settings: Settings) -> str:
    values = {
        name: value.get_secret_value() if hasattr(value, "get_secret_value") else str(value)
        for name, value in sorted(vars(settings).items())
        if name not in _PER_RUN
    }
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:12]


class Spool:
    """The entries one tool's steps spooled under one configuration, and the recorder that records them."""

    def __init__(self, tool: str, recorder: str, settings: Settings | None = None):
        self.settings = settings or get_settings()
        self.tool, self.recorder = tool, recorder
        self.directory = self.settings.lineage_dir / "spool" / f"{tool}-{_configuration(self.settings)}"

    # ---- the step's side: cheap ------------------------------------------------------------------
    def put(self, entry: dict) -> None:
        """Add an entry, whole or not at all (a reader never sees half of it)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"{time.time_ns():020d}-{os.getpid()}"
        tmp = self.directory / f".{name}.tmp"
        tmp.write_text(json.dumps(entry, default=str))
        os.replace(tmp, self.directory / f"{name}.json")

    def pending(self) -> list[Path]:
        return sorted(self.directory.glob("*.json")) if self.directory.is_dir() else []

    # Locks are the kernel's (flock): one dies with the last process holding it, so a dead recorder
    # never looks alive. "recorder": a recorder lives; "batch": entries are being recorded and shipped.
    def _take(self, name: str, wait: bool = False) -> int | None:
        """The lock's file descriptor, locked; None if another process holds it (and ``wait`` is off)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / f".{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def _free(self, name: str) -> bool:
        fd = self._take(name)
        if fd is not None:
            os.close(fd)
        return fd is not None

    def recorder_alive(self) -> bool:
        return not self._free("recorder")

    def start_recorder(self) -> None:
        """Start a recorder unless one lives. The recorder lock is taken here and handed to the new
        process, so from this moment on the recorder counts as alive (no second one, no step that
        records itself while it starts). Its own session: it outlives the step, and no signal meant
        for the step's process group reaches it; its output goes to ``recorder.log``."""
        alive = self._take("recorder")
        if alive is None:
            return
        try:
            if self.log_path.exists() and self.log_path.stat().st_size > LOG_BYTES:
                os.replace(self.log_path, self.log_path.with_suffix(".log.1"))
            with open(self.log_path, "a") as out:
                subprocess.Popen(
                    [sys.executable, "-m", self.recorder, str(self.directory), str(alive)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=(alive,),
                )
        finally:
            os.close(alive)  # the recorder holds it now

    @property
    def log_path(self) -> Path:
        return self.directory / "recorder.log"

    def warnings_about(self, text: str) -> list[str]:
        """The recorder's warnings that name ``text`` (a run), to repeat in that run's own output."""
        if not self.log_path.exists():
            return []
        return [line for line in self.log_path.read_text().splitlines() if " WARNING " in line and text in line]

    def wait_until_recorded(self, convert: Convert, ship: Ship, timeout: float) -> None:
        """Return once every entry is recorded and shipped (the end of a run). A recorder that is gone
        leaves its entries to this process; one that is still busy after ``timeout`` finishes alone."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.pending() and self._free("batch"):
                return
            if not self.recorder_alive():
                self.record_pending(convert, ship)
                return
            if time.monotonic() > deadline:
                log.warning("lineage still being recorded in the background (%s)", self.directory)
                return
            time.sleep(POLL_SECONDS)

    # ---- the recorder's side -------------------------------------------------------------------
    def record_pending(self, convert: Convert, ship: Ship) -> list[dict]:
        """Record every pending entry in spool order, then ship; one batch at a time across processes.
        Returns the entries recorded. An entry that cannot be recorded is set aside (``.failed``)."""
        done, batch = [], self._take("batch", wait=True)
        try:
            for path in self.pending():
                try:
                    entry = json.loads(path.read_text())
                except FileNotFoundError:  # recorded by another process meanwhile
                    continue
                try:
                    convert(entry)
                except Exception as error:  # lineage must never fail the work; keep the entry to look at
                    log.warning("lineage entry %s not recorded: %s", path.name, error)
                    os.replace(path, path.with_suffix(".failed"))
                    continue
                path.unlink(missing_ok=True)
                done.append(entry)
            if done:
                ship(done)
        finally:
            os.close(batch)
        return done

    def serve(self, convert: Convert, ship: Ship, ends_run: Callable[[dict], bool], alive: int) -> None:
        """The recorder's life, holding the recorder lock ``alive``: record entries as they come; leave
        after an entry that ends a run (when nothing else is pending), after ``IDLE_SECONDS`` without
        entries, or when the state is gone."""
        try:
            idle_since = time.monotonic()
            while self.directory.is_dir() and time.monotonic() - idle_since < IDLE_SECONDS:
                if not self.pending():
                    time.sleep(POLL_SECONDS)
                    continue
                done = self.record_pending(convert, ship)
                idle_since = time.monotonic()
                if any(ends_run(entry) for entry in done) and not self.pending():
                    break
        finally:
            os.close(alive)
        # an entry spooled while this recorder was leaving: its step found the recorder alive
        if self.pending():
            self.start_recorder()


def recorder_main(tool: str, recorder: str, convert: Convert, ship: Ship, ends_run: Callable[[dict], bool]) -> None:
    """``python -m <recorder> <spool directory> <recorder lock fd>``: serve the spool of the spawning
    step's configuration, holding the lock the step took for it."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    directory, alive = Path(sys.argv[1]), int(sys.argv[2])
    spool = Spool(tool, recorder)
    if directory != spool.directory:
        sys.exit(f"{directory} is not this configuration's spool ({spool.directory})")
    spool.serve(convert, ship, ends_run, alive)
