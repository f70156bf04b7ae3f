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
lock and waits on it (seen in the dag-processor and the triggerer, structlog's WriteLogger). So the
components get ``STOP_GRACE_SECONDS`` in all, from the Ctrl-C, to end on their own; those still running
then are sent SIGTERM, and ``KILL_AFTER_SECONDS`` later SIGKILL with their children. A process a
component left running that holds its output open (which would hold Airflow's wait for the component's
thread for ever) is found by that pipe (Linux's /proc, this user's processes) once its output has stayed
open ``OUTPUT_CLOSE_SECONDS`` after the components ended, and sent SIGTERM, and SIGKILL with its children,
``KILL_AFTER_SECONDS`` apart. Each step and each component's ending is said. A
standalone sent SIGINT alone (``kill -INT``) stops
its components that much later. Further Ctrl-Cs while it stops are said
and ignored: `uv run`, without a terminal, forwards the group's SIGINT a second time 200 ms later, and
a second KeyboardInterrupt would leave the shutdown, or a Spark server's start, half done.

Airflow's internals, in this one place: the standalone command has no public way to pass a
component a flag, nor to change how it stops one, so its ``subcommands`` table is replaced and each
component's ``stop`` wrapped. ``tests/test_readme_path.py`` reads the standalone's listening sockets
(were the internal to move, a log server on 0.0.0.0 fails it) and asserts that Ctrl-C stops it all
within its budget.

While it runs, it keeps a warm Spark server for its state directory (``core/spark_server.warm``), as
`bash run demo` does: the DAG runs' tasks and the flows they start, and a flow run by hand meanwhile,
attach to it instead of each starting a JVM; it is stopped with the standalone (``SPARK_SERVER=false``: none).
Ctrl-C stops it (its components, as above, then the server); a standalone ended otherwise (``kill``) dies
as Airflow's own does and leaves its components and the server running (`bash run spark-server stop`).

A port that is taken stops the command before anything starts: Airflow's own standalone would start
its other components and leave the UI's port to whatever holds it. While it runs, a record in Airflow's
home names it (``environment.running_standalone``), so that `bash run clean` does not remove the state from under it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
from airflow.cli.commands.standalone_command import StandaloneCommand

from nyc_taxi.airflow_adapter.environment import standalone_record
from nyc_taxi.core import spark_server
from nyc_taxi.core.processes import holding_open, listening, write_private
from nyc_taxi.core.settings import get_settings

WITH_LOG_SERVER = ("scheduler", "triggerer")
STOP_GRACE_SECONDS = 15  # for the components to end on the Ctrl-C they received themselves
KILL_AFTER_SECONDS = 10  # for one sent SIGTERM (Airflow gives its DAG file processors 5 s)
OUTPUT_CLOSE_SECONDS = 2  # for an ended component's output to be read to its end


_KILL_ME = "end this standalone with kill {pid}, then bash run spark-server stop"


class Interrupts:
    """The standalone's SIGINT handler: the first raises KeyboardInterrupt and starts the stop's clock;
    later ones are said and ignored."""

    def __init__(self):
        self.first: float | None = None

    def __call__(self, signum, frame):
        if self.first is None:
            self.first = time.monotonic()
            raise KeyboardInterrupt
        # os.write: print here could re-enter the buffer the interrupted code was writing
        with contextlib.suppress(OSError):
            os.write(
                sys.stderr.fileno(),
                f"standalone | stopping already: Ctrl-C again is ignored while Airflow's components (within about "
                f"{STOP_GRACE_SECONDS + KILL_AFTER_SECONDS} s; up to {OUTPUT_CLOSE_SECONDS + 2 * KILL_AFTER_SECONDS} s "
                f"more if a process they left holds their output) and the Spark server stop (kill {os.getpid()} ends this process at once and leaves them "
                "running: bash run spark-server stop)\n".encode(),
            )

    def deadline(self) -> float:
        return (time.monotonic() if self.first is None else self.first) + STOP_GRACE_SECONDS


def _running(component) -> bool:
    if component.process is None:
        return component.is_alive()  # its thread has not started the process yet
    return component.process.poll() is None


def _until(done, deadline: float) -> None:
    while not done() and time.monotonic() < deadline:
        time.sleep(0.1)


def _ended(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit code {code}"


class _Components(dict):
    """The standalone's components by name: the ones with a log server get --skip-serve-logs. Airflow
    calls each one's ``stop`` in turn; the first call stops them all, signalling only what still runs at
    the stop's deadline, and says how each ended (see the module's docstring)."""

    def __init__(self, deadline, kill_after: float = KILL_AFTER_SECONDS):
        super().__init__()
        self._deadline, self._kill_after, self._stopping = deadline, kill_after, False

    def __setitem__(self, name, component):
        if name in WITH_LOG_SERVER and "--skip-serve-logs" not in component.command:
            component.command = [*component.command, "--skip-serve-logs"]
        component.stop = self.stop
        super().__setitem__(name, component)

    def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        components = dict(self)
        _until(lambda: not any(_running(c) for c in components.values()), self._deadline())
        # a thread that has not started its process yet: wait for it (the thread ends if the start fails)
        starting = lambda: [n for n, c in components.items() if c.process is None and c.is_alive()]  # noqa: E731
        _until(lambda: not starting(), time.monotonic() + 60)
        if starting():
            _say(f"{', '.join(starting())} not started 60 s after the stop began: " + _KILL_ME.format(pid=os.getpid()))
        late = {name: c.process for name, c in components.items() if c.process is not None and c.process.poll() is None}
        for name, process in late.items():
            process.terminate()
            _say(f"{name} still runs at the stop's deadline: SIGTERM")
        _until(lambda: all(p.poll() is not None for p in late.values()), time.monotonic() + self._kill_after)
        for name, process in late.items():
            if process.poll() is None:
                family = _children(process)
                process.kill()
                _kill(family)
                _say(f"{name} still runs {self._kill_after:.0f} s after SIGTERM: SIGKILL, and {len(family)} it started")
        for name, component in components.items():
            if component.process is not None:
                try:
                    _say(f"{name} ended: {_ended(component.process.wait(10))}")
                except subprocess.TimeoutExpired:
                    _say(f"{name} has not ended 10 s after SIGKILL")
        self._free_outputs(components)

    def _free_outputs(self, components: dict) -> None:
        """Airflow joins each component's thread, which reads the component's output to its end: a process
        the component left running that holds that output open (a task's process, say) would hold the
        standalone for ever. Such processes are found by the pipe they hold, sent SIGTERM, then SIGKILL
        with their children, all components' at once, each step said."""
        reading = lambda: {n: c for n, c in components.items() if c.process is not None and c.is_alive()}  # noqa: E731
        _until(lambda: not reading(), time.monotonic() + OUTPUT_CLOSE_SECONDS)  # the rest of their output read
        unfound: set[str] = set()
        for signal_name in ("SIGTERM", "SIGKILL"):
            held = {name: _holding(c.process.stdout) for name, c in reading().items() if name not in unfound}
            for name, holders in held.items():
                if not holders:
                    components[name].join(1)  # its holder may have closed it a moment before the scan
                    if components[name].is_alive():
                        unfound.add(name)
                        _say(
                            f"{name}'s output is still open, held by no process this user can read: "
                            + _KILL_ME.format(pid=os.getpid())
                        )
                    continue
                _say(f"{name}'s output is held open by {_named(holders)}, left running: {signal_name}")
                for holder in holders:
                    family = _children(holder) if signal_name == "SIGKILL" else []
                    with contextlib.suppress(psutil.Error):
                        (holder.terminate if signal_name == "SIGTERM" else holder.kill)()
                    _kill(family)
            if not set(reading()) - unfound:
                return
            _until(lambda: not set(reading()) - unfound, time.monotonic() + self._kill_after)
        for name in set(reading()) - unfound:
            _say(
                f"{name}'s output is still open {self._kill_after:.0f} s after SIGKILL: "
                + _KILL_ME.format(pid=os.getpid())
            )


def _children(process) -> list:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(process.pid).children(recursive=True)
    return []


def _holding(stream) -> list:
    """The processes other than this one that hold the pipe ``stream`` reads from."""
    try:
        pids = holding_open(stream.fileno())
    except ValueError:  # the stream closed meanwhile
        return []
    holders = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            holders.append(psutil.Process(pid))
    return holders


def _named(processes: list) -> str:
    names = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            names.append(f"{process.pid} ({process.name()})")
    return ", ".join(names) or "processes that have ended"


def _kill(processes: list) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()


def _say(line: str) -> None:
    with contextlib.suppress(OSError):  # a closed output (the terminal's pipe to `tee`, gone) stops no stop
        print(f"standalone | {line}", flush=True)


class LocalStandalone(StandaloneCommand):
    def __init__(self, interrupts: Interrupts):
        super().__init__()
        self.subcommands = _Components(interrupts.deadline)

    def run(self):
        try:
            super().run()
        except KeyboardInterrupt:  # outside Airflow's loop (its database check, its components' start): stops none
            self.subcommands.stop()
            for component in self.subcommands.values():
                if component.is_alive():
                    component.join()
            raise


def main() -> int:
    port = int(os.environ.get("AIRFLOW__API__PORT", "8080"))
    if listening(port):
        print(
            f"error: 127.0.0.1:{port} is taken by another program: stop it, or set AIRFLOW_PORT to a free port "
            "(in .env or the environment) for this Airflow",
            file=sys.stderr,
        )
        return 1
    interrupts = Interrupts()
    signal.signal(signal.SIGINT, interrupts)
    settings = get_settings()
    record = standalone_record(settings)
    try:
        write_private(record, {"pid": os.getpid(), "port": port})
        with spark_server.warm(settings, say=_say):
            LocalStandalone(interrupts).run()
    finally:
        record.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
