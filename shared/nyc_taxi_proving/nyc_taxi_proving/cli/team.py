"""`bash run team up|down|status`: the team profile's deployment on this machine, run by supervisord —
PostgreSQL (Airflow's metadata database and the Iceberg catalog), Redis, SeaweedFS (the lake's object
storage: master, volume server, filer, S3 gateway), a Spark standalone cluster and Airflow on the
CeleryExecutor with two workers (``nyc_taxi_proving/deployment/supervisord.conf``), under the state directory,
on 127.0.0.1 only. supervisord restarts a program that dies. Services the team runs itself are given
with POSTGRES_URL, REDIS_URL, S3_ENDPOINT_URL and SPARK_MASTER and are not started.

`bash run team new-authority --hosts`: revoke every host's SeaweedFS certificate (one taken from a host): the
deployment stopped, a new authority, a new certificate for every host, everything started again.

`bash run team up --hosts`, `team status --hosts`: the same programs across the hosts of
``deployment/hosts.toml`` (control, worker-a, worker-b), each host a network namespace of this machine
with its own supervisord (``nyc_taxi_proving/deployment/across_hosts.py``); `team down` stops them too.
`bash run team hosts up | down | status | run HOST -- COMMAND`: the hosts alone (``deployment/hosts.py``)."""

from __future__ import annotations

import argparse
import sys

from nyc_taxi.core.processes import ServiceError
from nyc_taxi.core.settings import get_settings
from nyc_taxi_proving.deployment import across_hosts, services


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["hosts"]:  # the hosts layout: deployment/hosts.toml
        return _hosts(argv[1:])
    parser = argparse.ArgumentParser(prog="bash run team", description=__doc__)
    parser.add_argument("action", choices=["up", "down", "status", "new-authority"])
    parser.add_argument(
        "--delete-data", action="store_true", help="down: also remove the services' data (PostgreSQL, SeaweedFS, Redis)"
    )
    parser.add_argument(
        "--hosts", action="store_true", help="up, status: across the hosts of deployment/hosts.toml (as root)"
    )
    args = parser.parse_args(argv)
    settings = get_settings()
    if settings.profile != "team":
        print(f"note: PROFILE is {settings.profile!r}; the pipeline uses these services with PROFILE=team")
    if args.action == "status" and not args.hosts:  # the hosts layout runs, and no deployment on this machine
        args.hosts = (
            across_hosts.running(services.team_settings(settings))
            and not services.Supervisor(services.team_settings(settings)).running()
        )
    if args.action == "new-authority" and not args.hosts:
        parser.error("new-authority revokes the hosts' certificates: team new-authority --hosts")
    if args.hosts and args.action != "down":
        settings = services.team_settings(settings)

        def across():  # run as the operator, from control's network, where every host answers
            operator = across_hosts.in_control(settings, argv, make=args.action in ("up", "new-authority"))
            if operator is not None:
                return operator
            actions = {
                "up": across_hosts.up,
                "status": across_hosts.status,
                "new-authority": across_hosts.new_authority,
            }
            return actions[args.action](settings)

        return _said(across)
    return _said(
        lambda: {
            "up": lambda: services.up(settings),
            "down": lambda: across_hosts.down(settings, delete_data=args.delete_data),
            "status": lambda: services.status(settings),
        }[args.action]()
    )


def _hosts(argv: list[str]) -> int:
    """`bash run team hosts up | down | status | run HOST -- COMMAND`."""
    import subprocess

    from nyc_taxi_proving.deployment import hosts
    from nyc_taxi_proving.deployment.hosts import Network

    parser = argparse.ArgumentParser(prog="bash run team hosts", description=hosts.__doc__)
    parser.add_argument("action", choices=["up", "down", "status", "run"])
    parser.add_argument("host", nargs="?", help="run: the host")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="run: the command, after --")
    args = parser.parse_args(argv)
    network = Network(get_settings())
    if args.action != "run":
        return _said({"up": network.up, "down": network.down, "status": network.status}[args.action])
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.host or not command:
        parser.error("run takes a host and a command: run HOST -- COMMAND")
    return _said(lambda: subprocess.run(network.command(args.host, command)).returncode)


def _said(action) -> int:
    """Run ``action``: print what it said (or pass on a command's exit code), or its ServiceError."""
    try:
        said = action()
    except ServiceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if isinstance(said, int):
        return said
    print("\n".join(said))
    return 0


if __name__ == "__main__":
    sys.exit(main())
