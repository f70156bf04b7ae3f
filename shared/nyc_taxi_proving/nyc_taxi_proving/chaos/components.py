"""The parts of the team deployment a chaos run kills, how each is found in the process table, what a
kill of it takes with it, and when it counts as back.

- supervisord's programs: PostgreSQL (its postmaster: the backends end on their own when it is gone),
  Redis, the four SeaweedFS processes, the Spark master, and — each with its process group, as a
  machine that goes away takes its children — the Spark worker (with its executors), Airflow's API
  server, scheduler, DAG processor, triggerer and each Celery worker (with the task it runs);
- inside a task: its Spark driver (the JVM a task or a flow step started) and a step process of the
  flow under the training task;
- the lineage server the deployment delivers to, which the chaos run itself runs and brings back.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import psutil

from nyc_taxi.core.processes import alive
from nyc_taxi_proving.deployment.supervisor import MARKER, Supervisor

WORKERS = ("airflow-worker-1", "airflow-worker-2")


@dataclass(frozen=True)
class Component:
    name: str
    kind: str  # "program" | "task process" | "lineage server"
    scope: str = "process"  # "process": the one process; "group": its process group


PROGRAMS = (
    Component("postgres", "program"),
    Component("redis", "program"),
    Component("seaweedfs-master", "program"),
    Component("seaweedfs-volume", "program"),
    Component("seaweedfs-filer", "program"),
    Component("seaweedfs-s3", "program"),
    Component("spark-master", "program"),
    Component("spark-worker", "program", "group"),
    Component("airflow-api-server", "program", "group"),
    Component("airflow-scheduler", "program", "group"),
    Component("airflow-dag-processor", "program", "group"),
    Component("airflow-triggerer", "program", "group"),
    *(Component(worker, "program", "group") for worker in WORKERS),
)
TASK_PROCESSES = (
    Component("spark-driver", "task process"),
    Component("metaflow-step", "task process"),
)
LINEAGE_SERVER = Component("lineage-server", "lineage server")
COMPONENTS = {c.name: c for c in (*PROGRAMS, *TASK_PROCESSES, LINEAGE_SERVER)}


def _mine(process: psutil.Process, deployment: str) -> bool:
    try:
        return process.environ().get(MARKER) == deployment
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def spark_drivers(deployment: str) -> list[psutil.Process]:
    """The Spark driver JVMs tasks and flow steps run now (spark-submit's pyspark-shell)."""
    return [p for p in psutil.process_iter() if "pyspark-shell" in _cmdline(p) and _mine(p, deployment)]


def flow_steps(deployment: str) -> list[psutil.Process]:
    """The flow's step processes running now (Metaflow starts each task as `<flow file> … step <name>`)."""
    return [
        p
        for p in psutil.process_iter()
        if " step " in _cmdline(p) and "train_model_flow.py" in _cmdline(p) and _mine(p, deployment)
    ]


def pids_of(component: Component, supervisor: Supervisor, deployment: str) -> list[int]:
    """The processes a kill of the component ends now (empty: it is not running)."""
    if component.kind == "program":
        info = {p["name"]: p for p in supervisor.programs()}.get(component.name)
        return [info["pid"]] if info and info["pid"] else []
    if component.name == "spark-driver":
        return [p.pid for p in spark_drivers(deployment)]
    if component.name == "metaflow-step":
        return [p.pid for p in flow_steps(deployment)]
    return []


def kill(component: Component, pid: int) -> bool:
    """SIGKILL: to the process, or to its process group. False: it had exited already (nothing was killed;
    an exited process nobody reaped yet, a zombie, takes the signal without being killed by it)."""
    if not alive(pid):
        return False
    try:
        if component.scope == "group":
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def freeze(pid: int) -> None:
    """SIGSTOP: the process stands still at the moment it is in, until it is killed."""
    os.kill(pid, signal.SIGSTOP)


def back_again(component: Component, supervisor: Supervisor, old_pid: int) -> bool:
    """supervisord runs the program again: RUNNING, with another pid."""
    info = {p["name"]: p for p in supervisor.programs()}.get(component.name)
    return bool(info) and info["statename"] == "RUNNING" and info["pid"] not in (0, old_pid)


def wait_for(ready, seconds: float, step: float = 0.5):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            answer = ready()
        except Exception:  # a service on its way back: not yet
            answer = None
        if answer:
            return answer
        time.sleep(step)
    return None


def exited_by_sigkill(settings, program: str, pid: int, after: float) -> str | None:
    """supervisord's account of a kill: its process-states log saw ``pid`` of ``program`` exit, and its own
    log says the program was terminated by SIGKILL, both since ``after`` (a few seconds' slack for clocks
    read apart). None while it has not."""
    import datetime as dt

    from nyc_taxi_proving.deployment import process_states
    from nyc_taxi_proving.deployment.supervisor import logs_dir

    exits = [
        change
        for change in process_states.read(logs_dir(settings) / "process-states.jsonl")
        if change["process"] == program
        and change["to"] == "EXITED"
        and change.get("pid") == pid
        and change["time"] >= after - 5
    ]
    log = logs_dir(settings) / "supervisord.log"
    killed, running = [], None  # supervisord's exit lines name no pid: the one it last spawned is the one
    for line in log.read_text(errors="replace").splitlines() if log.is_file() else []:
        if f"spawned: '{program}' with pid " in line:
            running = int(line.rsplit(" ", 1)[-1])
        elif f"exited: {program} (terminated by SIGKILL" in line and running == pid:
            at = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if at >= after - 5:
                killed.append(line[:23])
    if exits and killed:
        return f"supervisord: {program} pid {pid} exited, terminated by SIGKILL ({killed[0]})"
    return None
