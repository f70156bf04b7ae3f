"""`bash run airflow standalone`: Airflow's own standalone, with every component on 127.0.0.1.

Airflow's standalone runs the API server (UI), scheduler, DAG processor and triggerer. The API
server listens where AIRFLOW__API__HOST says (127.0.0.1, see environment.py); but the scheduler and
the triggerer also start a log server each (ports 8793/8794) that Airflow binds to every interface,
with no setting to change it. Those servers exist for workers on other machines; here every task
runs on this machine and the UI reads its logs from disk, so they are switched off with the
components' own ``--skip-serve-logs`` flag. Everything else is Airflow's standalone as is.

Airflow's internals, in this one place: the standalone command has no public way to pass a
component a flag, so its ``subcommands`` table is replaced. ``tests/test_readme_path.py`` reads the
standalone's listening sockets: were the internal to move, a log server on 0.0.0.0 fails it.

While it runs, it keeps a warm Spark server for its state directory (``core/spark_server.warm``), as
`bash run demo` does: the DAG runs' tasks and the flows they start, and a flow run by hand meanwhile,
attach to it instead of each starting a JVM; it is stopped with the standalone (``SPARK_SERVER=false``: none).
Ctrl-C stops it (Airflow's own shutdown, then the server's); a standalone ended otherwise (``kill``) dies
as Airflow's own does and leaves its components and the server running (`bash run spark-server stop`).

A port that is taken stops the command before anything starts: Airflow's own standalone would start
its other components and leave the UI's port to whatever holds it. While it runs, a record in Airflow's
home names it (``environment.running_standalone``), so that `bash run clean` does not remove the state from under it.
"""

from __future__ import annotations

import os
import sys

from airflow.cli.commands.standalone_command import StandaloneCommand

from nyc_taxi.airflow_adapter.environment import standalone_record
from nyc_taxi.core import spark_server
from nyc_taxi.core.processes import listening, write_private
from nyc_taxi.core.settings import get_settings

WITH_LOG_SERVER = ("scheduler", "triggerer")


class _WithoutLogServers(dict):
    """The standalone's components by name; the ones with a log server get --skip-serve-logs."""

    def __setitem__(self, name, component):
        if name in WITH_LOG_SERVER and "--skip-serve-logs" not in component.command:
            component.command = [*component.command, "--skip-serve-logs"]
        super().__setitem__(name, component)


class LocalStandalone(StandaloneCommand):
    def __init__(self):
        super().__init__()
        self.subcommands = _WithoutLogServers()


def main() -> int:
    port = int(os.environ.get("AIRFLOW__API__PORT", "8080"))
    if listening(port):
        print(
            f"error: 127.0.0.1:{port} is taken by another program: stop it, or set AIRFLOW_PORT to a free port "
            "(in .env or the environment) for this Airflow",
            file=sys.stderr,
        )
        return 1
    settings = get_settings()
    record = standalone_record(settings)
    write_private(record, {"pid": os.getpid(), "port": port})
    try:
        with spark_server.warm(settings, say=lambda line: print(f"standalone | {line}", flush=True)):
            LocalStandalone().run()
    finally:
        record.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
