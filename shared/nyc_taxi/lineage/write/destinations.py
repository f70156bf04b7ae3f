"""Where lineage goes: files in the state directory, always (``delivery`` ships them to the servers configured)."""

from __future__ import annotations

from pathlib import Path

from nyc_taxi.core.settings import Settings


def datahub_records_dir(settings: Settings) -> Path:
    """Where every tool's DataHub record files (MCPs, JSON) live."""
    return settings.lineage_dir / "datahub"


def openlineage_events_dir(settings: Settings) -> Path:
    """Where every tool's OpenLineage events (JSON lines) live."""
    return settings.lineage_dir / "openlineage"


def datahub_file(settings: Settings, tool: str) -> Path:
    """The DataHub records one tool (airflow, metaflow, catalog) writes."""
    return datahub_records_dir(settings) / f"{tool}_mcps.json"


def openlineage_file(settings: Settings, tool: str) -> Path:
    """The OpenLineage events one tool (airflow, metaflow) writes."""
    return openlineage_events_dir(settings) / f"{tool}_events.jsonl"
