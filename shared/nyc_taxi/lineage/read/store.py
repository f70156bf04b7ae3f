"""DataHub Lite, DataHub's embedded metadata store, fed from the record files both tools write.

Airflow (DataHub's plugin) and Metaflow (our instrumentation) append DataHub records (MCPs) to JSON
files under ``<state>/lineage/datahub/``. ``load()`` moves the records it has not loaded yet into a
DataHub Lite database next to them with DataHub's own ingestion pipeline (file source →
datahub-lite sink), the same pipeline `datahub ingest` runs. Loading is incremental (a ledger
remembers how many records of each file are in) and idempotent (Lite keeps one version per
distinct aspect value), so it can run before every query.
"""

from __future__ import annotations

import hashlib
import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.lineage.write.datahub_pipeline import run_file_pipeline
from nyc_taxi.lineage.write.outbox import datahub_files, read_datahub_file

log = logging.getLogger(__name__)


def record_files(settings: Settings) -> list[Path]:
    """Every DataHub record file in the state directory (Airflow's, Metaflow's, the catalog's)."""
    return datahub_files(settings)


@dataclass
class LoadResult:
    files: int
    new_records: int


class LineageStore:
    """The local DataHub Lite database and what has been loaded into it."""

    def __init__(self, settings: Settings | None = None):
        self.settings = settings or get_settings()
        self.directory = self.settings.lineage_dir / "lite"
        self.database = self.directory / "datahub.db"
        self._ledger_path = self.directory / "loaded.json"

    @property
    def lite_config(self) -> dict:
        """The datahub-lite config (sink and reader): DataHub Lite's SQLite engine, WAL journal."""
        return {"type": "sqlite", "config": {"file": str(self.database), "options": {"journal_mode": "WAL"}}}

    def _ledger(self) -> dict:
        return json.loads(self._ledger_path.read_text()) if self._ledger_path.exists() else {}

    def load(self) -> LoadResult:
        """Load the records not loaded yet. A file that was replaced (not appended) is loaded again."""
        from filelock import FileLock

        self.directory.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.directory / "load.lock")):
            ledger, batch = self._ledger(), []
            files = record_files(self.settings)
            for path in files:
                records = read_datahub_file(path)
                head = hashlib.sha256(json.dumps(records[:1], sort_keys=True).encode()).hexdigest()
                seen = ledger.get(path.name, {})
                start = (
                    seen.get("records", 0) if seen.get("head") == head and seen.get("records", 0) <= len(records) else 0
                )
                batch += records[start:]
                ledger[path.name] = {"records": len(records), "head": head}
            # every file's new records in one run of the pipeline, in the files' order: a run's own start
            # costs more than a small file's records (`bash run bench demo`: the phases that read DataHub Lite)
            if batch:
                run_file_pipeline(batch, {"type": "datahub-lite", "config": self.lite_config}, "load")
            self._ledger_path.write_text(json.dumps(ledger, indent=1))
        return LoadResult(files=len(files), new_records=len(batch))

    @contextmanager
    def open(self):
        """DataHub Lite, read-only (load first)."""
        from datahub.lite.lite_util import get_datahub_lite

        if not self.database.exists():
            self.load()
        config = {**self.lite_config, "config": {**self.lite_config["config"], "read_only": True}}
        lite = get_datahub_lite(config_dict=config, read_only=True)
        try:
            yield lite
        finally:
            lite.close()
