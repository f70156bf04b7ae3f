"""`bash run chaos [--faults N] [--seed S]`: the team deployment's mission once clean, then again under
N faults — each a SIGKILL of one component (a service, a worker, a task's Spark driver, a flow step, the
lineage server) at a moment the seed chooses — and every run's tables, data files, lineage and lineage
delivery compared with the clean run's, and every run's tables (the clean one's too) with what the
published files say they must hold. Prints a row per fault and a JSON report; exits 1 unless every fault
killed something at its moment and it recovered, and every run equals the clean one and the files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nyc_taxi_proving.chaos.run import main as chaos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bash run chaos", description=__doc__)
    parser.add_argument("--faults", type=int, default=20, help="how many faults in all (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="chooses the components and the moments (default 1)")
    parser.add_argument("--per-run", type=int, default=5, help="faults per run of the mission (default 5)")
    parser.add_argument("--rows", type=int, default=20_000, help="trips per taxi month (default 20,000)")
    parser.add_argument(
        "--retries", type=int, default=3, help="the deployment's task retries (TASK_RETRIES, default 3)"
    )
    parser.add_argument("--report", type=Path, help="where the JSON report goes (default: beside the run's state)")
    parser.add_argument("--keep", action="store_true", help="keep the runs' state directories")
    parser.add_argument(
        "--hosts",
        action="store_true",
        help="one run on the hosts layout (deployment/hosts.toml) under seven faults of hosts and links (takes root)",
    )
    args = parser.parse_args(argv)
    if args.faults < 1:  # a run with no fault compares nothing, and would pass
        parser.error(f"--faults {args.faults}: a chaos run needs at least one fault")
    if args.hosts:  # its faults are the hosts' own six: --faults and --per-run do not apply
        from nyc_taxi_proving.chaos.across_hosts import main as across_hosts

        return across_hosts(args.seed, args.rows, args.retries, args.report, args.keep)
    return chaos(args.faults, args.seed, args.per_run, args.rows, args.retries, args.report, args.keep)


if __name__ == "__main__":
    sys.exit(main())
