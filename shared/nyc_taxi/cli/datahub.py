"""`bash run datahub-push` and `bash run datahub-ingest-catalog`: the real DataHub.

python -m nyc_taxi.cli.datahub push            # every record file to DATAHUB_GMS_URL or ~/.datahubenv's (upserts)
python -m nyc_taxi.cli.datahub ingest-catalog  # DataHub's Iceberg source on the catalog, into DataHub Lite
"""

from __future__ import annotations

import argparse
import json
import sys

from nyc_taxi.core.settings import get_settings
from nyc_taxi.lineage.read.store import LineageStore
from nyc_taxi.lineage.write.datahub_pipeline import NoDataHubServer, ingest_catalog, push
from nyc_taxi.lineage.write.destinations import datahub_records_dir, datahub_target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nyc_taxi.cli.datahub")
    parser.add_argument("command", choices=["push", "ingest-catalog"])
    args = parser.parse_args(argv)
    settings = get_settings()
    target = datahub_target(settings)
    try:
        if args.command == "push":
            for name, count in push(settings).items():
                print(f"{name}: {count} records sent to {target.url}")
        else:
            out = ingest_catalog(settings)
            print(f"DataHub's Iceberg source wrote {len(json.loads(out.read_text()))} records to {out}")
            loaded = LineageStore(settings).load()
            print(f"loaded into DataHub Lite ({loaded.new_records} new records)")
            if target:
                print(f"sent to {target.url}: {push(settings).get(out.name, 0)} records")
    except NoDataHubServer as missing:
        parser.exit(2, f"error: {missing}\n")
    except Exception as failed:  # DataHub's pipeline errors (server down, rejected records) are long; say what to do
        first = str(failed).splitlines()[0] if str(failed) else type(failed).__name__
        parser.exit(
            1,
            f"error: {target.url if target else 'DataHub'}: {first}\nnothing is lost: the records stay in {datahub_records_dir(settings)}; "
            "run this again when the server is reachable\n",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
