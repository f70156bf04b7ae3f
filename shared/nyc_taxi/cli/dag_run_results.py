"""DAG runs' results as the demo and the re-run print them: a line per run, and under a run that failed,
each failed task's error as the task itself recorded it (OpenLineage's ``errorMessage`` facet in its
lineage), so the cause is on the screen and not only in a log."""

from __future__ import annotations

import json

from nyc_taxi.core.settings import Settings


def describe(result: dict, settings: Settings) -> list[str]:
    """``result`` is a line of ``airflow_adapter.dag_runs``: dag_id, conf, run_id, state, tasks, seconds."""
    lines = [f"{result['dag_id']} {json.dumps(result['conf'])}: {result['state']} ({result['seconds']:.0f} s)"]
    if result["state"] == "success":
        return lines
    from nyc_taxi.lineage.read.runs import Runs

    runs = Runs.read(settings)
    for task, state in result.get("tasks", {}).items():
        if state != "failed":
            continue
        recorded = [r for r in runs.of_job(f"{result['dag_id']}.{task}") if r.label == result["run_id"] and r.error]
        error = recorded[-1].error.strip() if recorded else "no error recorded: see the task's log in the Airflow UI"
        lines += [f"  {task} failed: {error.splitlines()[0][:500]}"] + [
            f"    {x[:500]}" for x in error.splitlines()[1:12]
        ]
    return lines
