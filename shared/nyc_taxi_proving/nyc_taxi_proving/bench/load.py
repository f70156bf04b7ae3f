"""`bash run bench load`: a year of realistic TLC months ingested back to back, then the training flow.

Each ingestion step runs in its own process with its own Spark JVM, as an Airflow task does; the
flow is a real Metaflow run. For every stage: wall time and peak resident memory of the process
tree (Python + JVM). The per-month figures show whether a month costs the same when raw holds
eleven months as when it holds none. Throw-away state directory, sources served on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MACHINE_GIB = 24  # this project's reference machine


def _timed(command: list[str], env: dict) -> tuple[float, float, str]:
    """Seconds and peak GiB of ``command`` and its children; its output."""
    from nyc_taxi_proving.bench.memory import PeakMemory

    with PeakMemory() as memory:
        started = time.perf_counter()
        run = subprocess.run(command, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    if run.returncode:
        raise SystemExit(f"{' '.join(command[:4])} failed:\n{run.stderr[-3000:]}")
    return seconds, memory.gib, run.stdout + run.stderr


def _step(names: list[str], year: int, month: int) -> list[str]:
    code = (
        "from nyc_taxi.ingest import taxi\nsummary = {}\n"
        + "".join(f"summary.update(taxi.{name}({year}, {month}).summary)\n" for name in names)
        + "import json; print('SUMMARY', json.dumps(summary, default=str))"
    )
    return [sys.executable, "-c", code]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="bash run bench load", description=__doc__)
    parser.add_argument("--rows", type=int, default=3_500_000, help="rows per month (a real 2024 month: 3.0-3.8M)")
    parser.add_argument("--months", type=int, default=12, help="months loaded one after another, from 2024-01")
    parser.add_argument("--lookback-days", type=int, default=30)
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="bench-load-"))
    from nyc_taxi_proving.fixtures.server import FixtureServer
    from nyc_taxi_proving.fixtures.site import add_taxi_month

    months = [(2024 + (m - 1) // 12, (m - 1) % 12 + 1) for m in range(1, args.months + 1)]
    t = time.perf_counter()
    for year, month in months:
        add_taxi_month(work / "site", year, month, rows=args.rows, seed=month)
    print(
        f"generated {len(months)} months of {args.rows:,} rows in {time.perf_counter() - t:.0f} s ({work})", flush=True
    )
    server = FixtureServer(work / "site")
    os.environ.update({"STATE_DIR": str(work / "state"), "PROFILE": "local", "TLC_BASE_URL": server.start()})

    from nyc_taxi.core.jobs import TRAINING_FLOW
    from nyc_taxi.core.lakehouse import lakehouse
    from nyc_taxi.core.settings import REPO_ROOT, get_settings
    from nyc_taxi.metaflow_adapter.environment import metaflow_environment
    from nyc_taxi_proving.bench.flow import step_seconds

    settings = get_settings()
    lakehouse(settings).create()
    env = {**os.environ, **metaflow_environment(settings)}
    create = [sys.executable, "-c", "from nyc_taxi.core.tables import ensure_tables\nensure_tables()"]
    startup_s, startup_gib, _ = _timed(create, env)

    per_month = []
    for year, month in months:
        stage_s, stage_gib, _ = _timed(_step(["download_published_file", "stage_landed_file"], year, month), env)
        merge_s, merge_gib, out = _timed(_step(["merge_into_raw"], year, month), env)
        summary = json.loads(next(line for line in out.splitlines() if line.startswith("SUMMARY"))[8:])
        per_month.append(
            {
                "month": f"{year}-{month:02d}",
                "stage_s": stage_s,
                "stage_gib": stage_gib,
                "merge_s": merge_s,
                "merge_gib": merge_gib,
                "merged_rows": summary["merged_rows"],
            }
        )
        print(
            f"  {year}-{month:02d}: stage {stage_s:6.1f} s {stage_gib:5.2f} GiB | merge {merge_s:6.1f} s "
            f"{merge_gib:5.2f} GiB | {summary['merged_rows']:,} rows",
            flush=True,
        )
    server.stop()

    last_year, last_month = months[-1]
    as_of = f"{last_year:04d}-{last_month:02d}-21T00:00"
    flow_s, flow_gib, out = _timed(
        [
            sys.executable,
            str(REPO_ROOT / TRAINING_FLOW.code),
            "--no-pylint",
            "run",
            "--as_of_datetime",
            as_of,
            "--lookback_days",
            str(args.lookback_days),
        ],
        env,
    )
    steps = step_seconds(out, env)

    first, rest = per_month[0], per_month[1:]
    later = rest[len(rest) // 2 :] or [first]
    mean = lambda key, entries: sum(e[key] for e in entries) / len(entries)  # noqa: E731
    peak = max([startup_gib, flow_gib] + [max(e["stage_gib"], e["merge_gib"]) for e in per_month])
    rows = [
        ("table creation (one Spark JVM), s", startup_s),
        (f"month 1 ({first['month']}, raw empty): stage + merge, s", first["stage_s"] + first["merge_s"]),
        (
            f"months {rest[0]['month'] if rest else '-'}..{per_month[-1]['month']}: mean stage + merge, s",
            mean("stage_s", rest or [first]) + mean("merge_s", rest or [first]),
        ),
        (
            "RATIO mean merge, second half / month 2  (flat: ~1)",
            mean("merge_s", later) / (rest[0]["merge_s"] if rest else first["merge_s"]),
        ),
        (
            "RATIO mean stage, second half / month 2  (flat: ~1)",
            mean("stage_s", later) / (rest[0]["stage_s"] if rest else first["stage_s"]),
        ),
        (f"flow wall time (Metaflow run, lookback {args.lookback_days} days), s", flow_s),
        ("flow peak memory (all step processes + JVMs), GiB", flow_gib),
        ("peak memory of any stage, GiB", peak),
        (f"RATIO peak memory / the {MACHINE_GIB} GiB machine", peak / MACHINE_GIB),
    ]
    print()
    for name, seconds in sorted(steps.items(), key=lambda kv: kv[1], reverse=True):
        print(f"flow step {name:28s} {seconds:8.2f} s")
    for name, value in rows:
        print(f"{name:62s} {value:10.2f}")
    figures = {
        "rows_per_month": args.rows,
        "months": per_month,
        "flow_steps_s": steps,
        **{name: value for name, value in rows},
    }
    out_path = work / "bench-load.json"
    out_path.write_text(json.dumps(figures, indent=2))
    print(f"\nfigures: {out_path}")
    return figures


if __name__ == "__main__":
    main()
