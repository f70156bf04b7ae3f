"""The chaos run across hosts: its faults by name, the plan a seed chooses (which fault, when, on which host,
for how long), and the hosts as the run reaches them."""

from __future__ import annotations

import random
import socket
import threading
import time
from dataclasses import dataclass

from nyc_taxi.core import jobs, team
from nyc_taxi.core.processes import read_record
from nyc_taxi.core.settings import Settings
from nyc_taxi_proving.chaos import mission, moments
from nyc_taxi_proving.chaos.run import Fault
from nyc_taxi_proving.deployment import across_hosts, services
from nyc_taxi_proving.deployment.across_hosts import CONTROL, host_settings
from nyc_taxi_proving.deployment.hosts import Network, layout
from nyc_taxi_proving.deployment.supervisor import Supervisor

TAXI, TRAINING = jobs.INGEST_YELLOW_TAXI_DATA, jobs.TRAIN_FORECAST_MODEL
MERGE = f"{TAXI.name}.{TAXI.merge_upsert_staging_into_raw_yellow.name}"
FLOW = f"{TRAINING.name}.{TRAINING.run_training_flow.name}"
LOST_MID_MERGE = "worker host lost mid-merge"
CUT_AT_COMMIT = "worker host cut off from control during a commit"
SCHEDULER_FROM_POSTGRES = "scheduler cut off from PostgreSQL"
LOSS = "20 % loss on a worker host's link"
LATENCY = "latency on a worker host's link"
RECEIVER_CUT_OFF = "lineage receiver cut off from the worker hosts"
LOST_IN_FLOW = "worker host lost while the training flow runs"
PROBE_SECONDS = 2.0
HOST_DOWN = 20  # seconds a lost host stays down, its cable out, before it is started again


@dataclass
class HostFault(Fault):
    held: float = 0.0  # a latency's seconds each packet is held, each way (``delay`` is how far into a task)
    at: float = 0.0  # when it happened (time.time())
    lasts: float = 0.0  # seconds a partition or a loss lasts (a host lost: until it is started again)
    ended: float = 0.0  # when it ended: the kill, the cable back, the rules taken off


def plan(seed: int) -> list[HostFault]:
    """The faults, from the seed: the two merge faults each in a month of its own, the others in a month
    drawn; how far into its task, how long a cut or a loss lasts, and which worker's link loses."""
    rng = random.Random(seed)
    months = [s.name for s in mission.STEPS if s.name.startswith("month")]
    lost, cut = rng.sample(months, 2)
    workers = [h.name for h in layout().hosts if h.name != CONTROL]
    faults = [
        HostFault(0, 1, lost, "worker host", LOST_MID_MERGE, MERGE, round(rng.uniform(2, 8), 1)),
        HostFault(0, 1, cut, "worker host", CUT_AT_COMMIT, MERGE, lasts=round(rng.uniform(15, 30))),
        HostFault(
            0, 1, rng.choice(months), "airflow-scheduler", SCHEDULER_FROM_POSTGRES, lasts=round(rng.uniform(30, 45))
        ),
        HostFault(0, 1, rng.choice(months), rng.choice(workers), LOSS, lasts=round(rng.uniform(60, 120))),
        HostFault(0, 1, rng.choice(months), "lineage-receiver", RECEIVER_CUT_OFF, lasts=round(rng.uniform(45, 90))),
        HostFault(0, 1, "backtest", "worker host", LOST_IN_FLOW, FLOW, round(rng.uniform(5, 20), 1)),
    ]
    # drawn last, so a seed's other faults draw as they did; in the month no host is lost in (a lost host's
    # processes die with it, the delayer among them: its latency would end unseen), on a link the 20 % loss is
    # not on at the same time (the handshake that proves the latency would lose a packet to it)
    held, lasts, slow = round(rng.uniform(0.05, 0.15), 3), round(rng.uniform(60, 120)), rng.choice(workers)
    loss = next(f for f in faults if f.moment == LOSS)
    if loss.step == cut and loss.component == slow:
        slow = next(w for w in workers if w != slow)
    faults.append(HostFault(0, 1, cut, slow, LATENCY, held=held, lasts=lasts))
    order = [s.name for s in mission.STEPS]
    faults.sort(key=lambda f: order.index(f.step))
    for number, fault in enumerate(faults, 1):
        fault.number = number
    return faults


class Hosts:
    """What the faults look at and act on: the network of hosts, each host's settings, control's API and
    database (a moment's context), and the mission's progress."""

    def __init__(self, settings: Settings, progress: mission.Progress, stop: threading.Event):
        self.settings, self.network, self.progress, self.stop = settings, Network(settings), progress, stop
        self.control = host_settings(settings, self.network, CONTROL)
        self.ctx = moments.Context(self.control, None, stop)

    def own(self, host: str) -> Settings:
        return host_settings(self.settings, self.network, host)

    def record(self, host: str = CONTROL) -> dict:
        return read_record(team.services_record(self.own(host)))

    def address(self, host: str) -> str:
        return self.network.layout.host(host).address

    def workers(self) -> list[str]:
        return [h.name for h in self.network.layout.hosts if h.name != CONTROL]

    def host_running(self, task: dict) -> str:
        host = self.network.host_of(task["pid"])
        if host is None or host == CONTROL:
            raise LookupError(f"{task['dag_id']}.{task['task_id']} pid {task['pid']} runs on no worker host ({host})")
        return host

    def answers(self, host: str) -> bool:
        """Every program of the host runs under its supervisord and answers a request from control."""
        own = self.own(host)
        supervisor = Supervisor(own)
        if not supervisor.running():
            return False
        states = {p["name"]: p["statename"] for p in supervisor.programs()}
        names = across_hosts.processes(self.network.layout.host(host))
        return all(states.get(n) == "RUNNING" for n in names) and all(services.answering(own, n) for n in names)

    def handshake(self, host: str) -> float | None:
        """Seconds a TCP handshake from control to the host's task-log server takes (None: no answer)."""
        from nyc_taxi.airflow_adapter.environment import WORKER_LOG_SERVER_PORT

        start = time.monotonic()
        try:
            with socket.create_connection((self.address(host), WORKER_LOG_SERVER_PORT), timeout=PROBE_SECONDS):
                return time.monotonic() - start
        except OSError:
            return None

    def reachable(self, host: str) -> bool:
        """A TCP connection from control to the host's Celery task-log server (every worker host runs one)."""
        return self.handshake(host) is not None

    def step_started(self, fault: HostFault) -> None:
        """Until the fault's step runs a task (the step's work has begun)."""
        self.ctx.wait(lambda: self.progress.step == fault.step or fault.step in self.progress.passed, 7200, 0.5)
        self.ctx.wait(lambda: self.progress.step != fault.step or self.ctx.running_tasks(), 3600, 0.5)

    def running(self, target: str, seconds: float, also=lambda task: True) -> dict:
        dag, task = target.split(".", 1)
        return self.ctx.wait(lambda: (t := moments._running_now(self.ctx, dag, task, seconds)) and also(t) and t, 3600)

    def in_its_step(self, fault: HostFault) -> None:
        """A fault that happened in another step than planned (its moment came late) is an error: the
        plan, and what the report says of it, would not hold."""
        if self.progress.step != fault.step:
            raise RuntimeError(f"it happened in step {self.progress.step!r}, not in {fault.step!r}")
