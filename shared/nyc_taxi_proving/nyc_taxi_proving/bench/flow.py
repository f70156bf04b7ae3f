"""`bash run bench flow`: TrainForecastModelFlow as a team runs it, retraining after every new month,
against a DuckDB reference computing the same actuals and forecasts from the same trip files.

Months of realistic size are generated, served on 127.0.0.1 and loaded by the real ingestion code; the
flow runs after each new month with its origin in it. Measured, all in one run on one machine:
- the flow after one new month on a warm Spark server (`bash run spark-server`) and with a JVM per step;
- the flow again on unchanged raw (compute_actuals counts nothing and commits nothing);
- the flow after one new month on a lake holding many (the cost must not grow with raw);
- where the time goes: each Spark query of the Spark steps, from Spark's own event log;
- the DuckDB reference, and the ratio of the flow's data work (the flow less its fixed start-up cost) to it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPARK_STEPS = ("compute_actuals", "write_forecasts_to_table", "evaluate")


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


def metaflow_floor(flow_output: str, started_s: float) -> dict[str, float]:
    """What Metaflow's local runtime costs this run before any data work, from the run's own timestamped
    lines: its start (the process to "Workflow starting"), a task that does nothing (the `end` step, from
    "Task is starting" to "Task finished") times the number of tasks, and the evaluation card's render
    processes (the evaluate step's time after its body, less the `end` step's)."""
    stamps: dict[tuple[str, str], float] = {}
    workflow = None
    for line in flow_output.splitlines():
        try:
            at = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()
        except ValueError:
            continue
        if "Workflow starting" in line:
            workflow = at
        elif "] " in line and "/" in line:
            step = line.split("[", 1)[1].split("/")[1]
            text = line.split("] ", 1)[1]
            event = (
                "start" if text.startswith("Task is starting") else "end" if text.startswith("Task finished") else None
            )
            event = event or ("body" if text.startswith("lineage of ") else None)
            if event:
                stamps[(step, event)] = at
    steps = {step for step, _ in stamps}
    task = stamps[("end", "end")] - stamps[("end", "start")]
    after_body = {s: stamps[(s, "end")] - stamps[(s, "body")] for s in ("evaluate", "end")}
    runtime = (workflow or started_s) - started_s
    card = max(after_body["evaluate"] - after_body["end"], 0.0)
    return {
        "runtime_s": runtime,
        "task_s": task,
        "tasks": len(steps),
        "card_s": card,
        "floor_s": runtime + task * len(steps) + card,
    }


def verdict(value: float, target: float, why_missed: str) -> str:
    """What a target line says after its figure: met, or missed and why (the run's own figures)."""
    return "met" if value <= target else f"missed: {why_missed}"


def _seconds_of(run: dict, sql_file: str) -> float:
    return sum(q.seconds for q in run["queries"] if q.description.endswith(f"/{sql_file}"))


def _spark_startup(env: dict) -> float:
    probe = (
        "import time; t=time.perf_counter()\nfrom nyc_taxi.core.spark import get_spark\n"
        "get_spark(small=True).sql('SELECT 1').collect(); print(time.perf_counter()-t)"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


class Lake:
    """The benchmark's throw-away lake: generated months served on 127.0.0.1 and loaded by the real code."""

    def __init__(self, work: Path, rows: int):
        from nyc_taxi_proving.fixtures.server import FixtureServer

        self.work, self.rows, self.files = work, rows, []
        self.server = FixtureServer(work / "site")
        self.logs = work / "spark-events"
        from nyc_taxi_proving.bench.queries import event_log_submit_args

        os.environ.update(
            {
                "STATE_DIR": str(work / "state"),
                "PROFILE": "local",
                "TLC_BASE_URL": self.server.start(),
                # Spark's event log, for the query table
                "PYSPARK_SUBMIT_ARGS": event_log_submit_args(self.logs, os.environ.get("PYSPARK_SUBMIT_ARGS")),
            }
        )
        from nyc_taxi.core.lakehouse import lakehouse
        from nyc_taxi.core.settings import get_settings
        from nyc_taxi.core.tables import ensure_tables
        from nyc_taxi.metaflow_adapter.environment import metaflow_environment

        get_settings.cache_clear()
        self.settings = get_settings()
        lakehouse(self.settings).create()
        ensure_tables()
        self.env = {**os.environ, **metaflow_environment()}

    def load(self, month: int) -> float:
        """Generate and load one month of 2024 (2025 past December) in a process of its own, as a task would."""
        from nyc_taxi_proving.fixtures.site import add_taxi_month

        year, month = 2024 + (month - 1) // 12, (month - 1) % 12 + 1
        self.files.append(add_taxi_month(self.work / "site", year, month, rows=self.rows, seed=month))
        task = (
            "from nyc_taxi.ingest import taxi\n"
            f"taxi.download_published_file({year}, {month}); taxi.stage_landed_file({year}, {month}); "
            f"taxi.merge_into_raw({year}, {month})"
        )
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", task], env=self.env, check=True, capture_output=True)
        return time.perf_counter() - started

    def as_of(self) -> dt.datetime:
        last = self.files[-1].name  # yellow_tripdata_YYYY-MM.parquet
        year, month = map(int, last.removeprefix("yellow_tripdata_").removesuffix(".parquet").split("-"))
        return dt.datetime(year, month, 21)

    def flow(self, lookback_days: int, own_jvms: bool) -> dict:
        """One flow run with its origin in the newest month: wall seconds, seconds per step, its queries."""
        from nyc_taxi.core.catalog import current_snapshot_id
        from nyc_taxi.core.datasets import YELLOW_RIDES_HOURLY_ACTUALS
        from nyc_taxi.core.jobs import TRAINING_FLOW
        from nyc_taxi.core.settings import REPO_ROOT
        from nyc_taxi_proving.bench.queries import event_logs, read_event_log

        env = {**self.env, "SPARK_SERVER": "false" if own_jvms else "true"}
        actuals_before = current_snapshot_id(YELLOW_RIDES_HOURLY_ACTUALS, self.settings)
        logs_before = set(event_logs(self.logs))
        began_ms = time.time() * 1000
        t = time.perf_counter()
        run = subprocess.run(
            [
                sys.executable,
                str(REPO_ROOT / TRAINING_FLOW.code),
                "--no-pylint",
                "run",
                "--as_of_datetime",
                self.as_of().isoformat(),
                "--lookback_days",
                str(lookback_days),
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t
        if run.returncode:
            raise SystemExit(run.stderr[-3000:])
        output = run.stdout + run.stderr
        logs = [p for p in event_logs(self.logs) if own_jvms and p not in logs_before] or [
            p for p in event_logs(self.logs) if not own_jvms
        ]
        queries = [q for log in logs for q in read_event_log(log, since_ms=began_ms)]
        return {
            "wall_s": wall,
            "steps_s": step_seconds(output, env),
            "metaflow": metaflow_floor(output, began_ms / 1000),
            "queries": queries,
            "actuals_committed": current_snapshot_id(YELLOW_RIDES_HOURLY_ACTUALS, self.settings) != actuals_before,
        }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="bash run bench flow", description=__doc__)
    parser.add_argument("--rows", type=int, default=3_500_000, help="rows per month (a real 2024 month: 3.0-3.8M)")
    parser.add_argument("--months", type=int, default=12, help="months in the lake at the last new month")
    parser.add_argument("--lookback-days", type=int, default=30)
    args = parser.parse_args(argv)
    if args.months < 4:
        parser.error("--months must be at least 4: the second, third and last month are measured apart")

    from nyc_taxi.core import spark_server
    from nyc_taxi_proving.bench.memory import PeakMemory

    lake = Lake(Path(tempfile.mkdtemp(prefix="bench-flow-")), args.rows)
    print(f"lake and Spark event logs under {lake.work}", flush=True)
    spark_server.start(lake.settings)
    runs: dict[str, dict] = {}
    try:
        lake.load(1)
        # The first month's window counted (no further back: a window reaching a month not loaded is refused)
        # and the server's code compiled
        lake.flow(min(args.lookback_days, lake.as_of().day - 1), own_jvms=False)
        lake.load(2)
        with PeakMemory() as memory:
            runs["new month, warm server"] = lake.flow(args.lookback_days, own_jvms=False)
        runs["unchanged raw, warm server"] = lake.flow(args.lookback_days, own_jvms=False)
        runs["unchanged raw, a JVM per step"] = lake.flow(args.lookback_days, own_jvms=True)
        lake.load(3)
        runs["new month, a JVM per step"] = lake.flow(args.lookback_days, own_jvms=True)
        for month in range(4, args.months):
            lake.load(month)
        lake.flow(args.lookback_days, own_jvms=False)  # the window of the month before the last one counted
        lake.load(args.months)
        runs[f"new month on a lake of {args.months}, warm server"] = lake.flow(args.lookback_days, own_jvms=False)
    finally:
        spark_server.stop(lake.settings)
        lake.server.stop()
    startup = _spark_startup({**lake.env, "SPARK_SERVER": "false"})
    as_of = lake.as_of()
    start, end = as_of - dt.timedelta(days=args.lookback_days), as_of + dt.timedelta(hours=24)
    reference_s, forecasts = _reference(lake.files, start, as_of, end)

    for name, run in runs.items():
        print(f"\n{name}: flow {run['wall_s']:.2f} s")
        for step, seconds in sorted(run["steps_s"].items(), key=lambda kv: kv[1], reverse=True):
            print(f"  step {step:28s} {seconds:7.2f} s")
        if run["queries"]:
            print("  Spark queries (Spark's event log): seconds, SQL file, what its scans read and its writes wrote")
            for query in run["queries"]:
                print(f"    {query.line()}")
    cold, warm = runs["new month, a JVM per step"], runs["new month, warm server"]
    unchanged, last = runs["unchanged raw, warm server"], runs[f"new month on a lake of {args.months}, warm server"]
    # Fixed cost: a JVM per Spark step, and Metaflow's per-task overhead (the `end` step does no work).
    fixed = startup * len(SPARK_STEPS) + cold["steps_s"].get("end", 0) * len(cold["steps_s"])
    # the window's trips are counted per hour once (hourly_counts.sql), the actuals made from that count
    floor = warm["metaflow"]["floor_s"]
    counting = _seconds_of(warm, "hourly_counts.sql") + _seconds_of(warm, "hourly_actuals.sql")
    queries_s = {name: sum(q.seconds for q in run["queries"]) for name, run in (("cold", cold), ("warm", warm))}
    why = {  # why a target line is missed, from this run's figures
        "warm": f"Metaflow's own floor is {floor:.1f} s of it (below), the data work {warm['wall_s'] - floor:.1f} s",
        "cold": f"{len(SPARK_STEPS)} cold JVMs start in {startup * len(SPARK_STEPS):.1f} s and run the Spark queries "
        f"{queries_s['cold'] / max(queries_s['warm'], 1e-9):.1f}x slower than the warm server does",
        "count": f"counting the month's trips (hourly_counts.sql, hourly_actuals.sql) takes {counting:.1f} s of it, "
        f"a task's own start {warm['metaflow']['task_s']:.1f} s",
        "unchanged": "see the step's table above",
        "lake": "compare the two runs' step and query tables above",
        "reference": f"the flow's data work in cold JVMs is {cold['wall_s'] - fixed:.1f} s; DuckDB counts in a "
        "process already running, with no JVM to warm and no catalog to consult",
    }
    rows = [  # (label, figure) or (label, figure, target, why it is missed)
        ("flow after one new month, warm Spark server, s", warm["wall_s"], 6, why["warm"]),
        ("  ... of it Metaflow's own floor, before any data work, s", warm["metaflow"]["floor_s"]),
        ("    runtime start, s", warm["metaflow"]["runtime_s"]),
        (
            f"    a task that does nothing (the end step), each of {warm['metaflow']['tasks']} tasks, s",
            warm["metaflow"]["task_s"],
        ),
        ("    the evaluation card's render process, s", warm["metaflow"]["card_s"]),
        ("flow after one new month, a JVM per step, s", cold["wall_s"], 12, why["cold"]),
        ("compute_actuals after one new month, warm server, s", warm["steps_s"]["compute_actuals"], 2, why["count"]),
        (
            "compute_actuals on unchanged raw, warm server, s",
            unchanged["steps_s"]["compute_actuals"],
            1,
            why["unchanged"],
        ),
        ("  ... and committed nothing to the actuals (1 = yes)", float(not unchanged["actuals_committed"])),
        ("flow on unchanged raw, warm server, s", unchanged["wall_s"]),
        ("flow on unchanged raw, a JVM per step, s", runs["unchanged raw, a JVM per step"]["wall_s"]),
        (f"flow after one new month on a lake of {args.months}, warm server, s", last["wall_s"]),
        (
            f"RATIO lake of {args.months} / lake of 2, new month, warm server",
            last["wall_s"] / warm["wall_s"],
            1.2,
            why["lake"],
        ),
        ("Spark session start-up (one cold JVM), s", startup),
        ("fixed start-up cost (JVMs + Metaflow task overhead), s", fixed),
        ("peak memory (flow processes + JVMs), GiB", memory.gib),
        (f"DuckDB reference (the window's actuals + {forecasts:,} forecasts from the files), s", reference_s),
        (
            "RATIO (flow after a new month, a JVM per step - fixed) / reference",
            (cold["wall_s"] - fixed) / reference_s,
            20,
            why["reference"],
        ),
    ]
    print()
    figures, verdicts = {}, {}
    for label, value, *target in rows:
        name = f"{label}  (target <= {target[0]:g})" if target else label
        figures[name] = value
        if target:
            verdicts[name] = verdict(value, *target)
        print(f"{name:78s} {value:9.2f}" + (f"  {verdicts[name]}" if target else ""))
    figures = {
        "runs": {n: {k: v for k, v in r.items() if k != "queries"} for n, r in runs.items()},
        **figures,
        "verdicts": verdicts,
    }
    (lake.work / "bench-flow.json").write_text(json.dumps(figures, indent=2, default=str))
    return figures


if __name__ == "__main__":
    main()
