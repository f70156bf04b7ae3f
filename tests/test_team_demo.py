"""`PROFILE=team bash run demo`, as the README shows it (the system lane: a deployment and the whole demo
through its scheduler): it brings the team deployment up, triggers every DAG run through the REST API,
lets the scheduler start the trainings from the merges' asset events, acts on January's republication and
refuses the broken month, as the local demo does (tests/test_lineage.py reads that one). Each month's taxi
and weather loads, which share no dataset, are triggered together, and the two Celery workers ran tasks of
both at the same time (a month whose loads met a training holding a worker takes turns on the other)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from team_deployment import assert_the_team_demo_ended_as_the_local_one, task_spans

from nyc_taxi.core.jobs import INGEST_WEATHER_DATA, INGEST_YELLOW_TAXI_DATA
from nyc_taxi.core.processes import free_port

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.team, pytest.mark.system]


def test_the_team_demo_runs_through_the_scheduler_and_ends_as_the_local_one():
    # a short path: supervisord's socket is under it, and a Unix socket's path has at most 107 bytes
    state = Path(tempfile.mkdtemp(prefix="team-demo-")) / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TLC_", "NOAA_"))}
    env |= {"PROFILE": "team", "STATE_DIR": str(state), "AIRFLOW_PORT": str(free_port())}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "nyc_taxi_proving.cli.demo"], env=env, capture_output=True, text=True, timeout=3600
        )
        assert_the_team_demo_ended_as_the_local_one(done)
        _a_months_loads_ran_at_once(state, int(env["AIRFLOW_PORT"]), ("2024-01", "2024-02"))
    finally:
        down = subprocess.run(
            [sys.executable, "-m", "nyc_taxi_proving.cli.team", "down", "--delete-data"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        print(down.stdout, down.stderr)
        shutil.rmtree(state.parent, ignore_errors=True)


def _a_months_loads_ran_at_once(state: Path, port: int, months: tuple[str, ...]) -> None:
    """A task of a month's first taxi run and one of its first weather run, as the scheduler recorded them,
    ran at the same time, for at least one of ``months`` (one after the other, none would)."""
    from nyc_taxi.airflow_adapter.rest_api import RestApi
    from nyc_taxi.core.settings import Settings

    api = RestApi(Settings(_env_file=None, profile="team", state_dir=state, airflow_port=port))
    dags = (INGEST_YELLOW_TAXI_DATA.name, INGEST_WEATHER_DATA.name)
    first: dict[tuple[str, str], dict] = {}
    for dag in dags:
        for run in sorted(api.runs(dag, limit=100), key=lambda r: r["start_date"] or ""):
            first.setdefault((dag, (run.get("conf") or {}).get("month")), run)
    overlapping = {}
    for month in months:
        taxi, weather = (task_spans(api, dag, first[(dag, month)]["dag_run_id"]) for dag in dags)
        overlapping[month] = [(a, b) for a in taxi for b in weather if max(a[0], b[0]) < min(a[1], b[1])]
    assert any(overlapping.values()), f"no month's loads ran a task at the same time: {first}"
