"""What a chaos run checks, independently of the code under test: the tables through pyiceberg on the
catalog's own connection details (not the project's lakehouse) and against an independent reading of
the published files, every data file and manifest read back from the object store, the lineage as the
lineage server received it, and the process table.

- **tables**: every row of the staging tables, raw, weather, actuals, forecasts and scores by its key, with
  a SHA-256 of its values; the columns that say when or by which run a row was written are left out (a re-run
  writes them anew), and a version a row names (a score's forecast and actuals) is compared as the rows it
  holds; no key twice;
- **files**: every manifest of the current snapshot and every data file it lists, read whole;
- **expectations**: the tables against what the published files say they must hold, computed apart
  (``expected.py``): every run, the clean one too;
- **lineage**: the edges of every successful run as the lineage server received them — job → dataset
  read or written, with the version resolved to the data it names (a table's snapshot to the fingerprint
  of its rows then, a score's rows with the versions they name resolved too; a model to the versions it
  was trained from) — and the column edges; run ids and try numbers left out (``LEFT_OUT`` says which
  columns, and the report repeats it);
- **delivery**: every event of a successful run stored once by the lineage server, per (run, event
  type), and every DataHub record of the outbox stored; a record accepted more often than the outbox
  holds it only where a sender was killed before it heard back;
- **leftovers**: no DAG run or task queued or running, no message waiting in the broker, and no
  process of the deployment outside supervisord's programs.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path

from nyc_taxi.core import datasets as d
from nyc_taxi_proving.fixtures.lineage_server import OPENLINEAGE_PATH, datahub_identity, identity

# tables compared, and the key of a row (the primary key as the tables are declared, a staging table's
# rows by the same key: a load that appended to staging instead of replacing it shows as doubled keys)
TABLES = {
    d.YELLOW_TAXI_STAGING.name: d.YELLOW_TAXI_RAW.primary_key,
    d.WEATHER_STAGING.name: d.WEATHER_RAW.primary_key,
    d.YELLOW_TAXI_RAW.name: d.YELLOW_TAXI_RAW.primary_key,
    d.WEATHER_RAW.name: d.WEATHER_RAW.primary_key,
    d.YELLOW_RIDES_HOURLY_ACTUALS.name: d.YELLOW_RIDES_HOURLY_ACTUALS.primary_key,
    d.YELLOW_RIDES_HOURLY_FORECAST.name: d.YELLOW_RIDES_HOURLY_FORECAST.primary_key,
    d.YELLOW_RIDES_FORECAST_SCORES.name: d.YELLOW_RIDES_FORECAST_SCORES.primary_key,
}
# when, or by which run, a row was written or scored: a re-run writes these anew
VOLATILE = {"ingested_at", "computed_at", "created_at", "scored_at", "model_version"}
# a column that names another table's version (a snapshot id the row was computed from): compared as the
# rows that version holds, as the lineage compares a version (two runs give the same rows other ids)
VERSIONS_NAMED = {
    "forecast_snapshot_id": d.YELLOW_RIDES_HOURLY_FORECAST.name,
    "actuals_snapshot_id": d.YELLOW_RIDES_HOURLY_ACTUALS.name,
}
# what the report says of them
LEFT_OUT = (
    f"left out of every comparison: {', '.join(sorted(VOLATILE - {'model_version'}))} (when a row was written "
    "or scored: a re-run writes them anew), model_version (the run that trained the model: a model is "
    f"compared by the versions it was trained from); compared as the rows of the version they name: "
    f"{', '.join(VERSIONS_NAMED)}"
)


def catalog(state_dir: Path):
    """The lake's Iceberg catalog through pyiceberg, from the deployment's own record of its services (a
    host's record: at the addresses it is given, else this machine's loopback)."""
    from pyiceberg.catalog.sql import SqlCatalog

    record = json.loads((state_dir / "team" / "services.json").read_text())
    postgres, store, at = record["postgres"], record["seaweedfs"], record.get("addresses", {})
    database = f"{at.get('postgres', '127.0.0.1')}:{postgres['port']}"
    user, password = "lakehouse", postgres["roles"]["lakehouse"]  # the role that owns the catalog's database
    uri = f"postgresql+psycopg2://{user}:{password}@{database}/lakehouse"
    return SqlCatalog(
        "lakehouse",
        uri=uri,
        **{
            "s3.endpoint": f"http://{at.get('seaweedfs-s3', '127.0.0.1')}:{store['s3_port']}",
            "s3.access-key-id": store["access_key"],
            "s3.secret-access-key": store["secret_key"],
            "s3.region": "us-east-1",
        },
    )


def _row_hash(row: dict, resolve=None, namespace: str = "nyc_taxi") -> str:
    """A row's values but the volatile ones; a version it names resolved to its data where ``resolve`` is
    given (a ``VersionResolver``)."""
    kept = {k: v for k, v in sorted(row.items()) if k not in VOLATILE}
    for column, table in VERSIONS_NAMED.items():
        if resolve is not None and kept.get(column) is not None:
            kept[column] = resolve(f"{namespace}.{table}", str(kept[column]))
    return hashlib.sha256(json.dumps(kept, default=str, sort_keys=True).encode()).hexdigest()


def table_rows(table, snapshot_id: int | None = None, resolve=None) -> tuple[dict[str, str], list[str]]:
    """({primary key: row hash}, the keys found more than once) of a table, now or at a snapshot; the
    versions its rows name resolved by ``resolve``, when given."""
    name = table.name()[-1]
    key_columns = TABLES.get(name)
    rows = table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist() if table.metadata.snapshots else []
    found: dict[str, str] = {}
    doubled = []
    for row in rows:
        hashed = _row_hash(row, resolve, table.name()[-2])
        key = json.dumps([row[c] for c in key_columns] if key_columns else hashed, default=str)
        if key in found:
            doubled.append(key)
        found[key] = hashed
    return found, doubled


def tables(state_dir: Path, namespace: str = "nyc_taxi") -> dict:
    """Each compared table: its row count, a fingerprint of all its rows, its doubled keys, and the rows."""
    lake = catalog(state_dir)
    resolve, result = VersionResolver(None, namespace, lake=lake), {}
    for name in TABLES:
        rows, doubled = table_rows(lake.load_table(f"{namespace}.{name}"), resolve=resolve)
        fingerprint = _fingerprint(rows, doubled)
        result[name] = {"rows": len(rows), "fingerprint": fingerprint, "doubled": doubled, "by_key": rows}
    return result


def _fingerprint(rows: dict[str, str], doubled: list[str]) -> str:
    """All of a table's rows, and the keys it holds twice (a doubled row is not the same table)."""
    return hashlib.sha256(json.dumps([sorted(rows.items()), sorted(doubled)]).encode()).hexdigest()


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


def unexpected(state_dir: Path, expected, namespace: str = "nyc_taxi", only: bool = True) -> dict[str, str]:
    """What differs between the tables and what the published files say they must hold (``expected``:
    ``chaos.expected.Expected``), per table; empty: every table as expected. ``only``: the raw tables hold
    nothing else (a deployment of the mission's own), else other months are left out of the comparison."""
    from nyc_taxi_proving.chaos.expected import row_order

    lake, said = catalog(state_dir), {}

    def rows(name: str) -> list[dict]:
        table = lake.load_table(f"{namespace}.{name}")
        return table.scan().to_arrow().to_pylist() if table.metadata.snapshots else []

    trip = ["source_file", *(c.name for c in d.YELLOW_TRIP_COLUMNS)]
    raw: dict[str, list[tuple]] = {}
    for row in rows(d.YELLOW_TAXI_RAW.name):
        raw.setdefault(row["source_file"], []).append(tuple(row[c] for c in trip))
    wrong = [f for f, want in expected.taxi.items() if sorted(raw.get(f, []), key=row_order) != want]
    wrong += sorted(set(raw) - set(expected.taxi)) if only else []
    if wrong:
        said[d.YELLOW_TAXI_RAW.name] = f"not the published trips of {', '.join(wrong)}"
    last = list(expected.taxi)[-1]
    staged = sorted((tuple(r[c] for c in trip) for r in rows(d.YELLOW_TAXI_STAGING.name)), key=row_order)
    if staged != expected.taxi[last]:
        said[d.YELLOW_TAXI_STAGING.name] = f"not the published trips of {last} ({len(staged)} rows)"
    months = {(day.year, day.month) for _, day in expected.weather}
    for name, keys in ((d.WEATHER_RAW.name, set(expected.weather)), (d.WEATHER_STAGING.name, expected.last_weather)):
        held = {(r["county_code"], r["date"]): r for r in rows(name)}
        if not only:
            held = {key: row for key, row in held.items() if (key[1].year, key[1].month) in months}
        if held.keys() != keys or any(
            held[key][column] != value for key in keys for column, value in expected.weather[key].items()
        ):
            said[name] = f"{len(held)} county-days, {len(keys)} published: not NOAA's values"
    held = {
        (r["pickup_location_id"], r["pickup_hour"]): r["ride_count"] for r in rows(d.YELLOW_RIDES_HOURLY_ACTUALS.name)
    }
    if not only:
        held = {key: n for key, n in held.items() if (key[1].year, key[1].month) in months}
    want = (
        expected.actuals if only else {k: n for k, n in expected.actuals.items() if (k[1].year, k[1].month) in months}
    )
    if held != want:
        missing, extra = want.keys() - held.keys(), held.keys() - want.keys()
        changed = [k for k in want.keys() & held.keys() if want[k] != held[k]]
        said[d.YELLOW_RIDES_HOURLY_ACTUALS.name] = (
            f"{len(missing)} zone-hours missing, {len(extra)} extra, {len(changed)} counted otherwise than the "
            "published trips"
        )
    forecasts: dict = {}
    for row in rows(d.YELLOW_RIDES_HOURLY_FORECAST.name):
        forecasts.setdefault(row["as_of_datetime"], {})[(row["pickup_location_id"], row["forecast_hour"])] = row[
            "predicted_ride_count"
        ]
    for as_of, want in expected.forecasts.items():
        got = forecasts.get(as_of, {})
        if got.keys() != want.keys() or any(abs(got[k] - want[k]) > 1e-9 for k in want):
            said[f"{d.YELLOW_RIDES_HOURLY_FORECAST.name} as of {as_of:%Y-%m-%d %H:%M}"] = (
                f"{len(got)} forecasts, {len(want)} expected from the published trips: not the same"
            )
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

    def __init__(self, state_dir: Path | None, namespace: str = "nyc_taxi", lake=None):
        self.lake, self.namespace, self.cache = lake or catalog(state_dir), namespace, {}

    def __call__(self, dataset: str, version: str | None) -> str | None:
        if version is None or not version.isdigit():
            return version
        key = (dataset, version)
        if key not in self.cache:
            table_name = dataset.rsplit(".", 1)[-1]
            try:
                table = self.lake.load_table(f"{self.namespace}.{table_name}")
                rows, doubled = table_rows(table, int(version), resolve=self)  # a score: the versions it names
                self.cache[key] = "rows:" + _fingerprint(rows, doubled)[:16]
            except Exception as error:  # an expired or unknown snapshot: named as such, never equal by chance
                self.cache[key] = f"unresolved:{version}:{type(error).__name__}"
        return self.cache[key]


def _successful_runs(events: list[dict]) -> set[str]:
    return {e["run"]["runId"] for e in events if e.get("eventType") == "COMPLETE"}


def lineage_edges(events: list[dict], resolve) -> tuple[set, set]:
    """(dataset edges, column edges) of the successful runs' COMPLETE events. A dataset edge is (job,
    read|write, dataset, the version resolved to its data); a column edge (job, output dataset.column,
    input dataset.column). A model's version is the pathspec of the run that trained it: it resolves to
    the versions that run read (the same model trained by another run from the same data is the same
    edge; one trained from other data is not)."""
    complete = [e for e in events if e.get("eventType") == "COMPLETE"]

    def versions(event: dict, side: str):
        for dataset in event.get(side) or []:
            version = (dataset.get("facets") or {}).get("version", {}).get("datasetVersion")
            yield dataset, f"{dataset['namespace']}/{dataset['name']}", version

    trained_from = {}
    for event in complete:
        read = sorted((name, str(resolve(d["name"], v))) for d, name, v in versions(event, "inputs"))
        for _, _, version in versions(event, "outputs"):
            if version and "/" in version:  # a model: the run's pathspec
                trained_from[version] = "trained from " + json.dumps(read)
    edges, columns = set(), set()
    for event in complete:
        job = event["job"]["name"]
        for side, kind in (("inputs", "read"), ("outputs", "write")):
            for dataset, name, version in versions(event, side):
                if version and "/" in version:
                    resolved = trained_from.get(version, f"a model no recorded run trained: {version}")
                else:
                    resolved = resolve(dataset["name"], version)
                edges.add((job, kind, name, resolved))
                lineage = (dataset.get("facets") or {}).get("columnLineage", {}).get("fields", {})
                for column, source in lineage.items():
                    for field in source.get("inputFields", []):
                        columns.add((job, f"{name}.{column}", f"{field['namespace']}/{field['name']}.{field['field']}"))
    return edges, columns


def record_key(path: str, body: dict) -> str:
    """What names a record a lineage server received on ``path``: an OpenLineage event's identity, or a
    DataHub record's entity, aspect and value (``sent_again`` compares records by it)."""
    if path == OPENLINEAGE_PATH:
        return identity(OPENLINEAGE_PATH, body)
    if isinstance(body.get("proposal"), dict):
        return datahub_identity(body["proposal"])
    return json.dumps([path, body], sort_keys=True)  # any other record, by all it says


def sent_again(accepted: list[str], held: list[str]) -> list[str]:
    """The records a server accepted more often than the outbox holds them (both by what names a record):
    each extra one is a record whose sender never heard that it was accepted, and sent it again (a
    record the outbox no longer holds counts once). The outbox may hold one record several times — a
    DataHub aspect every run writes with the same value, a dataset's status — and the server then
    accepts it as many times."""
    counted: dict[str, int] = defaultdict(int)
    holds: dict[str, int] = defaultdict(int)
    for key in accepted:
        counted[key] += 1
    for key in held:
        holds[key] += 1
    return sorted(key for key, n in counted.items() for _ in range(n - max(holds[key], 1)))


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


def edge_names(edges: set, database: str) -> set[tuple[str, str, str]]:
    """The dataset edges without their versions, each dataset by the last part of its name, a table's
    without its ``database`` (what ``expected.mission_edges`` writes out)."""
    return {(job, kind, dataset.rsplit("/", 1)[-1].removeprefix(f"{database}.")) for job, kind, dataset, _ in edges}


def runs_as_triggered(runs: list[dict], triggered: list[tuple[str, dict]], merges: int, training: str) -> list[str]:
    """What is wrong with a mission's DAG runs: a run it triggered missing or run twice, a run it did not
    trigger, and not exactly one asset-triggered training per taxi merge (``merges``). Tables that equal the
    clean run's do not tell: a training run twice writes the same rows."""
    said = []
    manual = sorted((r["dag_id"], json.dumps(r["conf"] or {}, sort_keys=True)) for r in runs if r["type"] == "manual")
    wanted = sorted((dag, json.dumps(conf, sort_keys=True)) for dag, conf in triggered)
    if manual != wanted:
        said.append(f"manual runs {manual}, the mission triggered {wanted}")
    trainings = [r for r in runs if r["type"] == "asset_triggered"]
    if len(trainings) != merges or any(r["dag_id"] != training for r in trainings):
        said.append(
            f"{len(trainings)} asset-triggered runs ({', '.join(r['dag_id'] for r in trainings)}), {merges} merges"
        )
    said += [
        f"a run of type {r['type']}: {r['dag_id']} {r['run_id']}"
        for r in runs
        if r["type"] not in ("manual", "asset_triggered")
    ]
    return said


def runs_by_kind(runs: list[dict]) -> dict[str, list[str]]:
    """Each DAG's runs as (type, conf), sorted: what two runs of the mission compare."""
    found: dict[str, list[str]] = defaultdict(list)
    for run in runs:
        found[run["dag_id"]].append(f"{run['type']} {json.dumps(run['conf'] or {}, sort_keys=True)}")
    return {dag: sorted(kinds) for dag, kinds in sorted(found.items())}
