"""`bash run clean [--yes]`: remove the state directory (STATE_DIR, default .state/) to start over: the
lake, the catalog, Airflow's and Metaflow's homes, the lineage. The uv environment stays.

It says first what it removes, and asks (`--yes` answers for it; without a terminal it refuses without
`--yes`, as `destroy-infra` does). What runs on the state directory is stopped first, and named: the
team deployment (with its services' data, PostgreSQL's outside the state directory when run as root) and
the warm Spark server. An Airflow standalone of this state directory runs in another terminal, where its
user sees it: `clean` refuses, naming it, rather than remove its state from under it.
"""

from __future__ import annotations

import argparse
import shutil
import sys

from nyc_taxi.core.settings import get_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bash run clean", description=__doc__.split("\n\n")[0])
    parser.add_argument("--yes", action="store_true", help="remove without asking")
    args = parser.parse_args(argv)
    settings = get_settings()
    state = settings.state_dir
    from nyc_taxi.airflow_adapter.environment import running_standalone

    if standalone := running_standalone(settings):
        print(
            f"error: `bash run airflow standalone` runs on {state} (pid {standalone['pid']}, "
            f"http://127.0.0.1:{standalone['port']}): stop it first (Ctrl-C in its terminal), then clean",
            file=sys.stderr,
        )
        return 1
    from nyc_taxi.core import spark_server
    from nyc_taxi_proving.deployment import across_hosts
    from nyc_taxi_proving.deployment.hosts import Network

    team = (state / "team").is_dir()  # a team deployment of this state directory: its processes and data first
    data = [path for path in _data_directories(settings) if path.exists()]  # its data, even when team/ is gone
    given = [name.upper() for name in ("postgres_url", "redis_url", "s3_endpoint_url") if getattr(settings, name)]
    server = spark_server.running(settings)
    hosts = Network(settings).namespaces()
    removed = [
        *([f"{state}: {_what_the_state_holds(settings)}"] if state.exists() else []),
        *(["the team deployment of this state directory: every program stopped"] if team else []),
        *(f"{path}: the team deployment's service data" for path in data if not path.is_relative_to(state)),
        *(["the warm Spark server: stopped"] if server else []),
        *([f"the hosts layout's namespaces ({', '.join(hosts)}): what runs in them killed"] if hosts else []),
    ]
    if not removed:
        print(f"nothing to remove: {state} does not exist")
        return 0
    print("bash run clean removes:\n" + "\n".join(f"    {line}" for line in removed))
    if given and (team or data):
        print(f"    (not the services given by {', '.join(given)}: what they hold stays)")
    if settings.profile == "aws":
        print("    (not the aws profile's bucket and Glue catalog: `bash run destroy-infra` removes those)")
    if not args.yes:
        if not sys.stdin.isatty():
            print("refusing to remove it without confirmation: pass --yes", file=sys.stderr)
            return 2
        try:
            answer = input("Remove all of it? Type 'yes': ").strip()
        except EOFError:  # Ctrl-D
            answer = ""
        if answer != "yes":
            print("nothing removed")
            return 1
    if team or data or hosts:
        from nyc_taxi.core.processes import ServiceError

        try:
            for line in across_hosts.down(settings, delete_data=True):
                print(f"    {line}")
        except ServiceError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    if server:
        spark_server.stop(settings)
        print("    stopped the warm Spark server")
    if state.exists():
        shutil.rmtree(state, ignore_errors=True)
        if state.exists():
            print(f"error: could not remove all of {state}", file=sys.stderr)
            return 1
        print(f"removed {state}")
    return 0


def _what_the_state_holds(settings) -> str:
    lake = {"local": "the lake, the catalog, ", "team": "the team deployment's own data under it, "}
    return f"{lake.get(settings.profile, '')}Airflow's and Metaflow's homes, the lineage records"


def _data_directories(settings) -> list:
    from nyc_taxi_proving.deployment import across_hosts

    try:
        return across_hosts.data_directories(settings)
    except KeyError:  # as root, with no postgres user: no team deployment ever ran its PostgreSQL here
        return []


if __name__ == "__main__":
    sys.exit(main())
