"""The local lineage files: every record is written here first, whatever any server does.

Under ``<state>/lineage/``:
- OpenLineage events as JSON lines, one append-only file per tool (``openlineage/<tool>_events.jsonl``).
- DataHub records in DataHub's file format (a JSON array of MCPs, what `datahub check metadata-file`
  and DataHub's file source read), as segments: ``datahub/<tool>_mcps.<time>.json``, written whole and
  never changed. DataHub's Airflow plugin appends to one live file (``airflow_mcps.json``) with its file
  emitter, which re-reads and re-writes the whole file on every record; so the live file is kept short:
  every reader first turns it into a segment (``rotate``), under the lock the emitter takes.

Writers in several processes never see each other's half-written data; nothing here talks to a network
(shipping to servers is ``delivery``'s job, from these files).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from nyc_taxi.core.settings import Settings
from nyc_taxi.lineage.write.destinations import datahub_file, datahub_records_dir, openlineage_file


def lock_for(path: Path):
    """The lock writers of ``path`` share (the one DataHub's own file emitter takes, too)."""
    from filelock import FileLock

    return FileLock(str(path.with_suffix(".lock")))


def replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` all at once: a reader sees the old file or the new one, never half."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        tmp.write(text)
        tmp.flush()
        os.fsync(tmp.fileno())
    os.replace(tmp.name, path)


def _segment_path(directory: Path, tool: str) -> Path:
    return directory / f"{tool}_mcps.{time.time_ns():020d}-{os.getpid()}.json"


def _is_live(path: Path) -> bool:
    return path.name.endswith("_mcps.json")


def rotate(settings: Settings) -> None:
    """Turn every live DataHub record file (the Airflow plugin's) into a segment, so it stays short."""
    directory = datahub_records_dir(settings)
    for live in sorted(directory.glob("*_mcps.json")):
        with lock_for(live):
            text = live.read_text() if live.exists() else ""
            if text.strip() and json.loads(text):
                os.replace(live, _segment_path(directory, live.name.removesuffix("_mcps.json")))


def datahub_files(settings: Settings, tool: str | None = None) -> list[Path]:
    """The DataHub record files (after rotating), oldest first within each tool."""
    rotate(settings)
    pattern = f"{tool}_mcps.*.json" if tool else "*_mcps.*.json"
    return sorted(p for p in datahub_records_dir(settings).glob(pattern) if not _is_live(p))


def read_datahub_file(path: Path) -> list[dict]:
    text = path.read_text() if path.exists() else ""
    return json.loads(text) if text.strip() else []


def read_datahub_records(settings: Settings, tool: str) -> list[dict]:
    """Every DataHub record one tool wrote, oldest first."""
    return [record for path in datahub_files(settings, tool) for record in read_datahub_file(path)]


def read_openlineage_file(path: Path) -> list[dict]:
    """The complete events of a JSON-lines file. A writer in another process (OpenLineage's file
    transport appends without a lock) may be in the middle of its last line: that one is not there yet."""
    if not path.exists():
        return []
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.strip()]


class Outbox:
    """The lineage files one tool (metaflow, airflow, catalog) writes itself."""

    def __init__(self, settings: Settings, tool: str):
        self.tool = tool
        self.openlineage_path = openlineage_file(settings, tool)
        self.datahub_dir = datahub_file(settings, tool).parent

    def add_events(self, events: Iterable) -> None:
        """Append OpenLineage events (the client's typed events) as JSON lines, durably."""
        from openlineage.client.serde import Serde

        lines = "".join(Serde.to_json(event) + "\n" for event in events)
        if not lines:
            return
        self.openlineage_path.parent.mkdir(parents=True, exist_ok=True)
        with lock_for(self.openlineage_path), self.openlineage_path.open("a") as out:
            out.write(lines)
            out.flush()
            os.fsync(out.fileno())

    def add_records(self, records: Iterable) -> Path | None:
        """Write DataHub records (MCP wrappers, or dicts in DataHub's file format) as a new segment,
        whole or not at all."""
        new = [r if isinstance(r, dict) else r.to_obj(simplified_structure=True) for r in records]
        if not new:
            return None
        self.datahub_dir.mkdir(parents=True, exist_ok=True)
        path = _segment_path(self.datahub_dir, self.tool)
        replace_file(path, json.dumps(new, indent=4))
        return path
