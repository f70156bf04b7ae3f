"""DataHub's own ingestion pipeline, run from here: loading record files into a sink (DataHub Lite, a
server), pushing every record file to a server, and DataHub's Iceberg source on the lakehouse catalog."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.settings import REPO_ROOT, Settings, get_settings
from nyc_taxi.lineage.write.delivery import datahub_emitter
from nyc_taxi.lineage.write.destinations import DataHubTarget, datahub_target
from nyc_taxi.lineage.write.outbox import Outbox, datahub_files, read_datahub_file

INGESTION_PROJECT = REPO_ROOT / "infra" / "datahub-ingestion"  # DataHub's sources run in their own environment


class NoDataHubServer(RuntimeError):
    pass


def server(settings: Settings) -> DataHubTarget:
    """The DataHub DataHub's own settings name (``destinations.datahub_target``), or NoDataHubServer."""
    target = datahub_target(settings)
    if target is None:
        raise NoDataHubServer(
            "no DataHub is configured: set DATAHUB_GMS_URL (e.g. http://localhost:58080 after `bash run "
            "datahub-up`) and DATAHUB_GMS_TOKEN if it asks for one, or run `datahub init`"
        )
    return target


def rest_sink(target: DataHubTarget) -> dict:
    config = {"server": target.url}
    if target.token:
        config["token"] = target.token
    return {"type": "datahub-rest", "config": config}


def push(settings: Settings | None = None) -> dict[str, int]:
    """Send every recorded DataHub record to the configured DataHub (upserts: sending twice stores nothing twice)."""
    settings = settings or get_settings()
    target = server(settings)
    sink, sent = rest_sink(target), {}
    # one try first: a server that is down is said at once, not after the sink's retries with
    # backoff (about 30 s); a server that answers gets them for its transient errors
    try:
        datahub_emitter(target, settings.lineage_request_timeout).test_connection()
    except OSError as down:  # requests' errors: refused, timed out, no such host
        raise ConnectionError(f"DataHub did not answer ({type(down).__name__}, one try)") from down
    for path in datahub_files(settings):
        records = read_datahub_file(path)
        if records:
            report = run_file_pipeline(records, sink, f"push-{path.stem}")
            sent[path.name] = report.get("total_records_written", len(records))
    return sent


def catalog_recipe(settings: Settings, filename: Path) -> dict:
    """DataHub's Iceberg source against the active profile's catalog, writing a record file."""
    source = {
        "env": settings.datahub_env,
        "catalog": {settings.catalog_name: lakehouse(settings).pyiceberg_properties()},
    }
    if settings.datahub_platform_instance:
        source["platform_instance"] = settings.datahub_platform_instance
    return {
        "pipeline_name": "nyc-taxi-iceberg-catalog",
        "source": {"type": "iceberg", "config": source},
        "sink": {"type": "file", "config": {"filename": str(filename)}},
    }


def ingest_catalog(settings: Settings | None = None) -> Path:
    """Run DataHub's Iceberg source (its own locked environment) into a segment of the catalog's records.

    The records join the others: the lineage store loads them, `datahub-push` sends them.
    """
    settings = settings or get_settings()
    with tempfile.TemporaryDirectory() as tmp:
        recipe, staged = Path(tmp) / "recipe.json", Path(tmp) / "catalog_mcps.json"
        recipe.write_text(json.dumps(catalog_recipe(settings, staged)))
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        datahub = INGESTION_PROJECT / ".venv" / "bin" / "datahub"
        if not datahub.exists():
            raise RuntimeError(
                f"{datahub} is missing: run `bash run setup` (it builds DataHub's ingestion environment)"
            )
        result = subprocess.run(
            [str(datahub), "ingest", "-c", str(recipe), "--strict-warnings"], env=env, capture_output=True, text=True
        )
        if result.returncode:
            raise RuntimeError(
                f"DataHub's Iceberg source failed (exit {result.returncode}):\n"
                + (result.stdout + result.stderr)[-3000:]
            )
        return Outbox(settings, "catalog").add_records(read_datahub_file(staged))


def run_file_pipeline(records: list[dict], sink: dict, name: str) -> dict:
    """Send records through DataHub's ingestion pipeline (file source → ``sink``); its sink report.

    Runs in a thread of its own: the pipeline's version check drives an asyncio loop and fails
    when the caller's thread already runs one (a notebook, Playwright, an async app).
    """
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_run_file_pipeline, records, sink, name).result()


def _run_file_pipeline(records: list[dict], sink: dict, name: str) -> dict:
    from datahub.ingestion.run.pipeline import Pipeline

    with tempfile.TemporaryDirectory() as tmp:
        batch = Path(tmp) / f"{name}.json"
        batch.write_text(json.dumps(records))
        pipeline = Pipeline.create(
            {
                "pipeline_name": f"nyc-taxi-{name}",
                "source": {"type": "file", "config": {"path": str(batch)}},
                "sink": sink,
            },
            report_to=None,
        )
        pipeline.run()
        pipeline.raise_from_status()
        return pipeline.sink.get_report().as_obj()
