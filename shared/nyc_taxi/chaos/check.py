"""What a chaos run checks, independently of the code under test: the tables through pyiceberg on the
catalog's own connection details (not the project's lakehouse), every data file and manifest read
back from the object store, the lineage as the lineage server received it, and the process table.

- **tables**: every row of the staging tables, raw, weather, actuals and forecasts by its key, with a
  SHA-256 of its values; the columns that say when or by which run a row was written are left out (a re-run
  writes them anew); no key twice;
- **files**: every manifest of the current snapshot and every data file it lists, read whole;
- **lineage**: the edges of every successful run — job → dataset read or written, with the version
  resolved to the data it names (a table's snapshot to the fingerprint of its rows then) — and the
  column edges; run ids and try numbers left out;
- **delivery**: every event of a successful run stored once by the lineage server, per (run, event
  type);
- **leftovers**: no DAG run or task queued or running, no message waiting in the broker, and no
  process of the deployment outside supervisord's programs.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path

# tables compared, and the key of a row (the primary key as the tables are declared, a staging table's
# rows by the same key: a load that appended to staging instead of replacing it shows as doubled keys)
TABLES = {
    "yellow_taxi_staging": ("row_key",),
    "weather_staging": ("county_code", "date"),
    "yellow_taxi_raw": ("row_key",),
    "weather_raw": ("county_code", "date"),
    "yellow_rides_hourly_actuals": ("pickup_location_id", "pickup_hour"),
    "yellow_rides_hourly_forecast": ("pickup_location_id", "forecast_hour"),
}
# when, or by which run, a row was written: a re-run writes these anew
VOLATILE = {"ingested_at", "computed_at", "created_at", "model_version"}


def catalog(state_dir: Path):
    """The lake's Iceberg catalog through pyiceberg, from the deployment's own record of its services."""
    from pyiceberg.catalog.sql import SqlCatalog

    record = json.loads((state_dir / "team" / "services.json").read_text())
    postgres, store = record["postgres"], record["seaweedfs"]
    uri = f"postgresql+psycopg2://{postgres['user']}:{postgres['password']}@127.0.0.1:{postgres['port']}/lakehouse"
    return SqlCatalog(
        "lakehouse",
        uri=uri,
        **{
            "s3.endpoint": f"http://127.0.0.1:{store['s3_port']}",
            "s3.access-key-id": store["access_key"],
            "s3.secret-access-key": store["secret_key"],
            "s3.region": "us-east-1",
        },
    )


def _row_hash(row: dict) -> str:
    kept = {k: v for k, v in sorted(row.items()) if k not in VOLATILE}
    return hashlib.sha256(json.dumps(kept, default=str, sort_keys=True).encode()).hexdigest()


def table_rows(table, snapshot_id: int | None = None) -> tuple[dict[str, str], list[str]]:
    """({primary key: row hash}, the keys found more than once) of a table, now or at a snapshot."""
    name = table.name()[-1]
    key_columns = TABLES.get(name)
    rows = table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist() if table.metadata.snapshots else []
    found: dict[str, str] = {}
    doubled = []
    for row in rows:
        key = json.dumps([row[c] for c in key_columns] if key_columns else _row_hash(row), default=str)
        if key in found:
            doubled.append(key)
        found[key] = _row_hash(row)
    return found, doubled


def tables(state_dir: Path, namespace: str = "nyc_taxi") -> dict:
    """Each compared table: its row count, a fingerprint of all its rows, its doubled keys, and the rows."""
    lake = catalog(state_dir)
    result = {}
    for name in TABLES:
        rows, doubled = table_rows(lake.load_table(f"{namespace}.{name}"))
        fingerprint = hashlib.sha256(json.dumps(sorted(rows.items())).encode()).hexdigest()
        result[name] = {"rows": len(rows), "fingerprint": fingerprint, "doubled": doubled, "by_key": rows}
    return result


def table_differences(clean: dict, faulty: dict) -> dict[str, str]:
    """What differs between two runs' tables, per table (empty: equal row for row)."""
    said = {}
    for name in TABLES:
        a, b = clean[name]["by_key"], faulty[name]["by_key"]
        if faulty[name]["doubled"]:
            said[name] = f"{len(faulty[name]['doubled'])} keys twice"
        elif a != b:
            missing, extra = a.keys() - b.keys(), b.keys() - a.keys()
            changed = [k for k in a.keys() & b.keys() if a[k] != b[k]]
            said[name] = f"{len(missing)} rows missing, {len(extra)} extra, {len(changed)} changed"
    return said


def unreadable_files(state_dir: Path, namespace: str = "nyc_taxi") -> list[str]:
    """Every manifest of every table's current snapshot and every data file they list, read whole:
    the ones that cannot be read (gone, cut short)."""
    import pyarrow.parquet as pq

    lake, bad = catalog(state_dir), []
    for identifier in lake.list_tables(namespace):
        table = lake.load_table(identifier)
        snapshot = table.current_snapshot()
        if snapshot is None:
            continue
        io = table.io
        try:
            manifests = snapshot.manifests(io)
        except Exception as error:
            bad.append(f"{'.'.join(identifier)}: manifest list {snapshot.manifest_list}: {error}")
            continue
        for manifest in manifests:
            try:
                entries = manifest.fetch_manifest_entry(io, discard_deleted=True)
            except Exception as error:
                bad.append(f"{'.'.join(identifier)}: manifest {manifest.manifest_path}: {error}")
                continue
            for entry in entries:
                path = entry.data_file.file_path
                try:
                    with io.new_input(path).open() as stream:
                        pq.read_table(stream)
                except Exception as error:
                    bad.append(f"{'.'.join(identifier)}: {path}: {error}")
    return bad


# ---- lineage ----------------------------------------------------------------------------------------


class VersionResolver:
    """A recorded version as the data it names: a table's snapshot id as the fingerprint of the table's
    rows at that snapshot (two runs write different snapshot ids for the same rows); a file's version
    (its ETag, its SHA-256) as it is; a model (a run's pathspec) as the versions it was trained from."""

    def __init__(self, state_dir: Path, namespace: str = "nyc_taxi"):
        self.lake, self.namespace, self.cache = catalog(state_dir), namespace, {}

    def __call__(self, dataset: str, version: str | None) -> str | None:
        if version is None or not version.isdigit():
            return version
        key = (dataset, version)
        if key not in self.cache:
            table_name = dataset.rsplit(".", 1)[-1]
            try:
                table = self.lake.load_table(f"{self.namespace}.{table_name}")
                rows, _ = table_rows(table, int(version))
                self.cache[key] = "rows:" + hashlib.sha256(json.dumps(sorted(rows.items())).encode()).hexdigest()[:16]
            except Exception as error:  # an expired or unknown snapshot: named as such, never equal by chance
                self.cache[key] = f"unresolved:{version}:{type(error).__name__}"
        return self.cache[key]


def _successful_runs(events: list[dict]) -> set[str]:
    return {e["run"]["runId"] for e in events if e.get("eventType") == "COMPLETE"}


def lineage_edges(events: list[dict], resolve) -> tuple[set, set]:
    """(dataset edges, column edges) of the successful runs' COMPLETE events. A dataset edge is (job,
    read|write, dataset, the version resolved to its data); a column edge (job, output dataset.column,
    input dataset.column)."""
    edges, columns = set(), set()
    for event in events:
        if event.get("eventType") != "COMPLETE":
            continue
        job = event["job"]["name"]
        model_inputs = []
        for side, kind in (("inputs", "read"), ("outputs", "write")):
            for dataset in event.get(side) or []:
                name = f"{dataset['namespace']}/{dataset['name']}"
                version = (dataset.get("facets") or {}).get("version", {}).get("datasetVersion")
                resolved = resolve(dataset["name"], version)
                if kind == "read":
                    model_inputs.append((name, resolved))
                edges.add((job, kind, name, resolved))
                lineage = (dataset.get("facets") or {}).get("columnLineage", {}).get("fields", {})
                for column, source in lineage.items():
                    for field in source.get("inputFields", []):
                        columns.add((job, f"{name}.{column}", f"{field['namespace']}/{field['name']}.{field['field']}"))
    return _without_run_names(edges), columns


def _without_run_names(edges: set) -> set:
    """A model's version is the pathspec of the run that trained it: the same model trained by another
    run is the same edge, named by the job alone."""
    return {
        (job, kind, name, "run-named" if version and "/" in version else version) for job, kind, name, version in edges
    }


def delivery(events: list[dict], stored: list[dict]) -> dict:
    """Every event of a successful run stored by the lineage server once per (run, event type): the
    (run, type) pairs missing at the server and the ones it stored more than once."""
    successful = _successful_runs(events)
    wanted = {(e["run"]["runId"], e["eventType"]) for e in events if e["run"]["runId"] in successful}
    counted = defaultdict(int)
    for request in stored:
        body = request["body"]
        counted[(body["run"]["runId"], body["eventType"])] += 1
    return {
        "missing": sorted(wanted - counted.keys()),
        "twice": sorted(k for k, n in counted.items() if n > 1 and k in wanted),
    }
