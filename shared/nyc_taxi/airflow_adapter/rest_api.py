"""Airflow's REST API as the UI uses it, as the admin user whose password Airflow generated into its
home: trigger a run (what the Trigger button does), read its state and its tasks', wait for it.
One client for everything that drives a running Airflow (the team deployment, the demo, the benches,
the tests), on the state directory's port (``AIRFLOW_PORT``) or another one."""

from __future__ import annotations

import json
import time
import urllib.request
from urllib.parse import quote

from nyc_taxi.core import team
from nyc_taxi.core.settings import Settings


def base_url(settings: Settings) -> str:
    return f"http://{team.address(settings, 'airflow-api-server')}:{settings.airflow_port}"


def passwords_file(settings: Settings):
    """Where Airflow's simple auth manager writes the admin password it generated on first start."""
    return settings.airflow_home / "simple_auth_manager_passwords.json.generated"


def health(base: str) -> dict | None:
    """Airflow's own health answer (metadatabase, scheduler, triggerer, DAG processor); None if it does not answer."""
    try:
        with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=5) as answer:
            return json.load(answer)
    except (OSError, ValueError):
        return None


def healthy(base: str, parts=("scheduler", "triggerer", "dag_processor")) -> bool:
    answer = health(base) or {}
    return all((answer.get(part) or {}).get("status") == "healthy" for part in parts)


class RestApi:
    def __init__(self, settings: Settings, base: str | None = None):
        self.base = base or base_url(settings)
        admin = json.loads(passwords_file(settings).read_text())["admin"]
        self.token = None
        self.token = self.call("/auth/token", {"username": "admin", "password": admin})["access_token"]

    def call(self, path: str, body: dict | None = None, method: str | None = None, timeout: float = 30) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.base}{path}", headers=headers, data=data, method=method)
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.load(answer)

    def trigger(self, dag_id: str, conf: dict, run_id: str | None = None, tries: int = 3) -> str:
        """A run now, with ``conf``: what the UI's Trigger button does. A conf the DAG's params refuse is
        refused here, with Airflow's reason (``urllib.error.HTTPError``, 400). The run is named here
        (``run_id``, or a new name), so asking again is safe: a try whose answer was lost (an API server
        waiting on its database's lock: SQLite's writers wait a minute; one restarting) is asked again, a few
        seconds apart, and a run of that name that exists (409) is the one an earlier try made, never a second.
        A caller that asks again itself passes the same ``run_id``."""
        import datetime as dt
        import urllib.error

        given = run_id is not None
        run_id = run_id or f"manual__{dt.datetime.now(dt.UTC).isoformat()}"
        body, attempt = {"dag_run_id": run_id, "logical_date": None, "conf": conf}, 0
        while True:
            attempt += 1
            try:
                return self.call(f"/api/v2/dags/{dag_id}/dagRuns", body, timeout=90)["dag_run_id"]
            except urllib.error.HTTPError as refused:
                if refused.code == 409 and (given or attempt > 1):  # made by an earlier try of this name
                    return run_id
                if refused.code < 500 or attempt >= tries:
                    raise
            except OSError:  # no answer: timed out, the connection dropped or refused
                if attempt >= tries:
                    raise
            time.sleep(2 * attempt)

    def run(self, dag_id: str, run_id: str) -> dict:
        return self.call(f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}")

    def runs(self, dag_id: str, **query: str) -> list[dict]:
        arguments = "&".join(f"{k}={quote(str(v))}" for k, v in query.items())
        return self.call(f"/api/v2/dags/{dag_id}/dagRuns?{arguments}")["dag_runs"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self.call(f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances")["task_instances"]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        return {ti["task_id"]: ti["state"] for ti in self.task_instances(dag_id, run_id)}

    def active_runs(self, dag_id: str = "~") -> list[dict]:
        return self.call(f"/api/v2/dags/{dag_id}/dagRuns?state=queued&state=running")["dag_runs"]

    def wait(self, ready, seconds: float = 3600, every: float = 2):
        """Poll until ``ready()`` gives an answer; a slow or refused answer (a busy machine, an API server
        that is restarting) is "not yet"."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                answer = ready()
            except (OSError, ValueError):
                answer = None
            if answer:
                return answer
            time.sleep(every)
        raise TimeoutError(f"Airflow at {self.base}: still waiting after {seconds:.0f} s")

    def finished(self, dag_id: str, run_id: str, seconds: float = 3600) -> dict:
        return self.wait(lambda: (r := self.run(dag_id, run_id))["state"] in ("success", "failed") and r, seconds)

    def queued_asset_events(self, dag_id: str = "~") -> list[dict]:
        """The asset events waiting to start a run of the DAG (``~``: of every DAG) at the scheduler's next loop,
        or once the DAG's ``max_active_runs`` lets it. Only those of a DAG that is active, imports, and whose
        schedule any one of its assets' events fulfils; others wait for an unpause, a fix or more events, which
        the scheduler alone cannot give (a schedule of several assets all needed is not waited for at all)."""
        if dag_id == "~":
            dags, total = [], None
            while total is None or len(dags) < total:  # the server's own page limit may be under 100
                page = self.call(f"/api/v2/dags?paused=false&limit=100&offset={len(dags)}")
                dags, total = dags + page["dags"], page["total_entries"]
                if not page["dags"]:
                    break
        else:
            dags = [self.call(f"/api/v2/dags/{dag_id}")]
        waiting = []
        for dag in dags:
            if dag["is_paused"] or dag["has_import_errors"] or dag.get("is_stale"):
                continue
            events = self.call(f"/api/v2/dags/{dag['dag_id']}/assets/queuedEvents")["queued_events"]
            if events and _one_event_starts_a_run(
                self.call(f"/api/v2/dags/{dag['dag_id']}/details")["asset_expression"]
            ):
                waiting += events
        return waiting

    def idle(self, dag_id: str = "~", seconds: float = 3600) -> None:
        """Until no run of the DAG (``~``: of any DAG) is queued or running and no asset event waits to start
        one. A task's asset event is queued as it ends, before its run does, and the scheduler makes it a run
        and drops it at once: read in that order, the waiting event and its run are never both out of sight."""
        self.wait(lambda: not self.queued_asset_events(dag_id) and not self.active_runs(dag_id), seconds)


def _one_event_starts_a_run(expression: dict | None) -> bool:
    """Whether any one asset event is all a DAG's schedule (Airflow's ``asset_expression``) waits for: one
    asset (a list of one is ``all`` of one), or ``any`` of plain assets."""
    if not expression:
        return False
    members = expression.get("any") or (expression["all"] if len(expression.get("all", ())) == 1 else None)
    return "asset" in expression or (bool(members) and all("asset" in member for member in members))
