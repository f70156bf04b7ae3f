"""When a chaos run kills: each moment waits for what it names to happen in the mission, kills its
component there (``components.kill``), and returns what was running at that instant.

Generic moments — `during <dag>.<task>` — wait until a try of that task has run for a seeded number of
seconds. The named moments are the ones the systems underneath get wrong (Airflow, Celery, Iceberg,
delivery); each is held open on purpose so that it is met every time, not by chance:

- ``worker after commit``: the worker running the taxi merge, once raw's catalog entry points at the
  merge's new metadata (the commit landed; the task, frozen while a trigger held that UPDATE, has not
  said so);
- ``staging load after writing``: the worker running the taxi stage, once staging's commit landed (held
  the same way);
- ``PostgreSQL mid-commit``: PostgreSQL while the catalog's UPDATE of a commit is in flight (a trigger
  the chaos run installs holds that UPDATE for a few seconds, the moment it is killed in);
- ``scheduler between queueing and recording``: the scheduler the instant a task's message reaches the
  broker (seen on Redis's MONITOR), frozen there with SIGSTOP, then killed;
- ``API server while a task reports success``: a trigger holds the UPDATE that records the weather
  merge's success in Airflow's database; the API server making it is killed while it waits;
- ``Redis while a task is queued``: both workers frozen and cut from Redis so a task's message waits
  there, Redis killed, the workers let go;
- ``lineage shipper after the server accepted`` and ``lineage server down beyond every retry budget``:
  the lineage server's moments, in ``lineage_moments``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from nyc_taxi.airflow_adapter.rest_api import RestApi
from nyc_taxi.core import jobs, team
from nyc_taxi.core.datasets import YELLOW_TAXI_RAW
from nyc_taxi.core.settings import Settings
from nyc_taxi_proving.chaos import components
from nyc_taxi_proving.chaos.components import COMPONENTS, Component
from nyc_taxi_proving.deployment.supervisor import Supervisor
from nyc_taxi_proving.fixtures.lineage_server import LineageServer

TAXI, WEATHER, TRAINING = jobs.INGEST_YELLOW_TAXI_DATA, jobs.INGEST_WEATHER_DATA, jobs.TRAIN_FORECAST_MODEL
HELD_DESCRIBED_WITHIN = 30  # seconds: a held moment's description waits this long for the API


@dataclass
class Context:
    """What a moment looks at and acts on."""

    settings: Settings
    server: LineageServer
    stop: threading.Event
    run_types: dict[tuple[str, str], str] = field(default_factory=dict)  # (DAG id, run id): manual, scheduled, …

    @property
    def deployment(self) -> str:
        return str(team.team_dir(self.settings))

    def supervisor(self) -> Supervisor:
        return Supervisor(self.settings)

    def api(self) -> RestApi:
        return RestApi(self.settings)

    def running_tasks(self) -> list[dict]:
        """The mission's tries running now. The scheduler's own run for the current period is not the
        mission's: nothing is published for it, its download is skipped, and a fault that hit it waited
        for a success that was never to come (a seed-2 run, fault 16)."""
        answer = self.api().call("/api/v2/dags/~/dagRuns/~/taskInstances?state=running&limit=50")
        return [t for t in answer["task_instances"] if self._run_type(t["dag_id"], t["dag_run_id"]) != "scheduled"]

    def _run_type(self, dag_id: str, run_id: str) -> str:
        key = (dag_id, run_id)
        if key not in self.run_types:
            self.run_types[key] = self.api().run(dag_id, run_id)["run_type"]
        return self.run_types[key]

    def now(self, seconds: float = 5) -> str:
        """What is running: each task (DAG, task, try) and each flow step, as the API answers within
        ``seconds`` (asked again until then: on a busy machine one answer may take longer than 5 s)."""
        deadline = time.monotonic() + seconds
        tasks = ["(the API does not answer)"]
        while True:
            try:
                answer = self.api().call(
                    "/api/v2/dags/~/dagRuns/~/taskInstances?state=running&state=queued&limit=50",
                    timeout=max(1.0, deadline - time.monotonic()),
                )
                tasks = [
                    f"{t['dag_id']}.{t['task_id']} try {t['try_number']}{' (queued)' if t['state'] == 'queued' else ''}"
                    for t in answer["task_instances"]
                ]
                break
            except Exception:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.2)
        steps = sorted({_step_name(p) for p in components.flow_steps(self.deployment)})
        return "; ".join(tasks + [f"flow step {s}" for s in steps]) or "nothing running"

    def wait(self, ready, seconds: float = 1800, step: float = 0.2):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.stop.is_set():
            with contextlib.suppress(Exception):
                if answer := ready():
                    return answer
            time.sleep(step)
        raise TimeoutError("the moment never came")

    def worker_running(self, task: dict) -> str:
        """The Celery worker whose process tree runs the task instance (by the task's pid)."""
        programs = {p["name"]: p["pid"] for p in self.supervisor().programs()}
        process = psutil.Process(task["pid"])
        for parent in [process, *process.parents()]:
            for name in components.WORKERS:
                if parent.pid == programs.get(name):
                    return name
        raise LookupError(f"no worker runs pid {task['pid']}")

    def metadata_location(self, table: str) -> str | None:
        db = team.Postgres(self.settings).connect("lakehouse")
        try:
            with db.cursor() as cursor:
                cursor.execute("SELECT metadata_location FROM iceberg_tables WHERE table_name = %s", (table,))
                found = cursor.fetchone()
                return found[0] if found else None
        finally:
            db.close()


def _descends(process: psutil.Process, ancestor: int) -> bool:
    """Whether the process runs under ``ancestor`` (a task's Spark driver, its flow's steps)."""
    with contextlib.suppress(psutil.Error):
        return any(parent.pid == ancestor for parent in process.parents())
    return False


def _step_name(process: psutil.Process) -> str:
    try:
        words = process.cmdline()
        return words[words.index("step") + 1]
    except (ValueError, IndexError, psutil.Error):
        return "?"


@dataclass
class Kill:
    """What a moment did: the component, the processes, what was running, when."""

    component: str
    pids: list[int]
    moment: str
    at: float
    task: dict | None = None  # the task instance the moment was about, if any
    unanswered: list[str] = field(default_factory=list)  # records stored, never answered (check.record_key)


def _kill_program(
    ctx: Context, name: str, moment: str, task: dict | None = None, held: Callable[[], bool] | None = None
) -> Kill:
    """Killed, and what was running then. A moment that passes by itself is killed first and described
    after (Airflow still shows a killed task running until it misses its heartbeats). One the chaos run
    holds open (``held`` says whether it still holds) is described first, while the services it needs
    still answer, however slowly, and killed only if it still holds."""
    component = COMPONENTS[name]
    (pid,) = components.pids_of(component, ctx.supervisor(), ctx.deployment)
    # what runs is read through the API server, which needs its database: described before it goes
    said = ctx.now(HELD_DESCRIBED_WITHIN) if held else ctx.now() if name in ("airflow-api-server", "postgres") else ""
    if held and not held():
        raise RuntimeError(f"{moment}: the moment ended while it was described ({said})")
    components.kill(component, pid)
    at = time.time()
    return Kill(name, [pid], f"{moment} [{said or ctx.now()}]", at, task)


def _running_now(ctx: Context, dag: str, task: str, after: float = 0.0) -> dict | None:
    """The try of the task running now, once it has run at least ``after`` seconds (else None)."""
    from datetime import datetime

    for t in ctx.running_tasks():
        if (t["dag_id"], t["task_id"]) == (dag, task) and t.get("pid"):
            started = t.get("start_date")
            if not started or after <= 0:
                return t
            if (datetime.now().astimezone() - datetime.fromisoformat(started)).total_seconds() >= after:
                return t
    return None


def _running(ctx: Context, dag: str, task: str, after: float = 0.0) -> dict:
    """A try of the task that has run at least ``after`` seconds."""
    return ctx.wait(lambda: _running_now(ctx, dag, task, after))


# ---- generic ------------------------------------------------------------------------------------------


def during(ctx: Context, component: Component, dag: str, task: str, delay: float) -> Kill:
    """``component`` killed once a try of ``dag.task`` has run ``delay`` seconds."""
    if component.kind == "task process":
        pick = components.spark_drivers if component.name == "spark-driver" else components.flow_steps

        def found():
            # the try running now: an earlier fault of the step may have ended the try first seen, and
            # its process then lives under the next try
            running = _running_now(ctx, dag, task, delay)
            victims = running and [p for p in pick(ctx.deployment) if _descends(p, running["pid"])]
            return victims and (running, victims)

        # as long as a named moment of the same step may hold the task back (in a CI-style run, "Redis
        # while a task is queued" kept the backtest's task from running past 600 s)
        running, processes = ctx.wait(found, 1800)
        victim = processes[0]
        what = f"flow step {_step_name(victim)}" if component.name == "metaflow-step" else "a Spark driver"
        if not components.kill(component, victim.pid):
            raise RuntimeError(f"{what} {victim.pid} had exited before the kill: nothing was killed")
        at = time.time()
        moment = f"during {dag}.{task} try {running['try_number']}, {delay:.0f} s in"
        return Kill(component.name, [victim.pid], f"{moment}; {what} [{ctx.now()}]", at, running)
    running = _running(ctx, dag, task, delay)
    moment = f"during {dag}.{task} try {running['try_number']}, {delay:.0f} s in"
    if component.kind == "program":
        name = component.name
        if name in components.WORKERS:  # the worker that runs the task
            name = ctx.worker_running(running)
        return _kill_program(ctx, name, moment, running)
    raise ValueError(component.name)


# ---- named --------------------------------------------------------------------------------------------


def after_commit(ctx: Context, dag: str, task: str, table: str, moment: str) -> Kill:
    """The worker running ``dag.task``, with its process group, once the task's commit to ``table`` landed
    in the catalog and before the task could say so. Held open: a trigger holds the catalog's UPDATE of
    ``table``; while it waits, the task's process is frozen (SIGSTOP), so nothing it would do after the
    commit happens; the UPDATE lands, and the worker is killed with the frozen task. A commit that does
    not land (an earlier fault of the step took PostgreSQL) lets the task go and waits for the next."""
    hold = f"chaos_hold_{table}"
    _hold(ctx, "lakehouse", "iceberg_tables", f"NEW.table_name = '{table}'", hold)
    try:
        while True:
            ctx.wait(lambda: _held(ctx, "lakehouse", hold), step=0.05)
            try:  # the try whose commit is held; asked again while another fault of the step has PostgreSQL
                # down and the API answers 500 meanwhile (tests/test_team_profile.py's run met that once)
                running = ctx.wait(lambda: _running_now(ctx, dag, task), 15, 0.1)
                (before,) = ctx.wait(lambda: (ctx.metadata_location(table),), 15, 0.1)
            except TimeoutError:
                if ctx.stop.is_set():
                    raise
                continue
            try:
                components.freeze(running["pid"])
            except (ProcessLookupError, TypeError):
                continue
            try:
                still_held = _held(ctx, "lakehouse", hold)
            except Exception:  # PostgreSQL down: its UPDATE is not landing either
                still_held = False
            if not still_held:  # the API answered late and the commit went by: the next one
                with contextlib.suppress(ProcessLookupError):
                    os.kill(running["pid"], signal.SIGCONT)
                continue
            try:
                ctx.wait(lambda before=before: ctx.metadata_location(table) != before, 30, 0.05)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(running["pid"], signal.SIGCONT)
                if ctx.stop.is_set():
                    raise
                continue
            worker = ctx.worker_running(running)
            said = f"{moment}: {dag}.{task} try {running['try_number']} committed {table}"
            return _kill_program(ctx, worker, said, running)
    finally:
        threading.Thread(target=_drop_hold, args=(ctx, "lakehouse", "iceberg_tables", hold), daemon=True).start()


def _hold(ctx: Context, database: str, table: str, when: str, name: str, seconds: float = 5) -> None:
    """A trigger ``name`` that holds each UPDATE of ``table`` matching ``when`` for ``seconds`` before it
    is made: a moment made to last, so the kill lands inside it every time. While it holds, the backend
    shows ``name`` as its application name (``_held``). Installed through ``ctx.wait``: the database may
    be coming back from an earlier fault of the same step."""

    def installed() -> bool:
        db = team.Postgres(ctx.settings).connect(database)
        db.autocommit = True
        try:
            with db.cursor() as cursor:
                cursor.execute(
                    f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger AS $$ "
                    f"BEGIN PERFORM set_config('application_name', '{name}', true); PERFORM pg_sleep({seconds}); "
                    "RETURN NEW; END $$ LANGUAGE plpgsql"
                )
                cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
                cursor.execute(
                    f"CREATE TRIGGER {name} BEFORE UPDATE ON {table} FOR EACH ROW WHEN ({when}) "
                    f"EXECUTE FUNCTION {name}()"
                )
            return True
        finally:
            db.close()

    ctx.wait(installed, 600, 1)


def _held(ctx: Context, database: str, name: str) -> bool:
    """Whether trigger ``name`` holds an UPDATE now (its backend sleeps in it)."""
    return bool(held_by(ctx, database, name))


def held_by(ctx: Context, database: str, name: str) -> set[str]:
    """The addresses of the clients whose UPDATE trigger ``name`` holds now ("local" for a Unix socket's)."""
    probe = team.Postgres(ctx.settings).connect(database)
    try:
        with probe.cursor() as cursor:
            cursor.execute(
                "SELECT coalesce(host(client_addr), 'local') FROM pg_stat_activity WHERE datname = %s "
                "AND state = 'active' AND wait_event = 'PgSleep' AND application_name = %s",
                (database, name),
            )
            return {row[0] for row in cursor.fetchall()}
    finally:
        probe.close()


def _drop_hold(ctx: Context, database: str, table: str, name: str) -> None:
    def dropped():
        db = team.Postgres(ctx.settings).connect(database)
        db.autocommit = True
        with db.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        db.close()
        return True

    # not ctx.wait: a run that is stopping still takes its trigger off (one left holds every later commit)
    if components.wait_for(dropped, 600, 1) is None:
        raise RuntimeError(f"trigger {name} on {table} not dropped within 600 s")


def postgres_mid_commit(ctx: Context, table: str = YELLOW_TAXI_RAW.name) -> Kill:
    """PostgreSQL killed while a commit's UPDATE of ``table``'s catalog entry is in flight."""
    hold = "chaos_hold_mid_commit"
    # held longer than the description may take: the kill, not the hold, ends the UPDATE
    _hold(ctx, "lakehouse", "iceberg_tables", f"NEW.table_name = '{table}'", hold, seconds=2 * HELD_DESCRIBED_WITHIN)
    try:
        ctx.wait(lambda: _held(ctx, "lakehouse", hold), step=0.1)
        return _kill_program(
            ctx,
            "postgres",
            f"PostgreSQL mid-commit: the catalog's UPDATE of {table} in flight",
            held=lambda: _held(ctx, "lakehouse", hold),
        )
    finally:
        threading.Thread(target=_drop_hold, args=(ctx, "lakehouse", "iceberg_tables", hold), daemon=True).start()


def scheduler_between_queueing_and_recording(ctx: Context) -> Kill:
    """The scheduler frozen the instant a task's message reaches Redis (its MONITOR), then killed."""
    import redis

    client = redis.Redis.from_url(team.Redis(ctx.settings).url())
    (pid,) = components.pids_of(COMPONENTS["airflow-scheduler"], ctx.supervisor(), ctx.deployment)
    with client.monitor() as monitor:
        for command in monitor.listen():
            if ctx.stop.is_set():
                raise TimeoutError("the moment never came")
            words = command.get("command", "")
            if words.upper().startswith("LPUSH") and "unacked" not in words:
                os.kill(pid, signal.SIGSTOP)
                break
    said = f"scheduler between queueing and recording: a task's message just reached the broker [{ctx.now()}]"
    components.kill(COMPONENTS["airflow-scheduler"], pid)
    return Kill("airflow-scheduler", [pid], said, time.time())


def api_server_while_reporting_success(
    ctx: Context, dag: str = WEATHER.name, task: str = WEATHER.merge_upsert_staging_into_raw_weather.name
) -> Kill:
    """The API server killed while the task's report of its success is in flight: a trigger holds the
    UPDATE that would record ``success`` in Airflow's database, and the API server making it is killed
    then (its transaction never commits). The task's state, read at that instant, is still running."""
    hold = "chaos_hold_success"
    _hold(
        ctx,
        "airflow",
        "task_instance",
        f"NEW.dag_id = '{dag}' AND NEW.task_id = '{task}' AND NEW.state = 'success' "
        "AND OLD.state IS DISTINCT FROM 'success'",
        hold,
    )
    try:
        ctx.wait(lambda: _held(ctx, "airflow", hold), step=0.05)
        (pid,) = components.pids_of(COMPONENTS["airflow-api-server"], ctx.supervisor(), ctx.deployment)
        db = team.Postgres(ctx.settings).connect("airflow")
        try:
            with db.cursor() as cursor:
                cursor.execute(
                    "SELECT run_id, try_number, state FROM task_instance WHERE dag_id = %s AND task_id = %s "
                    "ORDER BY start_date DESC NULLS LAST LIMIT 1",
                    (dag, task),
                )
                run_id, try_number, state = cursor.fetchone()
        finally:
            db.close()
        components.kill(COMPONENTS["airflow-api-server"], pid)
    finally:
        threading.Thread(target=_drop_hold, args=(ctx, "airflow", "task_instance", hold), daemon=True).start()
    running = {"dag_id": dag, "task_id": task, "dag_run_id": run_id, "try_number": try_number}
    said = f"API server while {dag}.{task} try {try_number} reports success (its state then: {state})"
    return Kill("airflow-api-server", [pid], said, time.time(), running)


def redis_while_queued(ctx: Context) -> Kill:
    """Both workers frozen so the next task's message waits in Redis; Redis killed with it there."""
    import redis

    supervisor = ctx.supervisor()
    workers = [
        p for name in components.WORKERS for p in components.pids_of(COMPONENTS[name], supervisor, ctx.deployment)
    ]
    client = redis.Redis.from_url(team.Redis(ctx.settings).url())
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    try:
        _cut_from_broker(client, workers)
        ctx.wait(lambda: client.llen("default") > 0, 1800, 0.2)
        killed = _kill_program(
            ctx,
            "redis",
            "Redis while a task's message waits in it (both workers held)",
            held=lambda: client.llen("default") > 0,
        )
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    return killed


def _cut_from_broker(client, pids: list[int]) -> None:
    """Close the frozen workers' connections to Redis. A fetch (BRPOP) a worker had pending when it was
    frozen would still take the next message into the frozen process, so nothing would wait in Redis
    until Airflow re-queued the task after its queued timeout (a CI-style run waited over 600 s)."""
    import redis

    port = client.connection_pool.connection_kwargs["port"]
    addresses = set()
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            worker = psutil.Process(pid)
            for process in (worker, *worker.children(recursive=True)):
                with contextlib.suppress(psutil.Error):
                    addresses |= {
                        f"{c.laddr.ip}:{c.laddr.port}"
                        for c in process.net_connections("tcp")
                        if c.raddr and c.raddr.port == port
                    }
    for address in addresses:
        with contextlib.suppress(redis.ResponseError):  # already closed
            client.client_kill(address)
