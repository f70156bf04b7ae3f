"""`bash run lineage-replay`: ship what the local lineage files hold and the servers have not accepted yet.

bash run lineage-replay            send it (OPENLINEAGE_URL, DATAHUB_GMS_URL), in order, each record once
bash run lineage-replay --status   what is pending, per server and file
"""

from __future__ import annotations

import argparse
import sys

from nyc_taxi.core.settings import get_settings
from nyc_taxi.lineage.write.delivery import servers, ship, status
from nyc_taxi.metaflow_adapter.recorder import record_leftovers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bash run lineage-replay", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--status", action="store_true", help="say what is pending; send nothing")
    args = parser.parse_args(argv)
    settings = get_settings()
    if not servers(settings):
        print("error: nothing to ship to: set OPENLINEAGE_URL and/or DATAHUB_GMS_URL", file=sys.stderr)
        return 2
    if args.status:
        for row in status(settings):
            print(f"{row.server:12s} {row.total - row.shipped:6d} pending of {row.total:6d}  {row.file}")
        return 0
    record_leftovers(settings)  # a Metaflow step's lineage whose recorder was killed: local first
    result = ship(settings)
    failed = False
    for shipment in result.shipments:
        print(f"{shipment.server}: {shipment.sent} records sent to {shipment.url}, {shipment.pending} pending")
        if shipment.error:
            failed = True
            print(
                f"error: {shipment.server} at {shipment.url}: {shipment.error}; what was sent is remembered, "
                "run this again to send the rest",
                file=sys.stderr,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
