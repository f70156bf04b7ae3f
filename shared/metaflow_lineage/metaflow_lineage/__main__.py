"""``metaflow-lineage ship``: send what the outbox holds to the destinations the user's settings name."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from metaflow_lineage.delivery import Outbox


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="metaflow-lineage", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    ship = commands.add_parser("ship", help="send pending lineage (OpenLineage events, DataHub records)")
    ship.add_argument(
        "--dir", type=Path, help="the outbox (default: METAFLOW_LINEAGE_DIR, else ~/.local/state/metaflow-lineage)"
    )
    ship.add_argument("--run", default="", help="only a run's files: Flow.run id. (default: every one)")
    ship.add_argument("--seconds", type=float, help="give up after this long (default: when done)")
    arguments = parser.parse_args(argv)
    outbox = Outbox(arguments.dir)
    problems = outbox.ship(arguments.run, seconds=arguments.seconds)
    for problem in problems:
        print(problem, file=sys.stderr)
    left = len(outbox.pending_files())
    print(f"{left} file(s) pending in {outbox.pending}" if left else f"nothing pending in {outbox.pending}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
