"""`bash run team up|down|status`: the team profile's deployment on this machine — PostgreSQL (Airflow's
metadata database and the Iceberg catalog), Redis, S3 (moto's server: the lake's bucket), a Spark
standalone cluster (``nyc_taxi/core/team.py``) and Airflow on the CeleryExecutor with two workers
(``nyc_taxi/airflow_adapter/deployment.py``) — started from their packages under the state directory,
on 127.0.0.1 only. Services the team runs itself are given with POSTGRES_URL, REDIS_URL,
S3_ENDPOINT_URL and SPARK_MASTER and are not started."""

from __future__ import annotations

import argparse
import sys

from nyc_taxi.airflow_adapter import deployment
from nyc_taxi.core import processes, team
from nyc_taxi.core.settings import get_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bash run team", description=__doc__)
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument(
        "--delete-data", action="store_true", help="down: also remove PostgreSQL's data and the bucket's objects"
    )
    args = parser.parse_args(argv)
    settings = get_settings()
    if settings.profile != "team":
        print(f"note: PROFILE is {settings.profile!r}; the pipeline uses these services with PROFILE=team")
    try:
        if args.action == "up":
            said = team.up(settings)
            print("\n".join(said), flush=True)
            said = deployment.up(settings)
        elif args.action == "down":
            said = deployment.down(settings) + team.down(settings, delete_data=args.delete_data)
        else:
            said = team.status(settings) + deployment.status(settings)
    except processes.ServiceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print("\n".join(said))
    return 0


if __name__ == "__main__":
    sys.exit(main())
