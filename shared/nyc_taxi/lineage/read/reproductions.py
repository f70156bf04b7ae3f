"""The answers `bash run lineage --reproduce` gave, kept per run for the lineage site (a run page shows its
reproduction): ``<state>/lineage/reproductions/<OpenLineage run id>.json``, the latest answer of each run."""

from __future__ import annotations

import datetime as dt
import json

from nyc_taxi.core.settings import Settings


def _folder(settings: Settings):
    return settings.lineage_dir / "reproductions"


def record(settings: Settings, run_id: str, answer: dict) -> None:
    folder = _folder(settings)
    folder.mkdir(parents=True, exist_ok=True)
    answer = {**answer, "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    partial = folder / f".{run_id}.json.part"
    partial.write_text(json.dumps(answer, indent=1, sort_keys=True))
    partial.replace(folder / f"{run_id}.json")


def recorded(settings: Settings) -> dict[str, dict]:
    """Every run's latest answer, by OpenLineage run id."""
    folder = _folder(settings)
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))} if folder.is_dir() else {}
