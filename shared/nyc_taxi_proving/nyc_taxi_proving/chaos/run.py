"""A chaos run: the team deployment's mission once clean, then again under faults — each a SIGKILL of
one component at one moment, both chosen by the seed — and every faulty run's tables, files, lineage
and delivery compared with the clean run's.

Each run is a deployment of its own (a fresh state directory, `team up`, `create-infra`), its sources a
fixture server, its lineage delivered to a lineage server stand-in (OpenLineage events and DataHub
records). The faults of a run are spread over the mission's steps; each waits for its moment in a
thread of its own and measures how long its component takes to be back. Everything is printed and the
whole plan follows from the seed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nyc_taxi.core import datasets as d
from nyc_taxi.core import jobs
from nyc_taxi.core.processes import alive, free_port, listening
from nyc_taxi.core.settings import Settings
from nyc_taxi_proving.chaos import check, components, expected, lineage_moments, mission, moments
from nyc_taxi_proving.chaos.components import COMPONENTS, PROGRAMS, TASK_PROCESSES
from nyc_taxi_proving.chaos.readings import delivery_of, leftovers, received_lineage
from nyc_taxi_proving.deployment.services import answering
from nyc_taxi_proving.fixtures.lineage_server import LineageServer
from nyc_taxi_proving.fixtures.server import FixtureServer

RECOVERY_BOUND = 120  # seconds: a killed component runs and answers again within this, or the run fails
TASK_BOUND = 600  # seconds: the task a fault hit is done (a later try, a resumed flow) within this
STEPS = [s.name for s in mission.STEPS] + ["lineage replay"]
TAXI, WEATHER, TRAINING = jobs.INGEST_YELLOW_TAXI_DATA, jobs.INGEST_WEATHER_DATA, jobs.TRAIN_FORECAST_MODEL
# the tasks a generic fault may wait for, per step
TASKS = {
    "month": [
        (TAXI.name, TAXI.download_published_files.name),
        (TAXI.name, TAXI.stage_landed_files.name),
        (TAXI.name, TAXI.merge_upsert_staging_into_raw_yellow.name),
        (WEATHER.name, WEATHER.stage_landed_files.name),
        (WEATHER.name, WEATHER.merge_upsert_staging_into_raw_weather.name),
        (TRAINING.name, TRAINING.run_training_flow.name),
    ],
    "backtest": [(TRAINING.name, TRAINING.run_training_flow.name)],
}
SPARK_TASKS = {  # the tasks that run a Spark driver
    TAXI.stage_landed_files.name,
    TAXI.merge_upsert_staging_into_raw_yellow.name,
    TRAINING.run_training_flow.name,
}
SHIPPER = "lineage shipper after the server accepted"
# named moment -> (the steps it can happen in, the component it kills)
NAMED = {
    "worker after commit": ("month", "airflow-worker"),
    "staging load after writing": ("month", "airflow-worker"),
    "PostgreSQL mid-commit": ("month", "postgres"),
    "scheduler between queueing and recording": ("month", "airflow-scheduler"),
    "API server while a task reports success": ("month", "airflow-api-server"),
    "Redis while a task is queued": ("month", "redis"),
    # records flow while tasks and steps end (the last shipping may find nothing left to send)
    SHIPPER: ("month", "lineage shipper"),
    "lineage server down beyond every retry budget": ("month", "lineage-server"),
}


@dataclass
class Fault:
    number: int
    run: int
    step: str
    component: str
    moment: str  # a named moment, or "during"
    target: str = ""  # <dag>.<task> for a generic moment; the table whose commit PostgreSQL dies in (raw's)
    delay: float = 0.0
    # what happened
    killed: str = ""  # the component it killed (which Celery worker, for a worker)
    proven: str = ""  # how the kill is known to have happened (supervisord saw that pid exit by SIGKILL, …)
    at: str = ""
    pids: list[int] = field(default_factory=list)
    recovered_s: float | None = None  # the component back: running and answering
    task_done_s: float | None = None  # the task it hit done again (a later try), where it hit one
    task: dict | None = None  # that task instance, as the moment saw it
    unanswered: list[str] = field(default_factory=list)  # lineage records the shipper moment held (check.record_key)
    error: str = ""


def plan(faults: int, seed: int, per_run: int) -> list[Fault]:
    """The faults, from the seed: every named moment once (while they fit), the rest components and
    tasks drawn at random; spread over runs of ``per_run`` faults, at most one named moment per step."""
    rng = random.Random(seed)
    named = list(NAMED)
    rng.shuffle(named)
    named = named[: max(0, min(len(named), faults))]
    if faults <= 0:
        return []
    generic = faults - len(named)
    runs = max(1, -(-faults // per_run))
    slots = [(r, s) for r in range(1, runs + 1) for s in STEPS]
    chosen: list[Fault] = []
    taken: dict[tuple[int, str], int] = {}
    for name in named:
        where, component = NAMED[name]
        fitting = [(r, s) for r, s in slots if s.startswith(where)]
        free = [slot for slot in fitting if not taken.get(slot)] or fitting  # two in one step when they must
        free = [slot for slot in free if sum(f.run == slot[0] for f in chosen) < per_run] or free
        run, step = rng.choice(free)
        taken[(run, step)] = 1
        chosen.append(Fault(0, run, step, component, name))
    kinds = [c for c in (*PROGRAMS, *TASK_PROCESSES) if c.name not in ("airflow-worker-2",)]
    for _ in range(generic):
        run = min(range(1, runs + 1), key=lambda r: (sum(f.run == r for f in chosen), rng.random()))
        component = rng.choice(kinds)
        steps = [s for s in STEPS if s != "lineage replay"]
        step = rng.choice(steps)
        tasks = TASKS["backtest" if step == "backtest" else "month"]
        if component.name == "spark-driver":
            tasks = [t for t in tasks if t[1] in SPARK_TASKS]
        if component.name == "metaflow-step":
            tasks = [t for t in tasks if t[0] == TRAINING.name]
        dag, task = rng.choice(tasks)
        name = component.name.replace("airflow-worker-1", "airflow-worker")
        chosen.append(Fault(0, run, step, name, "during", f"{dag}.{task}", round(rng.uniform(1, 8), 1)))
    chosen.sort(key=lambda f: (f.run, STEPS.index(f.step), f.moment != "during"))
    for number, fault in enumerate(chosen, 1):
        fault.number = number
    return chosen


def _environment(state: Path, port: int, server: LineageServer, site_url: str, retries: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OPENLINEAGE", "DATAHUB"))}
    return env | {
        "PROFILE": "team",
        "STATE_DIR": str(state),
        "AIRFLOW_PORT": str(port),
        "SPARK_SERVER": "false",
        "TLC_BASE_URL": site_url,
        "NOAA_BASE_URL": site_url,
        "OPENLINEAGE_URL": server.url,
        "DATAHUB_GMS_URL": server.url,
        "TASK_RETRIES": str(retries),  # the deployment's recovery settings are its own (team up ships them)
        "DATAHUB_TELEMETRY_ENABLED": "false",
    }


def _cli(env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], env=env, capture_output=True, text=True, timeout=timeout)


@dataclass
class Result:
    run: int
    faults: list[Fault]
    tables: dict
    unexpected: dict[str, str]  # what differs from the published files' independent reading
    unreadable: list[str]
    edges: set
    columns: set
    delivery: dict
    leftovers: list[str]
    runs: list[dict]
    seconds: float
    triggered: list[tuple[str, dict]] = field(default_factory=list)  # the DAG runs the mission triggered
    merges: int = 0  # its taxi merges: one training each
    weather_adjusted: bool = False  # whether it ran the weather-adjusted model (what its lineage reads)
    database: str = ""  # the catalog database its tables are in (their lineage names it)

    def problems(self) -> list[str]:
        """What is wrong with this run on its own, whatever another run did."""
        said = [f"{name} holds no rows" for name, table in self.tables.items() if not table["rows"]]
        said += [f"{name}: {len(t['doubled'])} keys twice" for name, t in self.tables.items() if t["doubled"]]
        said += [f"{name}: {why}" for name, why in self.unexpected.items()]
        said += [f"unreadable: {path}" for path in self.unreadable[:5]]
        if not self.edges:
            said.append("the lineage server received no lineage of a successful run")
        if not self.delivery["once"]:
            said.append(f"lineage not delivered once: {self.delivery}")
        said += [f"left: {what}" for what in self.leftovers[:5]]
        said += [f"{r['dag_id']} {r['run_id']} {r['state']}" for r in self.runs if r["state"] != "success"]
        said += check.runs_as_triggered(self.runs, self.triggered, self.merges, TRAINING.name)
        if self.edges and check.edge_names(self.edges, self.database) != expected.mission_edges(self.weather_adjusted):
            wanted, got = expected.mission_edges(self.weather_adjusted), check.edge_names(self.edges, self.database)
            said.append(f"lineage: missing {sorted(wanted - got)[:5]}, not written out {sorted(got - wanted)[:5]}")
        return said


def mission_run(
    number: int, faults: list[Fault], work: Path, site_url: str, retries: int, wanted: expected.Expected, say
) -> Result:
    """One run of the mission on a deployment of its own, with its faults."""
    state = work / f"run-{number}" / "state"
    state.mkdir(parents=True, exist_ok=True)
    server = LineageServer(work / f"run-{number}" / "lineage-server.jsonl").start("ok")
    port = free_port()
    env = _environment(state, port, server, site_url, retries)
    settings = Settings(_env_file=None, profile="team", state_dir=state, airflow_port=port, task_retries=retries)
    started = time.monotonic()
    try:
        _cli(env, "nyc_taxi_proving.cli.team", "down", "--delete-data")
        for command in (("nyc_taxi_proving.cli.team", "up"), ("nyc_taxi.cli.infra", "create")):
            done = _cli(env, *command)
            if done.returncode:
                raise RuntimeError(f"{' '.join(command)}: {done.stdout[-1500:]}{done.stderr[-1500:]}")
        runs = with_faults(settings, env, server, faults, say)
        unanswered = [key for f in faults for key in f.unanswered]
        return Result(
            number,
            faults,
            check.tables(state),
            check.unexpected(state, wanted),
            check.unreadable_files(state),
            *received_lineage(server, state),
            delivery_of(settings, server, unanswered),
            leftovers(settings, env),
            runs,
            time.monotonic() - started,
            triggered=[(dag, conf) for step in mission.STEPS for dag, conf in step.runs],
            merges=len(mission.MONTHS),
            weather_adjusted=True,
            database=settings.database,
        )
    finally:
        if os.environ.get("CHAOS_KEEP") != "1":
            _cli(env, "nyc_taxi_proving.cli.team", "down", "--delete-data")
        server.stop()


def with_faults(
    settings: Settings,
    env: dict[str, str],
    server: LineageServer,
    faults: list[Fault],
    say,
    months=mission.MONTHS,
    steps: tuple[mission.Step, ...] | None = None,
) -> list[dict]:
    """The mission on a running deployment (its last step: the last shipping, what a lost task never shipped
    goes then, in order) while each fault waits for its moment in a thread of its own (``steps``: others than
    the months' own). The mission's DAG runs."""
    progress = mission.Progress()
    stop = threading.Event()
    context = moments.Context(settings, server, stop)
    threads = [threading.Thread(target=_inject, args=(context, f, progress, say), daemon=True) for f in faults]
    for thread in threads:
        thread.start()
    try:
        return mission.run(settings, env, progress, months=months, these=steps)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=TASK_BOUND)


def _inject(ctx: moments.Context, fault: Fault, progress: mission.Progress, say) -> None:
    """Wait for the fault's step, then its moment; kill; measure the time until its component is back."""
    try:
        ctx.wait(lambda: progress.step == fault.step or fault.step in progress.passed, 7200, 0.5)
        killed = _kill(ctx, fault)
        fault.killed, fault.at, fault.pids, fault.task = killed.component, killed.moment, killed.pids, killed.task
        fault.unanswered = killed.unanswered
        if not killed.pids:  # a moment met with nothing to kill proves nothing survived
            raise RuntimeError(f"killed nothing: {killed.moment}")
        say(f"  fault {fault.number}: killed {killed.component} {killed.pids} — {killed.moment}")
        fault.proven = _proven(ctx, killed)
        say(f"  fault {fault.number}: {fault.proven}")
        fault.recovered_s = _recovered(ctx, fault, killed)
        say(f"  fault {fault.number}: {killed.component} back after {fault.recovered_s:.1f} s")
        if killed.task is not None:
            if components.wait_for(lambda: _task_done(ctx, killed.task), TASK_BOUND, 1) is None:
                raise RuntimeError(f"{killed.task['dag_id']}.{killed.task['task_id']} not done within {TASK_BOUND} s")
            fault.task_done_s = time.time() - killed.at
            say(
                f"  fault {fault.number}: {killed.task['dag_id']}.{killed.task['task_id']} done after {fault.task_done_s:.1f} s"
            )
    except TimeoutError:
        fault.error = f"its moment did not come in step {fault.step}"
        say(f"  fault {fault.number}: {fault.error}")
    except Exception as error:  # the run goes on; the fault is reported as not carried out
        fault.error = f"{type(error).__name__}: {error}"
        say(f"  fault {fault.number}: {fault.error}")


def _kill(ctx: moments.Context, fault: Fault) -> moments.Kill:
    name = fault.moment
    if name == "during":
        dag, task = fault.target.split(".", 1)
        component = COMPONENTS.get(fault.component) or COMPONENTS["airflow-worker-1"]
        return moments.during(ctx, component, dag, task, fault.delay)
    if name == "worker after commit":
        merge = TAXI.merge_upsert_staging_into_raw_yellow
        return moments.after_commit(ctx, TAXI.name, merge.name, d.YELLOW_TAXI_RAW.name, name)
    if name == "staging load after writing":
        return moments.after_commit(ctx, TAXI.name, TAXI.stage_landed_files.name, d.YELLOW_TAXI_STAGING.name, name)
    if name == "PostgreSQL mid-commit":
        return moments.postgres_mid_commit(ctx, fault.target or d.YELLOW_TAXI_RAW.name)
    if name == "scheduler between queueing and recording":
        return moments.scheduler_between_queueing_and_recording(ctx)
    if name == "API server while a task reports success":
        return moments.api_server_while_reporting_success(ctx)
    if name == "Redis while a task is queued":
        return moments.redis_while_queued(ctx)
    if name == "lineage shipper after the server accepted":
        return lineage_moments.shipper_after_accept(ctx)
    if name == "lineage server down beyond every retry budget":
        return lineage_moments.server_down(ctx)
    raise ValueError(name)


def _proven(ctx: moments.Context, killed: moments.Kill, seconds: float = 15) -> str:
    """How the kill is known to have landed on a running process: a program's pid seen exiting by supervisord
    (its process-states log) and terminated by SIGKILL (its own log); the lineage server's process, our
    child, exited by SIGKILL; a task's process, found running just before the kill, gone right after. A
    victim that had already exited proves nothing: RuntimeError."""

    component = COMPONENTS.get(killed.component)
    if component is not None and component.kind == "program":
        seen = components.wait_for(
            lambda: components.exited_by_sigkill(ctx.settings, killed.component, killed.pids[0], killed.at),
            seconds,
            0.5,
        )
        if not seen:
            raise RuntimeError(f"supervisord did not see {killed.component} pid {killed.pids[0]} exit by SIGKILL")
        return seen
    if killed.component == "lineage-server":
        code = ctx.server.process.returncode if ctx.server.process is not None else None
        if code != -9:
            raise RuntimeError(f"the lineage server's process exited with {code}, not by SIGKILL")
        return f"the lineage server's process {killed.pids[0]} exited by SIGKILL"

    if not components.wait_for(lambda: not any(map(alive, killed.pids)), seconds, 0.2):
        raise RuntimeError(f"{killed.component} {killed.pids} still running after the kill")
    return f"{killed.component} {', '.join(map(str, killed.pids))}: running when killed, gone after"


def _recovered(ctx: moments.Context, fault: Fault, killed: moments.Kill) -> float:
    """Seconds from the kill until the component is back: a program running again under supervisord
    and answering a request (``services.answering``, what `team up` waits for); a task's own process (its Spark driver, a flow step) when the task runs again (a later
    try); the lineage server answering again."""
    component = COMPONENTS.get(killed.component)

    def back() -> bool:
        if component is not None and component.kind == "program":
            return components.back_again(component, ctx.supervisor(), killed.pids[0]) and answering(
                ctx.settings, component.name
            )
        if killed.task is not None:  # a task's own process: back when its task runs again (its done is bounded apart)
            return _task_again(ctx, killed.task)
        if killed.component == "lineage-server":
            return ctx.server.process is not None and ctx.server.process.poll() is None and listening(ctx.server.port)
        if killed.component == "lineage shipper":  # a later shipping reached the server
            return any(r["received"] > killed.at for r in ctx.server.requests())
        raise ValueError(f"no way to tell when {killed.component} is back")

    found = components.wait_for(back, RECOVERY_BOUND, 0.5)
    spent = time.time() - killed.at
    if not found:
        raise RuntimeError(f"{killed.component} not back within {RECOVERY_BOUND} s")
    return spent


def _task_instance(ctx: moments.Context, task: dict) -> dict:
    from urllib.parse import quote

    path = f"/api/v2/dags/{task['dag_id']}/dagRuns/{quote(task['dag_run_id'], safe='')}/taskInstances/{task['task_id']}"
    return ctx.api().call(path, timeout=5)


def _task_done(ctx: moments.Context, task: dict) -> bool:
    return _task_instance(ctx, task)["state"] == "success"


def _task_again(ctx: moments.Context, task: dict) -> bool:
    """The task a fault hit runs again: a later try running, or the task done."""
    now = _task_instance(ctx, task)
    return now["state"] == "success" or (now["state"] == "running" and now["try_number"] > task["try_number"])


def compare(clean: Result, faulty: Result) -> dict:
    differences = check.table_differences(clean.tables, faulty.tables)
    return {
        "tables equal": not differences,
        "table differences": differences,
        "tables as published": not faulty.unexpected,
        "unexpected": faulty.unexpected,
        "files readable": not faulty.unreadable,
        "unreadable": faulty.unreadable[:20],
        "lineage equal": clean.edges == faulty.edges and clean.columns == faulty.columns,
        "edges only in the clean run": sorted(map(list, clean.edges - faulty.edges))[:20],
        "edges only in the faulty run": sorted(map(list, faulty.edges - clean.edges))[:20],
        "columns differ": len(clean.columns ^ faulty.columns),
        "delivered once": faulty.delivery["once"],
        "delivery": faulty.delivery,
        "nothing left": not faulty.leftovers,
        "leftovers": faulty.leftovers,
        "runs failed": [r for r in faulty.runs if r["state"] != "success"],
        "runs equal": check.runs_by_kind(clean.runs) == check.runs_by_kind(faulty.runs),
        "runs as triggered": check.runs_as_triggered(faulty.runs, faulty.triggered, faulty.merges, TRAINING.name),
        "lineage as written out": check.edge_names(faulty.edges, faulty.database)
        == expected.mission_edges(faulty.weather_adjusted),
    }


def passed(report: dict) -> bool:
    """Every planned fault killed something at its moment and what it killed came back within its bound,
    and every faulty run equals the clean run and the published files. A run with no fault passes
    nothing: it proves nothing."""
    faults = [f for r in report["runs"] for f in r["faults"]]
    return (
        bool(faults)
        and all(
            r["tables equal"]
            and r["tables as published"]
            and r["files readable"]
            and r["lineage equal"]
            and r["delivered once"]
            and r["nothing left"]
            and not r["runs failed"]
            and r["runs equal"]
            and not r["runs as triggered"]
            and r["lineage as written out"]
            for r in report["runs"]
        )
        and all(
            f["pids"]
            and f["proven"]
            and f["recovered_s"] is not None
            and f["recovered_s"] <= RECOVERY_BOUND
            and not f["error"]
            for f in faults
        )
    )


def chaos(faults: int, seed: int, per_run: int, rows: int, retries: int, work: Path, say=print) -> dict:
    faults_planned = plan(faults, seed, per_run)
    if not faults_planned:
        raise ValueError(f"{faults} faults: a chaos run needs at least one fault (one with none compares nothing)")
    runs = len({f.run for f in faults_planned})
    say(f"chaos run: {faults} faults, seed {seed}, {runs} runs with faults after a clean run")
    for fault in faults_planned:
        what = fault.moment if fault.moment != "during" else f"during {fault.target}, {fault.delay} s in"
        say(f"  plan {fault.number:>2}: run {fault.run}, {fault.step}: kill {fault.component} — {what}")
    site = work / "site"
    files = mission.publish(site, rows)
    wanted = expected.expected(site, files, mission.MONTHS, mission.backtest_origin(mission.MONTHS))
    report = {"seed": seed, "faults": faults, "rows": rows, "retries": retries, "runs": []}
    started = time.monotonic()
    with FixtureServer(site) as url:
        say("clean run")
        clean = mission_run(0, [], work, url, retries, wanted, say)
        say(
            f"clean run: {clean.seconds:.0f} s; rows: " + ", ".join(f"{n} {t['rows']}" for n, t in clean.tables.items())
        )
        if problems := clean.problems():  # compared with a clean run that is wrong, a faulty one proves nothing
            raise RuntimeError("the clean run itself is not right: " + "; ".join(problems))
        for fault in _within_tasks(faults_planned, clean.runs):
            say(f"  plan {fault.number:>2}: {fault.target} ran shorter in the clean run: {fault.delay} s in")
        for number in sorted({f.run for f in faults_planned}):
            these = [f for f in faults_planned if f.run == number]
            say(f"run {number}: {len(these)} faults")
            faulty = mission_run(number, these, work, url, retries, wanted, say)
            compared = compare(clean, faulty)
            report["runs"].append(
                {"run": number, "seconds": round(faulty.seconds), **compared, "faults": [asdict(f) for f in these]}
            )
            say(
                f"run {number}: {faulty.seconds:.0f} s; "
                + ", ".join(f"{k} {v}" for k, v in compared.items() if isinstance(v, bool))
            )
    report["seconds"] = round(time.monotonic() - started)
    report["passed"] = passed(report)
    return report


def _within_tasks(faults: list[Fault], clean_runs: list[dict]) -> list[Fault]:
    """A generic fault's moment brought within its task: a drawn delay longer than half the task's
    shortest run in the clean run becomes that half (a task that ends first never meets the moment).
    Changes the faults in place and returns those it changed: the plan follows from the seed and the
    clean run."""
    shortest: dict[str, float] = {}
    for run in clean_runs:
        for task, seconds in run.get("durations", {}).items():
            key = f"{run['dag_id']}.{task}"
            shortest[key] = min(seconds, shortest.get(key, seconds))
    changed = []
    for fault in faults:
        if fault.moment == "during" and fault.target in shortest and fault.delay > shortest[fault.target] / 2:
            fault.delay = round(shortest[fault.target] / 2, 1)
            changed.append(fault)
    return changed


def table(report: dict) -> str:
    """The report as a table: a row per fault, then a row per run."""
    lines = [f"{'#':>3} {'component':<22} {'moment':<70} {'recovered':>9} {'tables':>7} {'lineage':>8}"]
    for run in report["runs"]:
        for f in run["faults"]:
            moment = (f["at"] or f["moment"])[:70]
            recovered = f"{f['recovered_s']:.0f} s" if f["recovered_s"] is not None else f["error"][:9] or "-"
            lines.append(
                f"{f['number']:>3} {f['component']:<22} {moment:<70} {recovered:>9} "
                f"{'equal' if run['tables equal'] else 'DIFFER':>7} {'equal' if run['lineage equal'] else 'DIFFER':>8}"
            )
    lines.append("")
    lines.append(check.LEFT_OUT)
    for run in report["runs"]:
        lines.append(
            f"run {run['run']}: {run['seconds']} s, tables {'equal' if run['tables equal'] else run['table differences']}"
            f" and {'as published' if run['tables as published'] else run['unexpected']}, "
            f"files {'readable' if run['files readable'] else run['unreadable'][:3]}, lineage "
            f"{'equal' if run['lineage equal'] else 'DIFFERS'}, delivery {'once' if run['delivered once'] else run['delivery']}, "
            f"left {'nothing' if run['nothing left'] else run['leftovers'][:5]}"
        )
    return "\n".join(lines)


def main(faults: int, seed: int, per_run: int, rows: int, retries: int, out: Path | None, keep: bool) -> int:
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="chaos-"))
    try:
        report = chaos(faults, seed, per_run, rows, retries, work, lambda text: print(text, flush=True))
        print()
        print(table(report))
        survived = sum(
            1
            for r in report["runs"]
            for f in r["faults"]
            if f["pids"] and f["recovered_s"] is not None and not f["error"]
        )
        print(
            f"\nfaults survived: {survived} of {faults}; wall {report['seconds']} s; {'PASSED' if report['passed'] else 'FAILED'}"
        )
        path = out or work / "chaos-report.json"
        path.write_text(json.dumps(report, indent=2, default=str))
        print(f"report: {path}")
        return 0 if report["passed"] else 1
    finally:
        if not keep:
            shutil.rmtree(work / "site", ignore_errors=True)
