"""Where a Spark step's time goes, query by query, from Spark's own event log.

The benchmarks run the flow with Spark's event log on (``--conf`` in ``PYSPARK_SUBMIT_ARGS``: the product's
settings are untouched, and so is the JVM's class path, which a ``SPARK_CONF_DIR`` of their own would
change, so that the class-data-sharing archive would not map) and read it back here: each SQL execution
with its duration, the SQL file it came from (``SqlFolder.run`` names the queries after their file), what
its Iceberg scans read after pruning (data files read and skipped, bytes, rows) and what its writes wrote.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

SCAN_METRICS = {  # Iceberg's scan metrics, as Spark's event log names them
    "number of file splits read": "splits_read",
    "number of skipped data files": "files_skipped",
    "total data file size (bytes)": "bytes_read",
    "number of output rows": "rows",
}
WRITE_METRICS = {"number of written files": "files_written", "written output": "bytes_written"}


def event_log_submit_args(event_logs: Path, before: str | None = None) -> str:
    """``PYSPARK_SUBMIT_ARGS`` that turn Spark's event log on, writing to ``event_logs``, with ``before``'s
    arguments (PySpark's default ``pyspark-shell`` when none)."""
    event_logs.mkdir(parents=True, exist_ok=True)
    conf = ["--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir=file://{event_logs}"]
    return shlex.join([*conf, *shlex.split(before or "pyspark-shell")])


@dataclass
class Query:
    description: str
    seconds: float
    scans: dict[str, int] = field(default_factory=dict)  # summed over the query's Iceberg scans
    writes: dict[str, int] = field(default_factory=dict)
    plan: str = ""

    def line(self) -> str:
        if not self.scans:
            scan = "no table scan"
        elif not any(self.scans.values()):
            scan = "read nothing from a table (a cached result)"
        else:
            scan = (
                f"read {self.scans.get('splits_read', 0)} splits ({self.scans.get('files_skipped', 0)} files "
                f"skipped), {self.scans.get('bytes_read', 0) / 2**20:.1f} MiB, {self.scans.get('rows', 0):,} rows"
            )
        write = (
            f"; wrote {self.writes.get('files_written', 0)} files, {self.writes.get('bytes_written', 0) / 2**20:.2f} MiB"
            if self.writes
            else ""
        )
        return f"{self.seconds:7.2f} s  {self.description:44s} {scan}{write}"


def _nodes(info: dict):
    yield info
    for child in info.get("children", []):
        yield from _nodes(child)


def read_event_log(path: Path, since_ms: float = 0) -> list[Query]:
    """Every SQL execution of one application's event log that started after ``since_ms`` (epoch ms), in
    the order they started (a running application's log holds what Spark has flushed so far).

    A metric counts what its execution's own jobs did: a later query over a cached result shows the
    cached plan's scan again, with the same accumulators, but read nothing from the table itself."""
    starts, ends, plans, values, stage_execution = {}, {}, {}, {}, {}
    for line in path.read_text().splitlines():
        event = json.loads(line)
        kind = event.get("Event", "")
        if kind.endswith("SparkListenerSQLExecutionStart"):
            starts[event["executionId"]] = (event["time"], event.get("description", ""))
            plans[event["executionId"]] = event.get("sparkPlanInfo", {})
        elif kind.endswith("SparkListenerSQLAdaptiveExecutionUpdate"):
            plans[event["executionId"]] = event.get("sparkPlanInfo", plans.get(event["executionId"], {}))
        elif kind.endswith("SparkListenerSQLExecutionEnd"):
            ends[event["executionId"]] = event["time"]
        elif kind.endswith("SparkListenerDriverAccumUpdates"):
            for accumulator, value in event.get("accumUpdates", []):
                key = (event["executionId"], accumulator)
                values[key] = values.get(key, 0) + int(value)
        elif kind == "SparkListenerJobStart":
            execution = (event.get("Properties") or {}).get("spark.sql.execution.id")
            for stage in event.get("Stage IDs", []):
                stage_execution[stage] = None if execution is None else int(execution)
        elif kind == "SparkListenerTaskEnd":
            execution = stage_execution.get(event.get("Stage ID"))
            for accumulable in event.get("Task Info", {}).get("Accumulables", []):
                update = accumulable.get("Update")
                if isinstance(update, int | str) and str(update).lstrip("-").isdigit():
                    key = (execution, accumulable["ID"])
                    values[key] = values.get(key, 0) + int(update)
    queries = []
    for execution, (started, description) in sorted(starts.items(), key=lambda kv: kv[1][0]):
        if execution not in ends or started < since_ms:
            continue
        query = Query(description.splitlines()[0] if description else "?", (ends[execution] - started) / 1000)
        names, counted = [], set()  # a cached plan shows its scan once per reader: each accumulator once
        for node in _nodes(plans[execution]):
            names.append(node.get("nodeName", ""))
            wanted = SCAN_METRICS if node.get("nodeName", "").startswith("BatchScan") else WRITE_METRICS
            target = query.scans if wanted is SCAN_METRICS else query.writes
            for metric in node.get("metrics", []):
                if metric["name"] in wanted and metric["accumulatorId"] not in counted:
                    counted.add(metric["accumulatorId"])
                    key = wanted[metric["name"]]
                    target[key] = target.get(key, 0) + values.get((execution, metric["accumulatorId"]), 0)
        query.plan = " > ".join(n for n in names[:4] if n)
        queries.append(query)
    return queries


def event_logs(directory: Path) -> list[Path]:
    """The applications' event logs in ``directory``, oldest first."""
    return sorted((p for p in directory.iterdir() if p.is_file()), key=lambda p: p.stat().st_mtime)
