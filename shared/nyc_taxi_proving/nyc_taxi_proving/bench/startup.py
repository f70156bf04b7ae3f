"""Spark start-up as a task sees it: process start → first Iceberg query answered, in a fresh process,
for the configuration before the start-up work and for today's (`bash run bench ingest` prints both).

- before: the jars loaded by Spark's own class loader (``spark.jars``), the web UI on, no class archive;
- now: the jars on the JVM's class path, the web UI off, the class-data-sharing archive mapped;
- now, small data: the same with the quick compiler tier only (what the flow's Spark steps use);
- now without the archive: today's, the driver's class-data-sharing archive left out.

`bash run bench startup --profile team` measures today's with and without the archive on the team profile, in a throw-away
deployment of its own (`team up`, then `team down --delete-data`): a driver on this machine, its
executor on the deployment's Spark cluster, the catalog in PostgreSQL, the tables in the bucket.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

# Runs in a fresh process: ``variant`` rewrites today's session configuration into the one measured.
PROBE = """
import json, sys, time
started = time.perf_counter()
import nyc_taxi.core.spark_jvm as spark_jvm
from nyc_taxi.core import datasets as d
from nyc_taxi.core.spark import get_spark
from nyc_taxi.core.naming import spark_table

variant, today = sys.argv[1], spark_jvm.session_conf

def without_the_archive(settings, java_options=(), small=False):
    conf = today(settings, java_options, small)
    options = conf["spark.driver.extraJavaOptions"].split()
    conf["spark.driver.extraJavaOptions"] = " ".join(o for o in options if "SharedArchiveFile" not in o and "cds" not in o)
    return conf

def before(settings, java_options=(), small=False):
    conf = without_the_archive(settings, java_options, small)
    conf["spark.jars"] = conf.pop("spark.driver.extraClassPath").replace(":", ",")
    conf["spark.ui.enabled"] = "true"
    return conf

if variant == "before":
    spark_jvm.session_conf = before
if variant == "without":
    spark_jvm.session_conf = without_the_archive
spark = get_spark(small=variant == "small")
session = time.perf_counter()
spark.sql(f"SELECT count(*) FROM {spark_table(d.YELLOW_TAXI_RAW)}").collect()
print(json.dumps({"session_s": session - started, "first_query_s": time.perf_counter() - session,
                  "total_s": time.perf_counter() - started}))
"""
VARIANTS = {
    "before": "before the start-up work",
    "now": "now",
    "small": "now, small data (quick JIT tier)",
    "without": "now without the driver's class archive",
}


def measure(env: dict, repeat: int = 3, variants: tuple[str, ...] = ("before", "now", "small")) -> dict:
    """Median seconds of each variant over ``repeat`` fresh processes, run one after another."""
    runs: dict[str, list[dict]] = {variant: [] for variant in variants}
    for _ in range(repeat):  # in turn, so that a machine settling after a start weighs on each alike
        for variant in variants:
            out = subprocess.run(
                [sys.executable, "-c", PROBE, variant], env=env, capture_output=True, text=True, check=True
            )  # a failure's standard error goes with it (CalledProcessError.stderr)
            runs[variant].append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {
        variant: {key: statistics.median(r[key] for r in done) for key in done[0]} for variant, done in runs.items()
    }


def rows(figures: dict[str, dict[str, float]]) -> list[tuple[str, float]]:
    out = [
        (f"start-up, {VARIANTS[v]}: process start → first Iceberg query, s", f["total_s"]) for v, f in figures.items()
    ]
    if "before" in figures:
        out.append(
            ("RATIO start-up now / before  (target <= 0.6)", figures["now"]["total_s"] / figures["before"]["total_s"])
        )
    if "without" in figures:  # no target: what the archive buys a driver here
        out.append(
            ("RATIO start-up now / without the archive", figures["now"]["total_s"] / figures["without"]["total_s"])
        )
    return out


def main(argv: list[str] | None = None) -> None:
    import argparse
    import os
    import shutil
    import tempfile
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="bash run bench startup", description=__doc__)
    parser.add_argument("--profile", choices=("local", "team"), default="local")
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes per variant (their median)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OPENLINEAGE"))}
    env |= {"STATE_DIR": str(work / "state"), "PROFILE": args.profile, "SPARK_SERVER": "false"}
    if args.profile == "team":  # the throw-away deployment's API server on a port of its own
        from nyc_taxi.core.processes import free_port

        env["AIRFLOW_PORT"] = str(free_port())
    team = [sys.executable, "-m", "nyc_taxi_proving.cli.team"]
    log = work / "team.log"
    try:
        if args.profile == "team":
            print(f"... a throw-away team deployment (log: {log})", flush=True)
            with log.open("a") as out:
                subprocess.run([*team, "up"], env=env, stdout=out, stderr=subprocess.STDOUT, check=True)
        tables = "from nyc_taxi.core.lakehouse import lakehouse\nfrom nyc_taxi.core.tables import ensure_tables\n"
        subprocess.run([sys.executable, "-c", tables + "lakehouse().create(); ensure_tables()"], env=env, check=True)
        variants = ("without", "now") if args.profile == "team" else ("before", "without", "now", "small")
        figures = measure(env, args.repeat, variants)
    except subprocess.CalledProcessError as error:
        raise SystemExit(f"{error}\n{(error.stderr or '')[-3000:]}\n(kept: {work})") from error
    finally:
        if args.profile == "team":
            with log.open("a") as out:
                down = subprocess.run([*team, "down", "--delete-data"], env=env, stdout=out, stderr=subprocess.STDOUT)
            if down.returncode:
                raise SystemExit(f"team down --delete-data failed: its deployment may still run (log: {log})")
    shutil.rmtree(work, ignore_errors=True)  # kept, with its log, when a step failed
    print(f"\nSpark start-up, profile {args.profile}, median of {args.repeat} fresh processes each:")
    for name, value in rows(figures):
        print(f"  {name:<95} {value:8.2f}")


if __name__ == "__main__":
    main()
