"""`bash run create-infra` / `destroy-infra`: the lakehouse of the active profile.

local: the warehouse directory, the SQLite Iceberg catalog and the database namespace.
aws:   the S3 bucket (public access blocked, default encryption, TLS-only policy) and the Glue database.
Both are idempotent and print what they did.
"""

from __future__ import annotations

import argparse
import sys

from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.settings import get_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="infra", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["create", "destroy"])
    parser.add_argument("--yes", action="store_true", help="destroy without asking")
    args = parser.parse_args(argv)
    settings = get_settings()
    lake = lakehouse(settings)
    if args.action == "destroy" and not args.yes:
        if not sys.stdin.isatty():
            print(f"refusing to destroy {lake.describe()} without confirmation: pass --yes", file=sys.stderr)
            return 2
        if input(f"Destroy {lake.describe()} (profile {settings.profile})? Type 'yes': ").strip() != "yes":
            print("nothing destroyed")
            return 1
    done = lake.create() if args.action == "create" else lake.destroy()
    print(f"[{settings.profile}] " + ("\n".join(done) if done else f"nothing to {args.action}: already in place"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
