"""Where lineage goes: files in the state directory always, real servers when configured."""

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


def openlineage_http(settings: Settings) -> dict:
    """OpenLineage's HTTP transport to OPENLINEAGE_URL (Marquez, DataHub's endpoint, …)."""
    # a backend that is down must cost seconds, not minutes: one retry, short back-off
    # (what it did not get stays in the local file; `bash run lineage-replay` sends it later)
    http = {"type": "http", "url": settings.openlineage_url, "timeout": 5, "retry": {"total": 1, "backoff_factor": 0.2}}
    if settings.openlineage_api_key:
        http["auth"] = {"type": "api_key", "apiKey": settings.openlineage_api_key.get_secret_value()}
    return http


def openlineage_transport(settings: Settings, file_path) -> dict:
    """File transport, plus HTTP to OPENLINEAGE_URL when set (a backend that is down does not stop the file)."""
    file_transport = {"type": "file", "log_file_path": str(file_path), "append": True}
    if not settings.openlineage_url:
        return file_transport
    from openlineage.client import OpenLineageClient  # ~0.4 s to import: only when a server is configured

    # Whenever OPENLINEAGE_URL is in the environment, the client adds an HTTP transport of its own under
    # this name (5 retries) to whatever it is configured with. Ours has the same name, so the two merge
    # into one with our settings: each event is sent once, and a backend that is down costs a fraction
    # of a second per event instead of ~9 s. The local file goes first (higher priority).
    return {
        "type": "composite",
        "continue_on_failure": True,
        "sort_transports": True,
        "transports": {
            "file": {**file_transport, "priority": 1},
            OpenLineageClient.DEFAULT_URL_TRANSPORT_NAME: openlineage_http(settings),
        },
    }
