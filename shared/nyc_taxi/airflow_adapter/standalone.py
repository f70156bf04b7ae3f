"""`bash run airflow standalone`: Airflow's own standalone, with every component on 127.0.0.1.

Airflow's standalone runs the API server (UI), scheduler, DAG processor and triggerer. The API
server listens where AIRFLOW__API__HOST says (127.0.0.1, see environment.py); but the scheduler and
the triggerer also start a log server each (ports 8793/8794) that Airflow binds to every interface,
with no setting to change it. Those servers exist for workers on other machines; here every task
runs on this machine and the UI reads its logs from disk, so they are switched off with the
components' own ``--skip-serve-logs`` flag. Everything else is Airflow's standalone as is.

Ctrl-C reaches every component itself (the terminal signals the whole process group), and Airflow's
standalone then sends each one SIGTERM as well, at once. Two signals a few milliseconds apart can hang
a component for good: its handler logs, the second handler interrupts the first inside the log's
lock and waits on it (seen in the dag-processor and the triggerer, structlog's WriteLogger). So a
component is sent SIGTERM only if it has not ended on its own Ctrl-C within ``STOP_GRACE_SECONDS``
(a standalone sent SIGINT alone, ``kill -INT``, stops its components that much later). Further Ctrl-Cs
while it stops are said and ignored: `uv run`, without a terminal, forwards the group's SIGINT a second
time 200 ms later, and a second KeyboardInterrupt would leave Airflow's shutdown half done.

Airflow's internals, in this one place: the standalone command has no public way to pass a
component a flag, nor to change how it stops one, so its ``subcommands`` table is replaced and each
component's ``stop`` wrapped. ``tests/test_readme_path.py`` reads the standalone's listening sockets
(were the internal to move, a log server on 0.0.0.0 fails it) and asserts that Ctrl-C stops it all
within its budget.

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
import signal
import sys
import time

from airflow.cli.commands.standalone_command import StandaloneCommand

from nyc_taxi.airflow_adapter.environment import standalone_record
from nyc_taxi.core import spark_server
from nyc_taxi.core.processes import listening, write_private
from nyc_taxi.core.settings import get_settings

WITH_LOG_SERVER = ("scheduler", "triggerer")
STOP_GRACE_SECONDS = 15


class _Components(dict):
    """The standalone's components by name: the ones with a log server get --skip-serve-logs, and each
    one's stop waits for the end of the stop grace before it signals (see the module's docstring)."""

    def __init__(self, stop_deadline):
        super().__init__()
        self._stop_deadline = stop_deadline

    def __setitem__(self, name, component):
        if name in WITH_LOG_SERVER and "--skip-serve-logs" not in component.command:
            component.command = [*component.command, "--skip-serve-logs"]
        terminate = component.stop

        def stop():
            deadline = self._stop_deadline()
            while component.process is not None and component.process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if component.process is not None and component.process.poll() is None:
                terminate()

        component.stop = stop
        super().__setitem__(name, component)


class LocalStandalone(StandaloneCommand):
    def __init__(self):
        super().__init__()
        self._stopping_since: float | None = None
        self.subcommands = _Components(lambda: (self._stopping_since or time.monotonic()) + STOP_GRACE_SECONDS)

    def run(self):
        signal.signal(signal.SIGINT, self._interrupted)
        super().run()

    def _interrupted(self, signum, frame):
        if self._stopping_since is None:
            self._stopping_since = time.monotonic()
            raise KeyboardInterrupt
        print(
            f"standalone | stopping already: each component ends on its own Ctrl-C, or is sent SIGTERM "
            f"{STOP_GRACE_SECONDS} s after it (kill {os.getpid()} ends this process now)",
            flush=True,
        )


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
