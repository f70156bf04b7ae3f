"""Spark start-up as a task sees it: process start → first Iceberg query answered, in a fresh process,
for the configuration before the start-up work and for today's (`bash run bench ingest` prints both).

- before: the jars loaded by Spark's own class loader (``spark.jars``), the web UI on, no class archive;
- now: the jars on the JVM's class path, the web UI off, the class-data-sharing archive mapped;
- now, small data: the same with the quick compiler tier only (what the flow's Spark steps use).
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

def before(settings, java_options=(), small=False):
    conf = today(settings, java_options, small)
    conf["spark.jars"] = conf.pop("spark.driver.extraClassPath").replace(":", ",")
    conf["spark.ui.enabled"] = "true"
    options = conf["spark.driver.extraJavaOptions"].split()
    conf["spark.driver.extraJavaOptions"] = " ".join(o for o in options if "SharedArchiveFile" not in o and "cds" not in o)
    return conf

if variant == "before":
    spark_jvm.session_conf = before
spark = get_spark(small=variant == "small")
session = time.perf_counter()
spark.sql(f"SELECT count(*) FROM {spark_table(d.YELLOW_TAXI_RAW)}").collect()
print(json.dumps({"session_s": session - started, "first_query_s": time.perf_counter() - session,
                  "total_s": time.perf_counter() - started}))
"""
VARIANTS = {"before": "before the start-up work", "now": "now", "small": "now, small data (quick JIT tier)"}


def measure(env: dict, repeat: int = 3) -> dict[str, dict[str, float]]:
    """Median seconds of each variant over ``repeat`` fresh processes, run one after another."""
    figures = {}
    for variant in VARIANTS:
        runs = []
        for _ in range(repeat):
            out = subprocess.run(
                [sys.executable, "-c", PROBE, variant], env=env, capture_output=True, text=True, check=True
            )
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        figures[variant] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    return figures


def rows(figures: dict[str, dict[str, float]]) -> list[tuple[str, float]]:
    out = [
        (f"start-up, {VARIANTS[v]}: process start → first Iceberg query, s", f["total_s"]) for v, f in figures.items()
    ]
    out.append(
        ("RATIO start-up now / before  (target <= 0.6)", figures["now"]["total_s"] / figures["before"]["total_s"])
    )
    return out
