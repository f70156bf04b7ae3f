"""DAG runs started from the command line (the re-run plan, a backtest) and their results as the demo and
those commands print them: a line per run, and under a run that failed, each failed task's error as the task
itself recorded it (OpenLineage's ``errorMessage`` facet in its lineage), so the cause is on the screen and
not only in a log."""

from __future__ import annotations

import json
import subprocess
import sys

from nyc_taxi.core.settings import Settings


def run(specs: list[str], settings: Settings, what: str) -> list[dict]:
    """``specs`` (``DAG_ID:CONF_JSON``) in order through Airflow (``airflow_adapter.dag_runs``: the team
    deployment's scheduler where it runs, a month's loads at once, else ``dag.test()``); their results. RuntimeError naming the
    failed tasks' errors when one fails: the runs before it stand (each is its own commits)."""
    from nyc_taxi.airflow_adapter.environment import airflow_process_environment, prepare_directories
    from nyc_taxi.core.progress import run_showing_progress

    prepare_directories(settings)
    env = airflow_process_environment(settings)
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, check=True, capture_output=True)
    done = run_showing_progress([sys.executable, "-m", "nyc_taxi.airflow_adapter.dag_runs", *specs], env)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode:
        said = [text for r in results for text in describe(r, settings)] + [t for t in [unexplained(done)] if t]
        raise RuntimeError(f"{what} failed; the runs before it stand (each is one commit):\n" + "\n".join(said))
    return results


def unexplained(done: subprocess.CompletedProcess) -> str:
    """What a failed ``dag_runs`` wrote besides its results when no failed run's line says why (every run
    succeeded and the runs' lineage did not arrive, or it failed before a run ended); empty otherwise."""
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return "" if any(r.get("state") != "success" for r in results) else done.stderr[-3000:]


def describe(result: dict, settings: Settings) -> list[str]:
    """``result`` is a line of ``airflow_adapter.dag_runs``: dag_id, conf, run_id, state, tasks, seconds."""
    lines = [f"{result['dag_id']} {json.dumps(result['conf'])}: {result['state']} ({result['seconds']:.1f} s)"]
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
