"""`bash run lineage-replay`: ship what the local lineage files hold and the servers have not accepted yet.

bash run lineage-replay            send it, in order, each record once
bash run lineage-replay --status   what is pending, per server and file

The servers are those each tool's settings name: OpenLineage's transport (openlineage.yml,
OPENLINEAGE_CONFIG, OPENLINEAGE_URL), DataHub's (the Airflow connection [datahub] conn_id names,
default datahub_rest_default, wherever Airflow keeps it: its metadata database, AIRFLOW_CONN_ variables, a
secrets backend; else DATAHUB_GMS_URL and DATAHUB_GMS_TOKEN; ~/.datahubenv).
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from nyc_taxi.airflow_adapter.datahub_connection import shipping_targets
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
    with contextlib.redirect_stdout(sys.stderr):  # Airflow's own log lines: what this prints is the answer
        datahub = shipping_targets(settings, metadata_database=True)  # a connection made in Airflow's UI too
    if not servers(settings, datahub):
        print(
            "error: nothing to ship to: configure OpenLineage (openlineage.yml, OPENLINEAGE_URL) or DataHub "
            "(a datahub_rest_default connection, DATAHUB_GMS_URL, `datahub init`)",
            file=sys.stderr,
        )
        return 2
    if args.status:
        for row in status(settings, datahub):
            print(f"{row.server:12s} {row.total - row.shipped:6d} pending of {row.total:6d}  {row.file}")
        return 0
    record_leftovers(settings)  # a Metaflow step's lineage whose recorder was killed: local first
    result = ship(settings, datahub=datahub)
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
