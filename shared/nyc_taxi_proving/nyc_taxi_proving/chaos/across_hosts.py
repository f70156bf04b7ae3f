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
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

import psutil

from nyc_taxi.core import team
from nyc_taxi.core.processes import free_port
from nyc_taxi.core.settings import Settings
from nyc_taxi_proving.chaos import check, expected, mission
from nyc_taxi_proving.chaos.components import wait_for
from nyc_taxi_proving.chaos.host_faults import MOMENTS, inject
from nyc_taxi_proving.chaos.hosts_plan import (
    LATENCY,
    LOST_IN_FLOW,
    LOST_MID_MERGE,
    TRAINING,
    Hosts,
    plan,
)
from nyc_taxi_proving.chaos.readings import mission_events
from nyc_taxi_proving.chaos.run import RECOVERY_BOUND, TASK_BOUND
from nyc_taxi_proving.deployment import across_hosts, services
from nyc_taxi_proving.deployment.across_hosts import CONTROL
from nyc_taxi_proving.deployment.hosts import CHECKOUT, Network
from nyc_taxi_proving.deployment.supervisor import Supervisor


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
    edges, _ = check.lineage_edges(mission_events(events), check.VersionResolver(state))
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
    from nyc_taxi_proving.fixtures.server import served_to_hosts

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
            return across_hosts.in_control(settings, argv, module="nyc_taxi_proving.cli.chaos") or 0
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
