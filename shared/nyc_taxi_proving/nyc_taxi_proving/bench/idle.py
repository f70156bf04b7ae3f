"""`bash run bench idle`: what an idle team deployment takes from the machine, in one run.

A team deployment is brought up in a throw-away state directory and left idle: no DAG run, no flow.
Printed:
- each program's share of a core over the measured seconds (its process and every process it forked:
  the API server's workers, a Celery worker's child), and their total;
- what that costs work beside it: a fixed CPU-bound reference (one process per core, as the test
  suite's xdist workers are) timed with no deployment, then with the idle deployment up; the ratio is
  what the deployment's idling costs the other xdist worker while the team tests wait on it.

Target: the ratio at most 1.10 (a tenth of the machine's work); a figure over it is printed as missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

TARGET_RATIO = 1.10
REFERENCE_LOOPS = 100_000_000  # about 8 s of one core of this machine in pure Python: long enough to average


def _reference_work(_: int) -> float:
    started = time.perf_counter()
    total = 0
    for i in range(REFERENCE_LOOPS):
        total += i * i
    return time.perf_counter() - started


def reference_seconds(rounds: int) -> float:
    """The slowest of one reference per core, run together, best of ``rounds`` (the least disturbed)."""
    cores = os.cpu_count() or 1
    with Pool(cores) as pool:
        return min(max(pool.map(_reference_work, range(cores))) for _ in range(rounds))


def tree_cpu(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """The CPU of each named process and every process it forked over ``seconds``, as a share of one core."""
    import psutil

    def spent(pid: int) -> float:
        try:
            root = psutil.Process(pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        total = 0.0
        for process in processes:
            try:
                times = process.cpu_times()
                total += times.user + times.system + times.children_user + times.children_system
            except psutil.NoSuchProcess:
                pass
        return total

    # the trees read again at the end: a process forked meanwhile counts from its start, and one that ended
    # counts through its parent's times of its reaped children, so the difference of the sums is exact
    before = {name: spent(pid) for name, pid in pids.items()}
    time.sleep(seconds)
    return {name: (spent(pid) - before[name]) / seconds for name, pid in pids.items()}


def program_cpu(settings, seconds: float) -> dict[str, float]:
    """Each supervisord program's CPU over ``seconds``, as a share of one core."""
    from nyc_taxi_proving.deployment.supervisor import Supervisor

    return tree_cpu({p["name"]: p["pid"] for p in Supervisor(settings).programs() if p["pid"]}, seconds)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="bash run bench idle", description=__doc__)
    parser.add_argument("--seconds", type=float, default=120, help="how long the idle programs are measured")
    parser.add_argument("--settle", type=float, default=60, help="seconds after `team up` before measuring")
    parser.add_argument("--rounds", type=int, default=3, help="reference rounds with and without the deployment")
    args = parser.parse_args(argv)

    from nyc_taxi.core.processes import free_port
    from nyc_taxi.core.settings import Settings
    from nyc_taxi_proving.bench.flow import verdict

    work = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    state = work / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OPENLINEAGE", "DATAHUB"))}
    env |= {"PROFILE": "team", "STATE_DIR": str(state), "AIRFLOW_PORT": str(free_port())}
    settings = Settings(_env_file=None, profile="team", state_dir=state, airflow_port=int(env["AIRFLOW_PORT"]))

    def team(*command: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "nyc_taxi_proving.cli.team", *command], env=env, capture_output=True
        )
        if done.returncode:
            raise SystemExit(f"team {' '.join(command)} failed:\n{done.stdout.decode()[-2000:]}{done.stderr.decode()}")

    print("... the reference without a deployment", flush=True)
    without = reference_seconds(args.rounds)
    try:
        print("... bash run team up", flush=True)
        team("up")
        time.sleep(args.settle)
        print(f"... each program's CPU over {args.seconds:.0f} s", flush=True)
        shares = program_cpu(settings, args.seconds)
        print("... the reference beside the idle deployment", flush=True)
        beside = reference_seconds(args.rounds)
    finally:
        team("down", "--delete-data")
        shutil.rmtree(work, ignore_errors=True)

    ratio = beside / without
    print(f"\nan idle team deployment (bash run bench idle, {os.cpu_count()} cores, {args.seconds:.0f} s)")
    for name, share in sorted(shares.items(), key=lambda item: -item[1]):
        print(f"  {name:<26} {share * 100:6.1f} % of a core")
    print(f"  {'all programs':<26} {sum(shares.values()) * 100:6.1f} % of a core")
    said = verdict(ratio, TARGET_RATIO, "the programs above take more of the machine than a tenth while idle")
    print(
        f"the reference, one process per core: {without:.2f} s alone, {beside:.2f} s beside it: "
        f"{ratio:.3f} (target ≤ {TARGET_RATIO:.2f}: {said})"
    )
    result = {
        "programs": {k: round(v, 4) for k, v in shares.items()},
        "total": round(sum(shares.values()), 4),
        "reference_alone_s": round(without, 3),
        "reference_beside_s": round(beside, 3),
        "ratio": round(ratio, 3),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
