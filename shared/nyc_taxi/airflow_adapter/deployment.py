"""The team profile's Airflow, as a team deploys it: the CeleryExecutor on PostgreSQL (metadata and
task results) and Redis (the broker), each component a process of its own — the API server (the UI and
the execution API that tasks report to), the scheduler, the DAG processor, the triggerer and two Celery
workers. `bash run team up` starts them after the services (``nyc_taxi.core.team``), `team down` stops
them first.

Every component listens on 127.0.0.1 only: the API server where AIRFLOW__API__HOST says, and the log
servers the scheduler, triggerer and workers would open on every interface are switched off with their
own ``--skip-serve-logs`` flag (the workers share this machine's disk, where the UI reads task logs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from nyc_taxi.airflow_adapter.environment import airflow_environment, prepare_directories
from nyc_taxi.core import team
from nyc_taxi.core.settings import Settings

WORKERS = 2
COMPONENTS: dict[str, list[str]] = {
    "api-server": ["api-server"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
    # one task at a time per worker: each task is a Spark driver; two workers, two tasks at once
    **{
        f"worker-{n}": ["celery", "worker", "--celery-hostname", f"worker-{n}@%h", "--concurrency", "1"]
        + ["--skip-serve-logs"]
        for n in range(1, WORKERS + 1)
    },
}


def _record(settings: Settings) -> Path:
    return team.team_dir(settings) / "airflow.json"


def _log(settings: Settings, component: str) -> Path:
    return settings.airflow_home / "logs" / "components" / f"{component}.log"


def base_url(settings: Settings) -> str:
    return f"http://127.0.0.1:{settings.airflow_port}"


def health(settings: Settings) -> dict | None:
    """Airflow's own health answer (metadatabase, scheduler, triggerer, DAG processor), None if it does not answer."""
    try:
        with urllib.request.urlopen(f"{base_url(settings)}/api/v2/monitor/health", timeout=5) as answer:
            return json.load(answer)
    except OSError:
        return None


def _healthy(settings: Settings) -> bool:
    answer = health(settings) or {}
    return all(answer.get(part, {}).get("status") == "healthy" for part in ("scheduler", "triggerer", "dag_processor"))


def _environment(settings: Settings) -> dict[str, str]:
    return {**os.environ, **airflow_environment(settings)}


def up(settings: Settings) -> list[str]:
    record = team.read_record(_record(settings)) or {}
    running = {name: pid for name, pid in record.items() if team.alive(pid)}
    if running.keys() == COMPONENTS.keys():
        return [f"Airflow: running on {base_url(settings)} ({len(running)} processes)"]
    if team.listening(settings.airflow_port) and "api-server" not in running:
        raise team.ServiceError(f"127.0.0.1:{settings.airflow_port} is taken: set AIRFLOW_PORT to a free port")
    prepare_directories(settings)
    env = _environment(settings)
    migrated = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=600
    )
    if migrated.returncode != 0:
        raise team.ServiceError(f"airflow db migrate failed: {migrated.stderr.strip()[-2000:]}")
    for name, args in COMPONENTS.items():
        if name not in running:
            running[name] = team.spawn([sys.executable, "-m", "airflow", *args], env, _log(settings, name))
            team.write_private(_record(settings), running)
    team.wait_until(
        lambda: _healthy(settings) or any(not team.alive(pid) for pid in running.values()),
        300,
        "Airflow (scheduler, triggerer, DAG processor)",
    )
    dead = [name for name, pid in running.items() if not team.alive(pid)]
    if dead:
        tail = _log(settings, dead[0]).read_text(errors="replace")[-2500:]
        raise team.ServiceError(f"Airflow's {', '.join(dead)} exited; {_log(settings, dead[0])} ends:\n{tail}")
    return [
        f"Airflow: API server and UI on {base_url(settings)}, scheduler, DAG processor, triggerer, "
        f"{WORKERS} Celery workers (logs under {_log(settings, 'x').parent})"
    ]


def down(settings: Settings) -> list[str]:
    record = team.read_record(_record(settings))
    if not record:
        return ["Airflow: not running"]
    # workers first (a warm shutdown lets a running task end), the API server last
    for name in reversed(list(record)):
        team.stop_process(record[name], seconds=60)
    _record(settings).unlink(missing_ok=True)
    return ["Airflow: stopped"]


def status(settings: Settings) -> list[str]:
    record = team.read_record(_record(settings)) or {}
    alive = [name for name, pid in record.items() if team.alive(pid)]
    if not alive:
        return ["Airflow: down"]
    answer = health(settings) or {}
    parts = ", ".join(f"{part} {answer.get(part, {}).get('status', '?')}" for part in ("scheduler", "triggerer"))
    return [f"Airflow: {len(alive)} of {len(COMPONENTS)} processes on {base_url(settings)} ({parts})"]
