"""`bash run create-infra` / `destroy-infra`: the lakehouse of the active profile.

local: the warehouse directory, the SQLite Iceberg catalog and the database namespace.
aws:   the S3 bucket (public access blocked, default encryption, TLS-only policy) and the Glue database.
Both are idempotent and print what they did. `destroy --table NAME` drops one table and its files (a table
written under a key the registry no longer declares: its writers create it anew).
"""

from __future__ import annotations

import argparse
import sys

from nyc_taxi.core.datasets import TABLES
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.settings import get_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="infra", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["create", "destroy"])
    parser.add_argument("--yes", action="store_true", help="destroy without asking")
    parser.add_argument("--table", choices=sorted(TABLES), help="destroy: only this table and its files")
    args = parser.parse_args(argv)
    if args.table and args.action != "destroy":
        parser.error("--table goes with destroy")
    settings = get_settings()
    lake = lakehouse(settings)
    what = f"the table {args.table} and its files ({lake.describe()})" if args.table else lake.describe()
    if args.action == "destroy" and not args.yes:
        if not sys.stdin.isatty():
            print(f"refusing to destroy {what} without confirmation: pass --yes", file=sys.stderr)
            return 2
        if input(f"Destroy {what} (profile {settings.profile})? Type 'yes': ").strip() != "yes":
            print("nothing destroyed")
            return 1
    if args.table:
        from nyc_taxi.core.tables import drop_table

        dropped = drop_table(TABLES[args.table], settings)
        print(
            f"[{settings.profile}] "
            + (
                f"dropped {args.table}, its metadata and the data files its snapshots name"
                if dropped
                else f"no table {args.table}"
            )
        )
        return 0
    done = lake.create() if args.action == "create" else lake.destroy()
    print(f"[{settings.profile}] " + ("\n".join(done) if done else f"nothing to {args.action}: already in place"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
