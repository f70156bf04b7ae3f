"""The chaos run's mission: a team deployment's ordinary work, through its scheduler.

Two taxi months and their weather are published; each month's two ingestion DAG runs are triggered
together through the REST API (what the UI's Trigger button does); each taxi merge's asset event makes
the scheduler start ``train_forecast_model``; after both months a weather-adjusted backtest; last,
`bash run lineage-replay` ships what the lineage server has not accepted. Each step waits until no DAG
run is queued or running, so what a run reads does not depend on timing: a clean run and a run with
faults do the same work in the same order.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from nyc_taxi.airflow_adapter.rest_api import RestApi
from nyc_taxi.core.jobs import INGEST_WEATHER_DATA, INGEST_YELLOW_TAXI_DATA, TRAIN_FORECAST_MODEL
from nyc_taxi.core.settings import Settings
from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month

MONTHS = ((2024, 1), (2024, 2))


@dataclass(frozen=True)
class Step:
    name: str
    runs: tuple[tuple[str, dict], ...]  # (DAG id, conf) triggered together


def backtest_origin(months=MONTHS) -> dt.datetime:
    """The mission's backtest starts in the middle of the last month."""
    year, month = months[-1]
    return dt.datetime(year, month, 15)


def steps(months=MONTHS) -> tuple[Step, ...]:
    """Each month's two ingestion runs, then a weather-adjusted backtest in the middle of the last month."""
    backtest = {"as_of_datetime": f"{backtest_origin(months):%Y-%m-%dT%H:%M}", "model": "weather_adjusted"}
    return (
        *(
            Step(
                f"month {y:04d}-{m:02d}",
                tuple((d.name, {"month": f"{y:04d}-{m:02d}"}) for d in (INGEST_YELLOW_TAXI_DATA, INGEST_WEATHER_DATA)),
            )
            for y, m in months
        ),
        Step("backtest", ((TRAIN_FORECAST_MODEL.name, backtest),)),
    )


STEPS = steps()


def publish(site: Path, rows: int, months=MONTHS) -> list[Path]:
    """The months' taxi files and weather files on the fixture site; the taxi files."""
    taxi = []
    for year, month in months:
        taxi.append(add_taxi_month(site, year, month, rows=rows, seed=month))
        add_weather_month(site, year, month, seed=month)
    return taxi


@dataclass
class Progress:
    """Where the mission is, for the faults to find their moment: the step, and the steps done."""

    step: str = ""
    passed: list[str] = field(default_factory=list)


def run(
    settings: Settings,
    env: dict[str, str],
    progress: Progress,
    seconds: float = 3600,
    months=MONTHS,
    these: tuple[Step, ...] | None = None,
    last=None,
) -> list[dict]:
    """The mission's steps (``these``: others than the months' own) on a running deployment, then its last
    shipping (``last``: another than `bash run lineage-replay`); every DAG run it saw, with its state."""
    api = RestApi(settings)
    for step in these or steps(months):
        if progress.step:
            progress.passed.append(progress.step)
        progress.step = step.name
        for dag_id, conf in step.runs:
            api.wait(lambda dag_id=dag_id: api.call(f"/api/v2/dags/{dag_id}"), 300)  # parsed by the DAG processor
            named = f"manual__{dt.datetime.now(dt.UTC).isoformat()}"  # one run, however often it is asked for
            api.wait(lambda dag_id=dag_id, conf=conf, named=named: api.trigger(dag_id, conf, named), 300)
        _idle(api, seconds)
    progress.passed.append(progress.step)
    progress.step = "lineage replay"
    (last or (lambda: replay(env)))()
    return runs(api)


def _idle(api: RestApi, seconds: float) -> None:
    """Until no DAG run is queued or running (the asset-triggered trainings included); a few seconds more
    so the scheduler has made the runs a merge's asset event asks for."""
    deadline = time.monotonic() + seconds
    quiet_since = None
    while time.monotonic() < deadline:
        try:
            busy = bool(api.active_runs())
        except OSError:  # the API server is being restarted
            busy = True
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > 15:
            return
        time.sleep(2)
    raise TimeoutError(f"the mission's step did not end within {seconds:.0f} s")


def replay(env: dict[str, str], attempts: int = 5) -> None:
    """`bash run lineage-replay`: what the lineage server has not accepted yet, in order."""
    for _ in range(attempts):
        done = subprocess.run(
            [sys.executable, "-m", "nyc_taxi.cli.replay"], env=env, capture_output=True, text=True, timeout=600
        )
        if done.returncode == 0:
            return
        time.sleep(5)
    raise RuntimeError(f"bash run lineage-replay failed: {done.stdout[-1500:]}{done.stderr[-1500:]}")


def runs(api: RestApi) -> list[dict]:
    """Every DAG run of the mission's DAGs, the scheduler's own runs for the current period left out."""
    found = []
    for dag in (INGEST_YELLOW_TAXI_DATA, INGEST_WEATHER_DATA, TRAIN_FORECAST_MODEL):
        for run in api.runs(dag.name, limit=100):
            if run["run_type"] != "scheduled":
                found.append(
                    {
                        "dag_id": dag.name,
                        "run_id": run["dag_run_id"],
                        "state": run["state"],
                        "type": run["run_type"],
                        "conf": run.get("conf"),
                        "run_after": run.get("run_after"),
                        # seconds each task's last try ran (a chaos run's moments are drawn within them)
                        "durations": {
                            t["task_id"]: t["duration"]
                            for t in api.task_instances(dag.name, run["dag_run_id"])
                            if t.get("duration") is not None
                        },
                    }
                )
    return found
