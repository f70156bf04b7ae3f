"""The chaos run's faults across hosts, each injected at the moment it names and proven to have happened,
and when what it touched is back."""

from __future__ import annotations

import contextlib
import os
import time

import psutil

from nyc_taxi.core import datasets as d
from nyc_taxi.core import team
from nyc_taxi.core.processes import alive
from nyc_taxi.core.settings import Settings
from nyc_taxi_proving.chaos import moments
from nyc_taxi_proving.chaos.components import wait_for
from nyc_taxi_proving.chaos.hosts_plan import (
    CUT_AT_COMMIT,
    FLOW,
    HOST_DOWN,
    LATENCY,
    LOSS,
    LOST_IN_FLOW,
    LOST_MID_MERGE,
    MERGE,
    PROBE_SECONDS,
    RECEIVER_CUT_OFF,
    SCHEDULER_FROM_POSTGRES,
    HostFault,
    Hosts,
)
from nyc_taxi_proving.chaos.run import RECOVERY_BOUND, TASK_BOUND, _task_done, _task_instance
from nyc_taxi_proving.deployment import across_hosts, services
from nyc_taxi_proving.deployment.across_hosts import CONTROL
from nyc_taxi_proving.deployment.supervisor import Supervisor


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
