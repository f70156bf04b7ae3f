"""`bash run chaos --hosts`: the chaos run's mission on the hosts layout (deployment/hosts.toml), under
faults of whole hosts and of the network between them, and its tables, files, lineage and delivery
checked against the published files' independent reading (not against a clean run: one run on the hosts
is what the layout takes the time for).

The faults, each at the moment it names and each proven to have happened:
- a worker host lost mid-merge: every process on the worker that runs raw's taxi merge SIGKILLed at once,
  a few seconds into the merge; the host then started again as `team up` starts it (its disk kept);
- a worker host cut off from control during a commit: the catalog's UPDATE of raw's entry held by a
  trigger, and the worker that runs it cut off at the switch (its cable pulled) while it waits;
- the scheduler cut off from PostgreSQL: its packets to PostgreSQL's port dropped (its process group
  moved into a cgroup of its own, matched by iptables, and its open connections by their ports);
- 20 % loss on one worker host's link (both ways), for a minute or two of a month's work;
- latency on one worker host's link: each packet held 50-150 ms each way, for a minute or two;
- the lineage receiver cut off from the worker hosts (their packets to its port dropped);
- a worker host lost while the training flow runs on it (a flow step running under the task).

A partition or a loss is proven by what it dropped (its rules' counters, or a probe refused while the
cable is out), a latency by what it held and a handshake from control that took twice the delay, a host lost by every one of its processes gone and none left in its namespace. Each is
survived when the programs it touched answer again, and the task it hit (where it hit one) succeeds.
The operator of the run (this process, once it runs in control's network) reaches every host as a
machine of the team's network would, and reads the machine's files.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from nyc_taxi.chaos import check, expected, mission, moments
from nyc_taxi.chaos.components import wait_for
from nyc_taxi.chaos.run import RECOVERY_BOUND, TASK_BOUND, Fault, _mission_events, _task_done, _task_instance
from nyc_taxi.core import datasets as d
from nyc_taxi.core import jobs, team
from nyc_taxi.core.processes import alive, free_port, read_record
from nyc_taxi.core.settings import Settings
from nyc_taxi.deployment import across_hosts, services
from nyc_taxi.deployment.across_hosts import CONTROL, host_settings
from nyc_taxi.deployment.hosts import CHECKOUT, Network, layout
from nyc_taxi.deployment.supervisor import Supervisor

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


# ---- the faults -------------------------------------------------------------------------------------------


def _lose_host(hosts: Hosts, fault: HostFault, task: dict, victims: list[int], moment: str) -> None:
    """The host that runs ``task`` lost as a machine that loses its power: its cable out first, every
    process SIGKILLed, the cable kept out HOST_DOWN seconds (no peer hears of the loss meanwhile), then
    back and the host started again as `team up` starts it. When the cable goes back, the host's kernel,
    which a real reboot would have replaced, answers the peers' retransmissions with resets: they learn
    of the loss then, not at a timeout of their own. Proven: ``victims`` (the task's processes, still
    running at the kill) among those killed, and nothing left in the host's namespace."""
    host = hosts.host_running(task)
    fault.component, fault.task = host, task
    hosts.network.cut(host)
    try:
        victims = [p for p in victims if alive(p)]  # one that ended on its own before the kill was not lost
        fault.pids = hosts.network.lose_host(host)
        fault.at = time.time()
        step = hosts.progress.step
        time.sleep(HOST_DOWN)
    finally:
        hosts.network.mend(host)
        fault.ended = time.time()
    left = [p for p in hosts.network.pids() if hosts.network.host_of(p) == host]
    missed = [p for p in victims if p not in fault.pids]
    if not victims or missed or left or any(map(alive, fault.pids)):
        raise RuntimeError(f"{host}: killed {fault.pids}, of the task's {victims} not {missed}, left {left}")
    fault.killed = f"{host}: {len(fault.pids)} processes"
    fault.proven = (
        f"{host}: all {len(fault.pids)} processes gone, the task's {len(victims)} among them, none left in "
        f"its namespace; its cable out {fault.ended - fault.at:.0f} s"
    )
    fault.target = f"{moment} ({task['dag_id']}.{task['task_id']} try {task['try_number']} on {host})"
    across_hosts.boot(hosts.settings, host)
    if step != fault.step:
        raise RuntimeError(f"it happened in step {step!r}, not in {fault.step!r}")


def _under(task: dict) -> list[int]:
    """The task's process and every process under it now."""
    with contextlib.suppress(psutil.Error):
        return [task["pid"], *(c.pid for c in psutil.Process(task["pid"]).children(recursive=True))]
    return []


def lost_mid_merge(hosts: Hosts, fault: HostFault) -> None:
    task = hosts.running(MERGE, fault.delay)
    _lose_host(hosts, fault, task, _under(task), f"{fault.delay:.0f} s into the merge")


def _flow_steps(task: dict) -> list[int]:
    """The flow's step processes running under the task (Metaflow runs each as `<flow file> … step <name>`)."""
    found = []
    for pid in _under(task):
        with contextlib.suppress(psutil.Error):
            if " step " in " ".join(psutil.Process(pid).cmdline()):
                found.append(pid)
    return found


def lost_in_flow(hosts: Hosts, fault: HostFault) -> None:
    task = hosts.running(FLOW, fault.delay, _flow_steps)
    steps = _flow_steps(task)
    _lose_host(
        hosts,
        fault,
        task,
        [task["pid"], *steps],
        f"{fault.delay:.0f} s into the flow, {len(steps)} flow step(s) running",
    )


def cut_at_commit(hosts: Hosts, fault: HostFault) -> None:
    """raw's catalog UPDATE held (8 s) by a trigger; the worker whose UPDATE it is (by its address) cut off
    while it waits, the hold seen still there after the cut; mended after ``lasts``."""
    hold, table = "chaos_hold_across_hosts", d.YELLOW_TAXI_RAW.name
    by_address = {h.address: h.name for h in hosts.network.layout.hosts}
    moments._hold(hosts.ctx, "lakehouse", "iceberg_tables", f"NEW.table_name = '{table}'", hold, seconds=8)
    host = None
    try:
        (address,) = hosts.ctx.wait(lambda: moments.held_by(hosts.ctx, "lakehouse", hold), 3600, 0.05)
        worker = by_address.get(address)
        if worker is None or worker == CONTROL:
            raise RuntimeError(f"raw's UPDATE is held for {address}, no worker host")
        if not hosts.reachable(worker):
            raise RuntimeError(f"{worker} did not answer control before its cable was pulled: the probe proves nothing")
        hosts.network.cut(worker)
        host, fault.at = worker, time.time()
        fault.component, fault.killed = host, f"{host}'s link"
        still = moments.held_by(hosts.ctx, "lakehouse", hold)
        refused = not hosts.reachable(host)
        fault.task = moments._running_now(hosts.ctx, *MERGE.split(".", 1))  # control's API: not cut off
        hosts.in_its_step(fault)
        hosts.stop.wait(max(0.0, fault.lasts - (time.time() - fault.at)))
    finally:
        if host is not None:
            hosts.network.mend(host)
            fault.ended = time.time()
        # after the cable is back: DROP TRIGGER waits behind the cut worker's open transaction, and every
        # other client of the catalog would wait behind the DROP
        moments._drop_hold(hosts.ctx, "lakehouse", "iceberg_tables", hold)
    if address not in still:
        raise RuntimeError(f"{host}'s UPDATE of {table} was no longer held when its cable was out")
    if not refused:
        raise RuntimeError(f"{host} still answered control with its cable out")
    if not fault.task or hosts.network.host_of(fault.task["pid"]) != host:
        raise RuntimeError(f"the merge running then ({fault.task}) is not {host}'s")
    fault.proven = (
        f"{host}'s UPDATE of {table} held when its link went down at the switch; control's probe of it "
        f"unanswered for {PROBE_SECONDS:.0f} s"
    )
    task = fault.task
    fault.target = (
        f"{table}'s catalog UPDATE held, {task['dag_id']}.{task['task_id']} try {task['try_number']} on {host}; "
        f"cut {fault.ended - fault.at:.0f} s"
    )


def scheduler_from_postgres(hosts: Hosts, fault: HostFault) -> None:
    """Control drops the scheduler's packets to PostgreSQL and PostgreSQL's to it: new connections by the
    scheduler's cgroup, the open ones by their ports. Another client on control still reaches
    PostgreSQL meanwhile: the partition is the scheduler's alone."""
    hosts.step_started(fault)
    port = hosts.record()["postgres"]["port"]
    supervisor = Supervisor(hosts.control)
    scheduler = {p["name"]: p["pid"] for p in supervisor.programs()}["airflow-scheduler"]
    group = [p.pid for p in psutil.process_iter() if _group_of(p.pid) == scheduler]
    tag, running = f"scheduler-postgres-{fault.number}", hosts.ctx.now()
    fault.pids, fault.component, fault.killed = group, "airflow-scheduler", f"scheduler {scheduler}↔PostgreSQL"
    with hosts.network.confine("scheduler", group) as path:
        ports = {c.laddr.port for pid in group for c in _connections(pid) if c.raddr and c.raddr.port == port}

        def place() -> None:
            rules = [["--dport", str(port), "-m", "cgroup", "--path", path]]
            rules += [r for local in ports for r in (["--sport", str(local), "--dport", str(port)],
                                                      ["--sport", str(port), "--dport", str(local)])]  # fmt: skip
            for rule in rules:
                hosts.network.block(CONTROL, "OUTPUT", ["-p", "tcp", *rule], tag)

        def at_its_end() -> dict:
            now = {p["name"]: p["pid"] for p in supervisor.programs()}["airflow-scheduler"]
            beat = services.latest_heartbeat(hosts.control, "airflow-scheduler")  # None: the API did not say
            return {
                "others": _postgres_answers(hosts),
                "same scheduler": now == scheduler,
                "heartbeat age": None if beat is None else round(time.time() - beat, 1),
                "beat after the cut": None if beat is None else round(beat - fault.at, 1),
            }

        before = services.latest_heartbeat(hosts.control, "airflow-scheduler")
        if before is None or time.time() - before >= services.HEARTBEAT_FRESH:  # a stalled one proves no cut
            raise RuntimeError(f"the scheduler's heartbeat was unread or stale before the partition: {before}")
        dropped, seen = _for_its_time(hosts, fault, tag, place, lambda: hosts.network.unblock(CONTROL, tag), at_its_end)
    if not dropped:
        raise RuntimeError("the scheduler sent PostgreSQL nothing while it was cut off: the partition proves nothing")
    if not seen["others"]:
        raise RuntimeError("another client on control did not reach PostgreSQL either: more than the scheduler was cut")
    if not seen["same scheduler"]:  # a new one is outside the cgroup
        raise RuntimeError(f"at the partition's end the scheduler was not the one cut off: {seen}")
    # fresh before, and at the end none since a heartbeat's interval (5 s) after the cut: the cut stopped it
    if (
        seen["heartbeat age"] is None
        or seen["heartbeat age"] < services.HEARTBEAT_FRESH
        or seen["beat after the cut"] > 5
    ):
        raise RuntimeError(
            f"at the partition's end the scheduler's heartbeat was unread, fresh or later than the cut: {seen}"
        )
    fault.proven = (
        f"{dropped} packets between the scheduler ({len(ports)} open connections) and PostgreSQL dropped; at "
        f"the end its latest heartbeat {seen['heartbeat age']:.0f} s old (by the API server), the same process, "
        "and another client on control answered by PostgreSQL"
    )
    fault.target = f"{fault.ended - fault.at:.0f} s, from the step's first task on [{running}]"


def _postgres_answers(hosts: Hosts) -> bool:
    try:
        db = team.Postgres(hosts.control).connect("airflow")
    except Exception:
        return False
    try:
        with db.cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone() == (1,)
    finally:
        db.close()


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _connections(pid: int) -> list:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).net_connections("tcp")
    return []


def loss(hosts: Hosts, fault: HostFault) -> None:
    hosts.step_started(fault)
    host = fault.component
    fault.killed = f"{host}'s link"
    dropped, _ = _for_its_time(  # ended with its step: a next month's latency on this link starts clean
        hosts,
        fault,
        hosts.network.loss_rules(host)[0],
        lambda: hosts.network.lose(host, 0.2),
        lambda: hosts.network.lose(host, 0),
        within_step=True,
    )
    if not dropped:
        raise RuntimeError(f"{host}'s link lost nothing in {fault.lasts:.0f} s: the loss proves nothing")
    fault.proven = f"{dropped} packets to and from {host} dropped"
    fault.target = f"{fault.ended - fault.at:.0f} s, from the step's first task on"


def latency(hosts: Hosts, fault: HostFault) -> None:
    """Each packet on the worker's link held ``fault.held`` seconds each way (``Network.delay``), for the
    fault's time or until its step ends; proven by the delayer's own count of the packets it held for the
    whole delay (it must still run when taken off), and by control's handshake with the host, which crosses
    the link twice: at least twice the delay once it is placed, and under a second (a SYN sent again, which
    waits a second, is no proof of latency). Measured at the step's start: the same month's cut, at the
    merge's commit, comes later."""
    hosts.step_started(fault)
    host, seconds = fault.component, fault.held
    fault.killed = f"{host}'s link"
    before, during, counts = hosts.handshake(host), [], []

    def place() -> None:
        hosts.network.delay(host, seconds)
        during.append(sorted(hosts.handshake(host) or 9.0 for _ in range(3))[1])  # the median of three

    def lift() -> None:
        counts.append(hosts.network.delay(host, 0))

    tag, table = hosts.network.delay_rules(host)
    _for_its_time(hosts, fault, tag, place, lift, within_step=True, table=table)
    if not counts or not counts[0] or not during or not 2 * seconds <= during[0] < 1.0:
        raise RuntimeError(f"{host}'s link: {counts} packets held, control's handshake {during} s: no latency shown")
    fault.proven = (
        f"{counts[0]} packets to and from {host} held {seconds * 1000:.0f} ms each (the delayer's count); "
        f"control's handshake with it {during[0] * 1000:.0f} ms ({(before or 0) * 1000:.0f} ms before)"
    )
    fault.target = f"{fault.ended - fault.at:.0f} s, {seconds * 1000:.0f} ms each way, from the step's first task on"


def receiver_cut_off(hosts: Hosts, fault: HostFault) -> None:
    from nyc_taxi.lineage.write import delivery

    hosts.step_started(fault)
    port = hosts.record()["lineage"]["port"]
    tag = f"receiver-{fault.number}"
    fault.killed = "the lineage receiver's port, from every worker host"

    def place() -> None:
        for worker in hosts.workers():
            hosts.network.block(CONTROL, "INPUT", ["-p", "tcp", "-s", hosts.address(worker), "--dport", str(port)], tag)

    dropped, _ = _for_its_time(hosts, fault, tag, place, lambda: hosts.network.unblock(CONTROL, tag))
    if not dropped:
        raise RuntimeError("no worker host tried to ship while the receiver was cut off: the cut proves nothing")
    fault.proven = f"{dropped} packets from the worker hosts to the receiver dropped"
    fault.target = f"{fault.ended - fault.at:.0f} s, from the step's first task on"
    fault.task = {"shipped": {w: _shipped(delivery, hosts.own(w)) for w in hosts.workers()}}


def _for_its_time(
    hosts: Hosts,
    fault: HostFault,
    tag: str,
    place,
    lift,
    meanwhile=None,
    within_step: bool = False,
    table: str = "filter",
) -> tuple[int, object]:
    """A partition, a loss or a latency (``place``: its rules, marked ``tag``) held for the fault's time,
    in its step, then taken off (``lift``) however it ends; the packets its rules matched (their counters,
    read before they go) and what ``meanwhile`` found at its end, while it still held; ``within_step``: taken
    off when its step ends, if that comes first."""
    try:
        place()
        fault.at = time.time()
        hosts.in_its_step(fault)
        while (left := fault.lasts - (time.time() - fault.at)) > 0 and not hosts.stop.is_set():
            if within_step and hosts.progress.step != fault.step:
                break
            hosts.stop.wait(min(left, 0.5))
        found = meanwhile() if meanwhile else None
        return hosts.network.counted(tag, table), found
    finally:
        try:
            lift()
        finally:  # a lift that fails (a delayer found dead) still ends the fault, at this time
            fault.ended = time.time()


def _shipped(delivery, own: Settings) -> dict[str, int]:
    return {f"{p.server} {p.file}": p.shipped for p in delivery.status(own)}


MOMENTS = {
    LOST_MID_MERGE: lost_mid_merge,
    CUT_AT_COMMIT: cut_at_commit,
    SCHEDULER_FROM_POSTGRES: scheduler_from_postgres,
    LOSS: loss,
    LATENCY: latency,
    RECEIVER_CUT_OFF: receiver_cut_off,
    LOST_IN_FLOW: lost_in_flow,
}


def _back(hosts: Hosts, fault: HostFault) -> bool:
    """The fault's part of the deployment answers again: every program of the host it took (a worker
    host, a link), the scheduler, or each worker's lineage shipped on to the receiver."""
    if fault.moment == SCHEDULER_FROM_POSTGRES:
        return services.answering(hosts.control, "airflow-scheduler")
    if fault.moment == RECEIVER_CUT_OFF:
        from nyc_taxi.lineage.write import delivery

        before = fault.task["shipped"]
        return all(
            all(
                p.shipped == p.total or p.shipped > before[w].get(f"{p.server} {p.file}", 0)
                for p in delivery.status(hosts.own(w))
            )
            for w in hosts.workers()
        )
    if fault.moment in (LOSS, LATENCY):  # its programs never stopped: its rules gone, the link carries at once
        rules = hosts.network.loss_rules if fault.moment == LOSS else hosts.network.delay_rules
        tag, table = rules(fault.component)
        return (
            hosts.network.placed(tag, table) == 0
            and hosts.answers(fault.component)
            and link_clean(lambda: hosts.handshake(fault.component))
        )
    return hosts.answers(fault.component)


CLEAN_HANDSHAKE_S = 0.08  # under the least latency's two crossings (2 × 50 ms); a SYN lost is sent again after 1 s
CLEAN_HANDSHAKES = 20  # under a 20 % loss on the link, one poll's twenty all answered at once: 0.8 ** 40, 1 in 7,500


def link_clean(handshake) -> bool:
    """A link without loss or latency: ``handshake()`` (a TCP handshake's seconds across it, None for no
    answer) CLEAN_HANDSHAKES times in a row, each under CLEAN_HANDSHAKE_S."""
    return all((took := handshake()) is not None and took < CLEAN_HANDSHAKE_S for _ in range(CLEAN_HANDSHAKES))


def inject(hosts: Hosts, fault: HostFault, say) -> None:
    """The fault at its moment; how long its part takes to answer again after it ended (within
    RECOVERY_BOUND of that end); the task it hit done (within TASK_BOUND of the fault) and by which try;
    for the flow's host, whether that try resumed the flow's run."""
    try:
        if fault.moment in (LOST_MID_MERGE, CUT_AT_COMMIT, LOST_IN_FLOW):
            hosts.ctx.wait(lambda: hosts.progress.step == fault.step or fault.step in hosts.progress.passed, 7200, 0.5)
        MOMENTS[fault.moment](hosts, fault)
    except TimeoutError:
        fault.error = f"its moment did not come in step {fault.step}"
        say(f"  fault {fault.number}: {fault.error}")
        return
    except Exception as error:  # the run goes on; the fault is reported as not carried out
        fault.error = f"{type(error).__name__}: {error}"
        say(f"  fault {fault.number}: {fault.error}")
        return
    try:
        say(f"  fault {fault.number}: {fault.moment}: {fault.killed} — {fault.target}")
        say(f"  fault {fault.number}: {fault.proven}")
        if wait_for(lambda: _back(hosts, fault), RECOVERY_BOUND - (time.time() - fault.ended), 1) is None:
            raise RuntimeError(f"{fault.killed} not back within {RECOVERY_BOUND} s of the fault's end")
        fault.recovered_s = time.time() - fault.ended
        say(f"  fault {fault.number}: back {fault.recovered_s:.1f} s after the fault ended")
        if fault.task and "task_id" in fault.task:
            if wait_for(lambda: _task_done(hosts.ctx, fault.task), TASK_BOUND - (time.time() - fault.at), 2) is None:
                raise RuntimeError(f"{fault.task['dag_id']}.{fault.task['task_id']} not done within {TASK_BOUND} s")
            fault.task_done_s = time.time() - fault.at
            done = _task_instance(hosts.ctx, fault.task)
            fault.task |= {"done_by_try": done["try_number"], "done_on": done["hostname"]}
            if fault.moment == LOST_IN_FLOW:
                fault.task["resumed"] = _resumed(hosts, fault.task, done["try_number"])
            say(
                f"  fault {fault.number}: {fault.task['dag_id']}.{fault.task['task_id']} done "
                f"{fault.task_done_s:.0f} s after, by try {done['try_number']} on {done['hostname']}"
                + (f"; it resumed {fault.task['resumed'] or 'no run'}" if fault.moment == LOST_IN_FLOW else "")
            )
    except Exception as error:
        fault.error = f"{type(error).__name__}: {error}"
        say(f"  fault {fault.number}: {fault.error}")


def _resumed(hosts: Hosts, task: dict, try_number: int) -> str:
    """How try ``try_number`` resumed the Metaflow run the lost try ran ("<origin> as <new run>": Metaflow's
    resume is a run of its own, cloning what the origin finished); "" when it resumed another run, or
    started afresh. Each try's log says what it ran (the training task's operator)."""
    _, lost = run_logged(_log(hosts, task, task["try_number"]))
    origin, run = run_logged(_log(hosts, task, try_number))
    return f"{origin} as {run}" if lost and origin == lost else ""


def run_logged(events: list) -> tuple[str, str]:
    """(the run it resumed or "", the run it ran) as a training try's log says: "started <run>: …" or
    "resumed <origin> as <run>: …"; ("", "") when it says neither."""
    for event in events:
        words = (event.get("event", "") if isinstance(event, dict) else str(event)).split()
        if words[:1] == ["started"] and len(words) > 1:
            return "", words[1].rstrip(":")
        if words[:1] == ["resumed"] and len(words) > 3 and words[2] == "as":
            return words[1], words[3].rstrip(":")
    return "", ""


def _log(hosts: Hosts, task: dict, try_number: int) -> list:
    """A try's log, read through control's API server from the log server of the worker that ran it."""
    from urllib.parse import quote

    path = (
        f"/api/v2/dags/{task['dag_id']}/dagRuns/{quote(task['dag_run_id'], safe='')}/taskInstances/"
        f"{task['task_id']}/logs/{try_number}?full_content=true"
    )
    return hosts.ctx.api().call(path, timeout=30).get("content", [])


# ---- the run ------------------------------------------------------------------------------------------------


def _lineage_problems(hosts: Hosts) -> list[str]:
    """Every worker host's lineage shipped (within two minutes of the end) and in control's files once,
    record for record (but what DataHub's emitter stamps on each send)."""
    from nyc_taxi.lineage.write import delivery
    from nyc_taxi.lineage.write.receiver import stored_path

    def plain(records: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "systemMetadata"} for r in records]

    said = []
    for host in hosts.workers():
        own = hosts.own(host)
        left = wait_for(lambda own=own: not [p for p in delivery.status(own) if p.shipped < p.total], 120, 2)
        if left is None:
            said += [
                f"{host}: {p.file} {p.shipped} of {p.total} shipped"
                for p in delivery.status(own)
                if p.shipped < p.total
            ]
        for server in (delivery.OpenLineageServer, delivery.DataHubServer):
            wanted = set()
            for path in server(own).files():
                sent = server(own).read(path)
                stored = stored_path(hosts.control, host, path.name, delivery.file_head(sent))
                wanted.add(stored)
                got = server(hosts.control).read(stored) if stored.exists() else []
                if plain(got) != plain(sent):
                    said.append(
                        f"{host}: {path.name}: {len(sent)} records sent, control holds {len(got)} ({stored.name})"
                    )
            held = {path for path in server(hosts.control).files() if path.name.startswith(f"from-{host}.")}
            said += [f"{host}: control holds {path.name}, which no file of {host}'s is" for path in held - wanted]
    return said


def _leftovers(hosts: Hosts) -> list[str]:
    """What is left once the mission is over: task instances and DAG runs queued or running, messages in
    the broker, a process on a host that its supervisord does not run (the operator's own aside)."""
    import redis

    api, said = hosts.ctx.api(), []
    for state in ("queued", "running"):
        for ti in api.call(f"/api/v2/dags/~/dagRuns/~/taskInstances?state={state}&limit=50")["task_instances"]:
            said.append(f"task {ti['dag_id']}.{ti['task_id']} {state}")
    said += [f"DAG run {r['dag_id']} {r['dag_run_id']} {r['state']}" for r in api.active_runs()]
    if waiting := redis.Redis.from_url(team.Redis(hosts.control).url()).llen("default"):
        said.append(f"{waiting} messages in the broker's queue")
    mine = {os.getpid(), *(c.pid for c in psutil.Process().children(recursive=True))}
    supervised = set()
    for host in hosts.network.layout.hosts:
        with contextlib.suppress(Exception):
            pid = Supervisor(hosts.own(host.name)).pid()
            supervised |= {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
    for pid in hosts.network.pids():
        if pid not in supervised | mine and psutil.pid_exists(pid):
            with contextlib.suppress(psutil.Error):
                said.append(
                    f"{hosts.network.host_of(pid)}: process {pid} {' '.join(psutil.Process(pid).cmdline()[:4])[:100]}"
                )
    return said


def problems(hosts: Hosts, runs: list[dict], wanted) -> dict:
    """The run's tables, files, lineage, delivery, DAG runs and what is left, each against the published
    files' independent reading or an exact identity."""
    from nyc_taxi.lineage.write.delivery import OpenLineageServer

    delivered = _lineage_problems(hosts)  # first: it waits for the hosts' last shipping
    state, files = hosts.control.state_dir, OpenLineageServer(hosts.control)
    events = [e for path in files.files() for e in files.read(path)]  # control's own and those the hosts shipped
    tables = check.tables(state)
    edges, _ = check.lineage_edges(_mission_events(events), check.VersionResolver(state))
    triggered = [(dag, conf) for step in mission.STEPS for dag, conf in step.runs]
    wanted_edges, got = expected.mission_edges(True), check.edge_names(edges, hosts.control.database)
    return {
        "tables empty": [name for name, table in tables.items() if not table["rows"]],
        "keys doubled": {name: len(t["doubled"]) for name, t in tables.items() if t["doubled"]},
        "tables not as published": check.unexpected(state, wanted),
        "unreadable files": check.unreadable_files(state)[:20],
        "lineage not as written out": [
            f"missing {sorted(wanted_edges - got)[:5]}",
            f"extra {sorted(got - wanted_edges)[:5]}",
        ]
        if got != wanted_edges
        else [],
        "lineage not delivered once": delivered,
        "runs failed": [f"{r['dag_id']} {r['run_id']} {r['state']}" for r in runs if r["state"] != "success"],
        "runs not as triggered": check.runs_as_triggered(runs, triggered, len(mission.MONTHS), TRAINING.name),
        "left": _leftovers(hosts),
        "rows": {name: table["rows"] for name, table in tables.items()},
    }


def passed(report: dict) -> bool:
    """Every planned kind of fault happened at its moment, proven, and what it touched answered again
    within RECOVERY_BOUND of its end; a lost host's task done by a later try, the flow's resuming its run;
    the run's tables, files, lineage and runs hold every check."""
    faults = report["faults"]
    lost = [f for f in faults if f["moment"] in (LOST_MID_MERGE, LOST_IN_FLOW)]
    return (
        {f["moment"] for f in faults} == set(MOMENTS)
        and all(
            f["proven"] and not f["error"] and f["recovered_s"] is not None and f["recovered_s"] <= RECOVERY_BOUND
            for f in faults
        )
        and all(f["task"] and f["task"].get("done_by_try", 0) > f["task"]["try_number"] for f in lost)
        and all((f["task"] or {}).get("resumed") for f in lost if f["moment"] == LOST_IN_FLOW)
        and all(not v for k, v in report["checks"].items() if k != "rows")
    )


def run(seed: int, rows: int, retries: int, work: Path, say=print) -> dict:
    """As the operator in control's network: the layout up, the mission under the faults, the checks."""
    settings = services.team_settings(Settings(_env_file=None))
    network = Network(settings)
    faults = plan(seed)
    commit = subprocess.run(  # the code that runs, read before it does (a commit made meanwhile is not it)
        ["git", "describe", "--always", "--dirty", "--abbrev=7"], cwd=CHECKOUT, capture_output=True, text=True
    ).stdout.strip()
    say(f"chaos run across hosts: {len(faults)} faults, seed {seed}, code {commit or 'unknown'}")
    for fault in faults:
        how = f"{fault.held * 1000:.0f} ms for {fault.lasts:.0f}" if fault.moment == LATENCY else None
        say(
            f"  plan {fault.number}: {fault.step}: {fault.moment} ({fault.component}; {how or fault.delay or fault.lasts} s)"
        )
    started = time.monotonic()
    for line in across_hosts.up(settings):
        say(f"    {line}")
    site = network.directory(CONTROL) / "chaos-site"
    files = mission.publish(site, rows)
    wanted = expected.expected(site, files, mission.MONTHS, mission.backtest_origin(mission.MONTHS))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and not k.endswith("_BASE_URL")}
    env.pop(across_hosts.OPERATOR, None)
    env |= {"AIRFLOW_PORT": str(settings.airflow_port), "TASK_RETRIES": str(retries)}
    created = subprocess.run(
        network.command(CONTROL, [sys.executable, "-m", "nyc_taxi.cli.infra", "create"]),
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if created.returncode:
        raise RuntimeError(f"create-infra on control: {created.stdout[-1500:]}{created.stderr[-1500:]}")
    from nyc_taxi.fixtures.server import served_to_hosts

    progress, stop = mission.Progress(), threading.Event()
    hosts = Hosts(settings, progress, stop)
    with served_to_hosts(network, site):
        threads = [threading.Thread(target=inject, args=(hosts, f, say), daemon=True) for f in faults]
        for thread in threads:
            thread.start()
        try:
            runs = mission.run(hosts.control, env, progress, last=lambda: None)
        finally:
            stop.set()  # a partition or a loss still on ends now, its rules taken off
            deadline = time.monotonic() + TASK_BOUND
            for thread in threads:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
        # each table's snapshot as the checks begin, in the report (a later reading of the lake can compare)
        lake, snapshots = check.catalog(hosts.control.state_dir), {}
        for identifier in lake.list_tables(hosts.control.database):
            current = lake.load_table(identifier).current_snapshot()
            snapshots[identifier[-1]] = current and {"id": current.snapshot_id, "manifest list": current.manifest_list}
        checks = problems(hosts, runs, wanted)
    report = {
        "seed": seed,
        "rows": rows,
        "retries": retries,
        "commit": commit,
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "faults": [asdict(f) for f in faults],
        "checks": checks,
        "snapshots": snapshots,
        "seconds": round(time.monotonic() - started),
    }
    report["passed"] = passed(report)
    return report


def table(report: dict) -> str:
    lines = [f"{'#':>2} {'step':<14} {'fault':<48} {'what':<34} {'proven by':<64} {'back':>6} {'task':>6}"]
    for f in report["faults"]:
        back = f"{f['recovered_s']:.0f} s" if f["recovered_s"] is not None else "-"
        done = f"{f['task_done_s']:.0f} s" if f["task_done_s"] is not None else "-"
        lines.append(
            f"{f['number']:>2} {f['step']:<14} {f['moment']:<48} {f['killed'][:34]:<34} "
            f"{(f['proven'] or f['error'])[:64]:<64} {back:>6} {done:>6}"
        )
    lines.append("")
    for name, found in report["checks"].items():
        if name != "rows":
            lines.append(f"{name}: {found or 'none'}")
    lines.append("rows: " + ", ".join(f"{k} {v}" for k, v in report["checks"]["rows"].items()))
    return "\n".join(lines)


def _stopped(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(seed: int, rows: int, retries: int, out: Path | None, keep: bool) -> int:
    """`bash run chaos --hosts`: as the operator (re-run in control's network), the run; then `team down
    --delete-data` unless ``keep``."""
    work = Path(os.environ.get("NYC_TAXI_CHAOS_WORK") or tempfile.mkdtemp(prefix="chaos-hosts-"))
    if not os.environ.get(across_hosts.OPERATOR):  # the deployment's own: this machine's Airflow and lineage stay out
        for name in [n for n in os.environ if n.startswith(("AIRFLOW", "OPENLINEAGE", "DATAHUB"))]:
            del os.environ[name]
        os.environ |= {"PROFILE": "team", "STATE_DIR": str(work / "state"), "NYC_TAXI_CHAOS_WORK": str(work)}
        os.environ |= {"AIRFLOW_PORT": str(free_port()), "SPARK_SERVER": "false", "TASK_RETRIES": str(retries)}
        os.environ |= {"DATAHUB_TELEMETRY_ENABLED": "false"}
    settings = services.team_settings(Settings(_env_file=None))
    signal.signal(signal.SIGTERM, _stopped)  # a `finally` runs on the way out: the operator's, and the down here
    if not os.environ.get(across_hosts.OPERATOR):
        argv = ["--hosts", "--seed", str(seed), "--rows", str(rows), "--retries", str(retries)]
        argv += [*(("--report", str(out)) if out else ()), *(("--keep",) if keep else ())]
        try:
            return across_hosts.in_control(settings, argv, module="nyc_taxi.cli.chaos") or 0
        finally:
            if not keep:  # every host's data, namespaces and a fault's cgroup, however the run ended; the report stays
                across_hosts.down(settings, delete_data=True)
                shutil.rmtree(settings.state_dir, ignore_errors=True)
    report = run(seed, rows, retries, work, lambda text: print(text, flush=True))
    print()
    print(table(report))
    survived = sum(1 for f in report["faults"] if f["proven"] and f["recovered_s"] is not None and not f["error"])
    print(f"\nfaults survived: {survived} of {len(report['faults'])}; wall {report['seconds']} s; "
          f"{'PASSED' if report['passed'] else 'FAILED'}")  # fmt: skip
    path = out or work / "chaos-hosts-report.json"
    path.write_text(json.dumps(report, indent=2, default=str))
    print(f"report: {path}")
    return 0 if report["passed"] else 1
