"""`bash run bench flow`: the whole TrainForecastModelFlow over six realistic months of raw data,
against a DuckDB reference computing the same actuals and forecasts from the same trip files.

Reports time per step (Metaflow's own task timestamps), the Spark start-up share, peak memory, and
the ratio of the flow's time, less a fixed start-up cost measured here, to the reference.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _reference(files: list[Path], start: dt.datetime, as_of: dt.datetime, end: dt.datetime) -> tuple[float, int]:
    """DuckDB: hourly actuals (zero-filled for active zones) and seasonal-naive forecasts."""
    import duckdb

    db = duckdb.connect()
    paths = ", ".join(f"'{p}'" for p in files)
    t = time.perf_counter()
    db.execute(f"""
        CREATE TABLE actuals AS
        WITH trips AS (
          SELECT PULocationID AS zone, date_trunc('hour', tpep_pickup_datetime) AS hour
          FROM read_parquet([{paths}], union_by_name = true)
          WHERE tpep_pickup_datetime >= TIMESTAMP '{start}' AND tpep_pickup_datetime < TIMESTAMP '{end}'
            AND PULocationID BETWEEN 1 AND 265),
        counts AS (SELECT zone, hour, count(*) AS n FROM trips GROUP BY ALL),
        zones AS (SELECT DISTINCT zone FROM counts),
        hours AS (SELECT unnest(generate_series(TIMESTAMP '{start}', TIMESTAMP '{end}' - INTERVAL 1 HOUR, INTERVAL 1 HOUR)) AS hour)
        SELECT z.zone, h.hour, coalesce(c.n, 0) AS ride_count
        FROM zones z CROSS JOIN hours h LEFT JOIN counts c USING (zone, hour)""")
    forecasts = db.execute(f"""
        SELECT a.zone, a.hour + INTERVAL 168 HOUR AS forecast_hour, a.ride_count AS predicted
        FROM actuals a
        WHERE a.hour + INTERVAL 168 HOUR >= TIMESTAMP '{as_of}' AND a.hour + INTERVAL 168 HOUR < TIMESTAMP '{end}'
          AND a.zone IN (SELECT DISTINCT zone FROM actuals WHERE hour < TIMESTAMP '{as_of}')""").fetchall()
    return time.perf_counter() - t, len(forecasts)


def step_seconds(flow_output: str, env: dict) -> dict[str, float]:
    """Seconds per step of the Metaflow run whose output this is (Metaflow's own task timestamps)."""
    run_id = next(line.split("(run-id ")[1].split(")")[0] for line in flow_output.splitlines() if "(run-id " in line)
    probe = (
        "import json\nfrom metaflow import Run, namespace\nnamespace(None)\n"
        f"run = Run('TrainForecastModelFlow/{run_id}')\n"
        "print(json.dumps({s.id: (s.task.finished_at - s.task.created_at).total_seconds() for s in run}))"
    )
    return json.loads(
        subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        .stdout.strip()
        .splitlines()[-1]
    )


def _spark_startup(env: dict) -> float:
    probe = (
        "import time; t=time.perf_counter()\nfrom nyc_taxi.core.spark import get_spark\n"
        "get_spark(small=True).sql('SELECT 1').collect(); print(time.perf_counter()-t)"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _run_flow(env: dict, as_of: dt.datetime, lookback_days: int) -> tuple[float, subprocess.CompletedProcess]:
    from nyc_taxi.core.jobs import TRAINING_FLOW
    from nyc_taxi.core.settings import REPO_ROOT

    t = time.perf_counter()
    run = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / TRAINING_FLOW.code),
            "--no-pylint",
            "run",
            "--as_of_datetime",
            as_of.isoformat(),
            "--lookback_days",
            str(lookback_days),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    if run.returncode:
        raise SystemExit(run.stderr[-3000:])
    return time.perf_counter() - t, run


def _on_a_warm_server(env: dict, as_of: dt.datetime, lookback_days: int) -> float:
    """The flow's wall time with its Spark steps attached to a warm Spark server (`bash run spark-server`):
    the server's first run compiles Spark's code, the second is timed."""
    from nyc_taxi.core import spark_server
    from nyc_taxi.core.settings import get_settings

    settings = get_settings()
    spark_server.start(settings)
    try:
        _run_flow(env, as_of, lookback_days)
        return _run_flow(env, as_of, lookback_days)[0]
    finally:
        spark_server.stop(settings)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="bash run bench flow", description=__doc__)
    parser.add_argument("--rows", type=int, default=3_500_000, help="rows per month")
    parser.add_argument("--months", type=int, default=6)
    parser.add_argument("--lookback-days", type=int, default=30)
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="bench-flow-"))
    from nyc_taxi.fixtures.server import FixtureServer
    from nyc_taxi.fixtures.site import add_taxi_month

    months = [(2024, m) for m in range(1, args.months + 1)]
    files = [add_taxi_month(work / "site", y, m, rows=args.rows, seed=m) for y, m in months]
    server = FixtureServer(work / "site")
    os.environ.update({"STATE_DIR": str(work / "state"), "PROFILE": "local", "TLC_BASE_URL": server.start()})

    from nyc_taxi.bench.memory import PeakMemory
    from nyc_taxi.core.lakehouse import lakehouse
    from nyc_taxi.core.settings import get_settings
    from nyc_taxi.core.spark import stop_spark
    from nyc_taxi.core.tables import ensure_tables
    from nyc_taxi.ingest import taxi
    from nyc_taxi.metaflow_adapter.environment import metaflow_environment

    lakehouse(get_settings()).create()
    t = time.perf_counter()
    ensure_tables()
    for year, month in months:
        taxi.download_published_file(year, month)
        taxi.stage_landed_file(year, month)
        taxi.merge_into_raw(year, month)
    stop_spark()
    server.stop()
    print(f"ingested {len(months)} months of {args.rows:,} rows in {time.perf_counter() - t:.0f} s")

    last_year, last_month = months[-1]
    as_of = dt.datetime(last_year, last_month, 21)
    start, end = as_of - dt.timedelta(days=args.lookback_days), as_of + dt.timedelta(hours=24)
    env = {**os.environ, **metaflow_environment()}
    with PeakMemory() as memory:
        flow_s, run = _run_flow(env, as_of, args.lookback_days)
    steps = step_seconds(run.stderr + run.stdout, env)
    # what lineage cost each step itself (it spools), and what the recorder did beside the steps
    spent = re.findall(r"lineage of \S+/(\w+)/\d+ recorded in ([0-9.]+) s", run.stdout + run.stderr)
    lineage = [float(s) for _, s in spent]
    step_share = max((float(s) / steps[name] for name, s in spent if steps.get(name)), default=0.0)
    logs = (work / "state" / "lineage" / "spool").glob("metaflow-*/recorder.log")
    recorder_s = sum(float(s) for log in logs for s in re.findall(r"recorded in ([0-9.]+) s", log.read_text()))
    startup = _spark_startup(env)
    reference_s, forecasts = _reference(files, start, as_of, end)
    warm_s = _on_a_warm_server(env, as_of, args.lookback_days)
    spark_steps = ("compute_actuals", "write_forecasts_to_table")
    # Fixed cost: a JVM per Spark step, and Metaflow's per-task overhead (the `end` step does no work).
    fixed = startup * len(spark_steps) + steps.get("end", 0) * len(steps)

    print()
    for name, seconds in sorted(steps.items(), key=lambda kv: kv[1], reverse=True):
        print(f"step {name:28s} {seconds:8.2f} s")
    rows = [
        ("flow wall time, s  (target <= 30)", flow_s),
        ("Spark session start-up (one cold JVM), s", startup),
        ("Spark start-up share of the flow", startup * len(spark_steps) / flow_s),
        ("fixed start-up cost (JVMs + Metaflow task overhead), s", fixed),
        ("peak memory (flow processes + JVMs), GiB", memory.gib),
        ("lineage recorded per step (OpenLineage + DataHub records), mean s", sum(lineage) / max(len(lineage), 1)),
        ("lineage share of the flow", sum(lineage) / flow_s),
        ("lineage share of a step, largest (target < 0.02)", step_share),
        ("lineage recorder's work beside the steps (SDK import + records), s", recorder_s),
        (f"DuckDB reference (actuals + {forecasts:,} forecasts), s", reference_s),
        ("RATIO (flow - fixed) / reference  (target <= 3)", (flow_s - fixed) / reference_s),
        ("flow wall time, Spark steps on a warm Spark server, s", warm_s),
        ("RATIO flow on a warm server / flow with a JVM per step", warm_s / flow_s),
    ]
    for name, value in rows:
        print(f"{name:58s} {value:10.2f}")
    figures = {"steps_s": steps, **{name: value for name, value in rows}}
    (work / "bench-flow.json").write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
