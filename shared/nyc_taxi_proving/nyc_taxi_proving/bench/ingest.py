"""`bash run bench ingest`: Spark ingestion of realistic TLC months against a DuckDB reference.

Everything runs on 127.0.0.1 in a throw-away state directory: generated months served over HTTP
(the real download code runs), the local Iceberg catalog, and DuckDB doing the same work
(normalise, key each trip, upsert with INSERT ... ON CONFLICT DO UPDATE on a primary key) on the same files.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def _duckdb_type(spark_type: str) -> str:
    """Spark's local TIMESTAMP_NTZ is DuckDB's TIMESTAMP; Spark's TIMESTAMP (an instant) is TIMESTAMPTZ."""
    return {"TIMESTAMP_NTZ": "TIMESTAMP", "TIMESTAMP": "TIMESTAMPTZ"}.get(spark_type, spark_type)


def _duckdb_reference(path: Path, db) -> float:
    """Upsert one TLC file into the DuckDB reference table; seconds taken."""
    from nyc_taxi.core import datasets as d

    present = {c[0].lower() for c in db.execute(f"DESCRIBE SELECT * FROM read_parquet('{path}')").fetchall()}
    columns = [
        f"CAST({c.source if c.source.lower() in present else 'NULL'} AS {_duckdb_type(c.type)}) AS {c.name}"
        for c in d.YELLOW_TRIP_COLUMNS
    ]
    names = [c.name for c in d.LOAD_COLUMNS + d.YELLOW_TRIP_COLUMNS]
    updates = ", ".join(f"{n} = excluded.{n}" for n in names if n != "row_key")
    trip = "vendor_id, pickup_datetime, dropoff_datetime, pickup_location_id, dropoff_location_id"
    start = time.perf_counter()
    # the product's key: the file, a hash of what identifies a trip, its place among equal trips
    db.execute(f"""
        INSERT INTO raw
        SELECT '{path.name}:' || hash({trip}) || ':' || row_number() OVER (PARTITION BY {trip} ORDER BY file_row_number)
                 AS row_key,
               '{path.name}' AS source_file, now() AS ingested_at, * EXCLUDE (file_row_number)
        FROM (SELECT {", ".join(columns)}, file_row_number FROM read_parquet('{path}', file_row_number = true))
        ON CONFLICT (row_key) DO UPDATE SET {updates}""")
    return time.perf_counter() - start


def _duckdb_table(db) -> None:
    from nyc_taxi.core import datasets as d

    columns = ", ".join(
        f"{c.name} {_duckdb_type(c.type)}" + (" PRIMARY KEY" if c.name in d.YELLOW_TAXI_RAW.primary_key else "")
        for c in d.LOAD_COLUMNS + d.YELLOW_TRIP_COLUMNS
    )
    db.execute(f"CREATE TABLE raw ({columns})")


class _Timer:
    """Adds up the time the steps spend in some functions: each ``(modules, names)`` names them (each
    replaced by a timed one)."""

    def __init__(self, *targets: tuple[tuple, tuple[str, ...]]):
        self.seconds = 0.0
        for modules, names in targets:
            for module in modules:
                for name in names:
                    if hasattr(module, name):
                        setattr(module, name, self._timed(getattr(module, name)))

    def _timed(self, function):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        return timed


def _lineage_timer() -> _Timer:
    """The time the steps spend on lineage: column lineage from the SQL files (DataHub's parser, cached per
    state directory) and the snapshot-id look-ups that version every input and output."""
    import nyc_taxi.ingest.staging as staging
    import nyc_taxi.ingest.taxi as taxi
    import nyc_taxi.lineage.write.columns as columns

    return _Timer(((taxi, staging, columns), ("column_lineage", "current_snapshot")))


def _quality_timer() -> _Timer:
    """The time the steps spend on checks and profiles outside the write's own pass: the stage's checks
    counted after its write (from the manifests), its profile (Iceberg's manifests) and record; the merge's
    audit of the staged batch (its recorded counts) and raw's check and profile after its commit."""
    import nyc_taxi.ingest.staging as staging
    import nyc_taxi.ingest.taxi as taxi

    return _Timer(
        ((staging,), ("counted_after_the_write", "profile", "record_counts")),
        ((taxi,), ("audit_staged", "check_published")),
    )


def _observed_in_the_pass(year: int, month: int, settings, spark, tries: int = 5) -> dict:
    """What counting the checks in the staging write's own pass costs: the stage's SQL over the landed file
    written to Spark's no-op sink, with and without the observed aggregates, alternately; the best of
    ``tries`` each (the difference is the checks' share of the pass)."""
    from nyc_taxi.core import datasets as d
    from nyc_taxi.core import quality
    from nyc_taxi.core.naming import landed_location
    from nyc_taxi.core.profiles import distinct_aggregates
    from nyc_taxi.core.statistics import observing
    from nyc_taxi.ingest import taxi

    location = landed_location(d.TLC_YELLOW_TRIPDATA_LANDED, year, month, settings)
    values = taxi._check_values(year, month, taxi._landed_rows(location, settings))
    observed = {
        **quality.aggregates(
            [c for c in d.YELLOW_TAXI_STAGING.checks if quality.counted_in_the_pass(c, values)], values
        ),
        **distinct_aggregates(d.YELLOW_TAXI_STAGING),
    }
    seconds: dict[str, list[float]] = {"plain": [], "observed": []}
    for _ in range(tries):
        for kind in seconds:
            frame = taxi.staged_rows(spark, [location], settings)
            if kind == "observed":
                frame, _observation = observing(frame, observed)
            started = time.perf_counter()
            frame.write.format("noop").mode("overwrite").save()
            seconds[kind].append(time.perf_counter() - started)
    return {kind: min(values) for kind, values in seconds.items()}


def _data_files(spark, table: str) -> int:
    return spark.sql(f"SELECT count(*) FROM {table}.files").first()[0]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="bash run bench ingest", description=__doc__)
    parser.add_argument("--rows", type=int, default=3_500_000, help="rows per month (a real 2024 month: 3.0-3.8M)")
    parser.add_argument("--months", type=int, default=6, help="months merged one after another (first is 2024-01)")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    from nyc_taxi_proving.fixtures.server import FixtureServer
    from nyc_taxi_proving.fixtures.site import add_taxi_month

    months = [(2024, m) for m in range(1, args.months + 1)]
    served_month = (2024, args.months + 1)  # new to the lake when a task on the warm Spark server takes it
    t = time.perf_counter()
    files = [add_taxi_month(work / "site", y, m, rows=args.rows, seed=m) for y, m in [*months, served_month]]
    print(f"generated {len(files)} months of {args.rows:,} rows in {time.perf_counter() - t:.1f} s ({work})")
    server = FixtureServer(work / "site")
    url = server.start()
    # The settings are read after this point, so the whole run uses the throw-away state and server.
    os.environ.update({"STATE_DIR": str(work / "state"), "PROFILE": "local", "TLC_BASE_URL": url})

    import duckdb

    from nyc_taxi.core import datasets as d
    from nyc_taxi.core.catalog import current_snapshot_id
    from nyc_taxi.core.lakehouse import lakehouse
    from nyc_taxi.core.naming import spark_table
    from nyc_taxi.core.settings import get_settings
    from nyc_taxi.core.spark import get_spark
    from nyc_taxi.core.tables import ensure_tables
    from nyc_taxi.ingest import taxi
    from nyc_taxi_proving.bench.memory import PeakMemory

    settings = get_settings()
    lakehouse(settings).create()
    figures: dict = {"rows_per_month": args.rows, "spark_driver_memory": settings.spark_driver_memory}
    with PeakMemory() as mem:
        t = time.perf_counter()
        spark = get_spark(settings)
        ensure_tables([d.YELLOW_TAXI_STAGING, d.YELLOW_TAXI_RAW], settings)
        spark.sql("SELECT 1").collect()
        figures["startup_s"] = time.perf_counter() - t
    figures["startup_peak_gib"] = mem.gib
    raw = spark_table(d.YELLOW_TAXI_RAW, settings)
    lineage, checks = _lineage_timer(), _quality_timer()

    def spark_month(year: int, month: int) -> dict:
        lineage.seconds = checks.seconds = 0.0
        with PeakMemory() as m:
            t0 = time.perf_counter()
            taxi.download_published_file(year, month, settings)
            taxi.stage_landed_file(year, month, settings)
            t1 = time.perf_counter()
            report = taxi.merge_into_raw(year, month, settings)
            t2 = time.perf_counter()
        return {
            "stage_s": t1 - t0,
            "merge_s": t2 - t1,
            "merged_rows": report.summary["merged_rows"],
            "peak_gib": m.gib,
            "lineage_s": lineage.seconds,
            "checks_s": checks.seconds,
        }

    db = duckdb.connect(str(work / "reference.duckdb"))
    _duckdb_table(db)

    first = spark_month(*months[0])
    first["duckdb_s"] = _duckdb_reference(files[0], db)
    first["rows_per_s"] = args.rows / (first["stage_s"] + first["merge_s"])
    figures["new_month"] = first

    snapshot, data_files = current_snapshot_id(d.YELLOW_TAXI_RAW, settings), _data_files(spark, raw)
    again = spark_month(*months[0])
    again["duckdb_s"] = _duckdb_reference(files[0], db)
    again["new_snapshot"] = current_snapshot_id(d.YELLOW_TAXI_RAW, settings) != snapshot
    again["new_data_files"] = _data_files(spark, raw) - data_files
    figures["rerun_unchanged_month"] = again

    figures["growing_table"] = [{"month": f"{y}-{m:02d}", **spark_month(y, m)} for y, m in months[1:]]
    figures["checks_in_the_pass"] = _observed_in_the_pass(*months[-1], settings, spark)
    from nyc_taxi.core.spark import stop_spark
    from nyc_taxi_proving.bench import server as warm_server
    from nyc_taxi_proving.bench import startup

    stop_spark()  # the start-up probes run alone, one fresh process at a time
    figures["startup"] = startup.measure(dict(os.environ))
    figures["warm_server"] = warm_server.measure(dict(os.environ), settings, months[0], served_month)
    figures["warm_server"]["duckdb_s"] = _duckdb_reference(files[-1], db)
    server.stop()

    new, rerun, grow = figures["new_month"], figures["rerun_unchanged_month"], figures["growing_table"]
    spark_new = figures["startup_s"] + new["stage_s"] + new["merge_s"]
    print()
    print(f"{'figure':58s} {'value':>12s}")
    rows = [
        ("Spark start-up (session + tables + first query), s", figures["startup_s"]),
        ("new month: download + stage, s", new["stage_s"]),
        ("new month: merge into raw, s", new["merge_s"]),
        ("new month: rows/s (stage + merge)", new["rows_per_s"]),
        ("new month: peak memory (Python + JVM), GiB", new["peak_gib"]),
        ("new month: DuckDB reference (normalise, key, upsert), s", new["duckdb_s"]),
        ("RATIO new month, Spark incl. start-up / DuckDB  (target <= 2.5)", spark_new / new["duckdb_s"]),
        ("RATIO new month, stage alone / DuckDB", new["stage_s"] / new["duckdb_s"]),
        ("re-run unchanged month: Spark stage + merge, s", rerun["stage_s"] + rerun["merge_s"]),
        ("re-run unchanged month: DuckDB reference, s", rerun["duckdb_s"]),
        ("RATIO re-run, Spark / DuckDB  (target <= 2)", (rerun["stage_s"] + rerun["merge_s"]) / rerun["duckdb_s"]),
        ("re-run: new data files written (target 0)", rerun["new_data_files"]),
    ]
    for entry in grow:
        rows.append((f"growing raw: merge of {entry['month']}, s", entry["merge_s"]))
    if len(grow) >= 2:
        rows.append(
            (
                f"RATIO merge {grow[-1]['month']} / {grow[0]['month']}  (target <= 1.2)",
                grow[-1]["merge_s"] / grow[0]["merge_s"],
            )
        )
    rows.append(
        ("peak memory over all months, GiB", max([new["peak_gib"], rerun["peak_gib"]] + [g["peak_gib"] for g in grow]))
    )
    tasks = [new, rerun, *grow]
    rows.append(
        (
            "lineage work per month (column lineage, version look-ups), s",
            sum(t["lineage_s"] for t in tasks) / len(tasks),
        )
    )
    rows.append(
        (
            "RATIO lineage / stage + merge, worst month  (target < 0.02)",
            max(t["lineage_s"] / (t["stage_s"] + t["merge_s"]) for t in tasks),
        )
    )
    # checks and profiles: what they cost outside the write's pass, plus their share of the pass itself
    in_pass = figures["checks_in_the_pass"]
    observed = max(in_pass["observed"] - in_pass["plain"], 0.0)
    new_months = [new, *grow]
    rows += [
        (
            "checks and profiles per month, outside the write's pass, s",
            sum(t["checks_s"] for t in new_months) / len(new_months),
        ),
        ("checks counted in the staging write's pass (observe), s", observed),
        (
            "  the staging SQL to a no-op sink, without / with the checks, s",
            f"{in_pass['plain']:.2f} / {in_pass['observed']:.2f}",
        ),
        (
            "RATIO checks and profiles / stage + merge, worst new month  (target <= 0.05)",
            f"{max((t['checks_s'] + observed) / (t['stage_s'] + t['merge_s']) for t in new_months):.3f}",
        ),
    ]
    rows += startup.rows(figures["startup"])
    rows += warm_server.rows(figures["warm_server"])
    for name, value in rows:
        if isinstance(value, str):
            print(f"{name:58s} {value:>12s}")
        else:
            print(f"{name:58s} {value:12.2f}" if isinstance(value, float) else f"{name:58s} {value:12,}")
    out = Path(settings.state_dir) / "bench-ingest.json"
    out.write_text(json.dumps(figures, indent=2))
    print(f"\nfigures: {out}")
    return figures


if __name__ == "__main__":
    main()
