"""The real DataHub: push the recorded files to a server, and run DataHub's own Iceberg source.

    python -m nyc_taxi.lineage.datahub_server push            # bash run datahub-push
    python -m nyc_taxi.lineage.datahub_server ingest-catalog  # bash run datahub-ingest-catalog
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from nyc_taxi.catalog import catalog_properties
from nyc_taxi.lineage.destinations import datahub_records_dir
from nyc_taxi.lineage.store import LineageStore, read_records, record_files, run_file_pipeline
from nyc_taxi.settings import REPO_ROOT, Settings, get_settings

INGESTION_PROJECT = REPO_ROOT / "infra" / "datahub-ingestion"  # DataHub's sources run in their own environment


class NoDataHubServer(RuntimeError):
    pass


def rest_sink(settings: Settings) -> dict:
    if not settings.datahub_gms_url:
        raise NoDataHubServer("DATAHUB_GMS_URL is not set: say which DataHub to send to (e.g. http://localhost:8080 "
                              "after `bash run datahub-up`), plus DATAHUB_TOKEN if it needs one")
    config = {"server": settings.datahub_gms_url}
    if settings.datahub_token:
        config["token"] = settings.datahub_token.get_secret_value()
    return {"type": "datahub-rest", "config": config}


def push(settings: Settings | None = None) -> dict[str, int]:
    """Send every recorded DataHub record to DATAHUB_GMS_URL (upserts: sending twice stores nothing twice)."""
    settings = settings or get_settings()
    sink, sent = rest_sink(settings), {}
    for path in record_files(settings):
        records = read_records(path)
        if records:
            report = run_file_pipeline(records, sink, f"push-{path.stem}")
            sent[path.name] = report.get("total_records_written", len(records))
    return sent


def catalog_recipe(settings: Settings, filename: Path) -> dict:
    """DataHub's Iceberg source against the active profile's catalog, writing a record file."""
    source = {"env": settings.datahub_env, "catalog": {settings.catalog_name: catalog_properties(settings)}}
    if settings.datahub_platform_instance:
        source["platform_instance"] = settings.datahub_platform_instance
    return {"pipeline_name": "nyc-taxi-iceberg-catalog", "source": {"type": "iceberg", "config": source},
            "sink": {"type": "file", "config": {"filename": str(filename)}}}


def ingest_catalog(settings: Settings | None = None) -> Path:
    """Run DataHub's Iceberg source (its own locked environment) into ``catalog_mcps.json``.

    The records join the others: the lineage store loads them, `datahub-push` sends them.
    """
    settings = settings or get_settings()
    out = datahub_records_dir(settings) / "catalog_mcps.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        recipe, staged = Path(tmp) / "recipe.json", Path(tmp) / "catalog_mcps.json"
        recipe.write_text(json.dumps(catalog_recipe(settings, staged)))
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        result = subprocess.run(["uv", "run", "--project", str(INGESTION_PROJECT), "--frozen", "--no-sync",
                                 "datahub", "ingest", "-c", str(recipe), "--strict-warnings"],
                                env=env, capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"DataHub's Iceberg source failed (exit {result.returncode}):\n"
                               + (result.stdout + result.stderr)[-3000:])
        staged.replace(out)  # whole file at once: a reader never sees half of it
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nyc_taxi.lineage.datahub_server")
    parser.add_argument("command", choices=["push", "ingest-catalog"])
    args = parser.parse_args(argv)
    settings = get_settings()
    try:
        if args.command == "push":
            for name, count in push(settings).items():
                print(f"{name}: {count} records sent to {settings.datahub_gms_url}")
        else:
            out = ingest_catalog(settings)
            print(f"DataHub's Iceberg source wrote {len(json.loads(out.read_text()))} records to {out}")
            loaded = LineageStore(settings).load()
            print(f"loaded into DataHub Lite ({loaded.new_records} new records)")
            if settings.datahub_gms_url:
                print(f"sent to {settings.datahub_gms_url}: {push(settings).get(out.name, 0)} records")
    except NoDataHubServer as missing:
        parser.exit(2, f"error: {missing}\n")
    except Exception as failed:  # DataHub's pipeline errors (server down, rejected records) are long; say what to do
        first = str(failed).splitlines()[0] if str(failed) else type(failed).__name__
        parser.exit(1, f"error: {first}\nnothing is lost: the records stay in {datahub_records_dir(settings)}; "
                       "run this again when the server is reachable\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
