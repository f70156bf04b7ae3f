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
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

from nyc_taxi.airflow_adapter.environment import airflow_environment, prepare_directories
from nyc_taxi.core import processes, team
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


def running(settings: Settings) -> bool:
    """Whether this state directory's deployment runs (its API server answers)."""
    record = processes.read_record(_record(settings)) or {}
    return processes.alive(record.get("api-server", 0)) and health(settings) is not None


class Api:
    """Airflow's REST API as the UI uses it, as the deployment's admin user (the password Airflow
    generated into its home): trigger a run, read its state, wait for it."""

    def __init__(self, settings: Settings):
        self.settings, self.base = settings, base_url(settings)
        passwords = settings.airflow_home / "simple_auth_manager_passwords.json.generated"
        admin = json.loads(passwords.read_text())["admin"]
        self.token = self.call("/auth/token", {"username": "admin", "password": admin})["access_token"]

    def call(self, path: str, body: dict | None = None) -> dict:
        headers = {"Content-Type": "application/json"}
        if getattr(self, "token", None):
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.base}{path}", headers=headers, data=data)
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.load(answer)

    def trigger(self, dag_id: str, conf: dict) -> str:
        """A run now, with ``conf``: what the UI's Trigger button does."""
        return self.call(f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})["dag_run_id"]

    def run(self, dag_id: str, run_id: str) -> dict:
        return self.call(f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}")

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        answer = self.call(f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances")
        return {ti["task_id"]: ti["state"] for ti in answer["task_instances"]}

    def active_runs(self, dag_id: str = "~") -> list[dict]:
        return self.call(f"/api/v2/dags/{dag_id}/dagRuns?state=queued&state=running")["dag_runs"]

    def wait(self, ready, seconds: float = 3600):
        """Poll until ``ready()`` gives an answer; a slow or refused answer (a busy machine) is "not yet"."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                answer = ready()
            except OSError:
                answer = None
            if answer:
                return answer
            time.sleep(2)
        raise TimeoutError(f"Airflow at {self.base}: still waiting after {seconds:.0f} s")

    def finished(self, dag_id: str, run_id: str) -> dict:
        return self.wait(lambda: (r := self.run(dag_id, run_id))["state"] in ("success", "failed") and r)

    def idle(self, dag_id: str = "~") -> None:
        """Until no run of the DAG (``~``: of any DAG) is queued or running."""
        self.wait(lambda: not self.active_runs(dag_id))


def _environment(settings: Settings) -> dict[str, str]:
    return {**os.environ, **airflow_environment(settings)}


def up(settings: Settings) -> list[str]:
    record = processes.read_record(_record(settings)) or {}
    running = {name: pid for name, pid in record.items() if processes.alive(pid)}
    if running.keys() == COMPONENTS.keys():
        return [f"Airflow: running on {base_url(settings)} ({len(running)} processes)"]
    if processes.listening(settings.airflow_port) and "api-server" not in running:
        raise processes.ServiceError(f"127.0.0.1:{settings.airflow_port} is taken: set AIRFLOW_PORT to a free port")
    prepare_directories(settings)
    env = _environment(settings)
    migrated = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=600
    )
    if migrated.returncode != 0:
        raise processes.ServiceError(f"airflow db migrate failed: {migrated.stderr.strip()[-2000:]}")
    for name, args in COMPONENTS.items():
        if name not in running:
            running[name] = processes.spawn([sys.executable, "-m", "airflow", *args], env, _log(settings, name))
            processes.write_private(_record(settings), running)
    processes.wait_until(
        lambda: _healthy(settings) or any(not processes.alive(pid) for pid in running.values()),
        300,
        "Airflow (scheduler, triggerer, DAG processor)",
    )
    dead = [name for name, pid in running.items() if not processes.alive(pid)]
    if dead:
        tail = _log(settings, dead[0]).read_text(errors="replace")[-2500:]
        raise processes.ServiceError(f"Airflow's {', '.join(dead)} exited; {_log(settings, dead[0])} ends:\n{tail}")
    return [
        f"Airflow: API server and UI on {base_url(settings)}, scheduler, DAG processor, triggerer, "
        f"{WORKERS} Celery workers (logs under {_log(settings, 'x').parent})"
    ]


def down(settings: Settings) -> list[str]:
    record = processes.read_record(_record(settings))
    if not record:
        return ["Airflow: not running"]
    # workers first (a warm shutdown lets a running task end), the API server last
    for name in reversed(list(record)):
        processes.stop_process(record[name], seconds=60)
    _record(settings).unlink(missing_ok=True)
    return ["Airflow: stopped"]


def status(settings: Settings) -> list[str]:
    record = processes.read_record(_record(settings)) or {}
    alive = [name for name, pid in record.items() if processes.alive(pid)]
    if not alive:
        return ["Airflow: down"]
    answer = health(settings) or {}
    parts = ", ".join(f"{part} {answer.get(part, {}).get('status', '?')}" for part in ("scheduler", "triggerer"))
    return [f"Airflow: {len(alive)} of {len(COMPONENTS)} processes on {base_url(settings)} ({parts})"]
