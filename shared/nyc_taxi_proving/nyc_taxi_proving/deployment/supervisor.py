"""supervisord for this state directory: started with ``supervisord.conf`` and the values it expands,
driven through its XML-RPC interface on a 0700 Unix socket (the interface `supervisorctl` uses)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xmlrpc.client
from pathlib import Path

from supervisor.xmlrpc import SupervisorTransport

from nyc_taxi.core.processes import ServiceError, alive
from nyc_taxi.core.settings import Settings
from nyc_taxi.core.team import team_dir

CONFIG = Path(__file__).with_name("supervisord.conf")
# every process of a deployment inherits it from supervisord: the deployment's directory
MARKER = "NYC_TAXI_DEPLOYMENT"


def run_dir(settings: Settings) -> Path:
    """supervisord's socket and pid file, and the services' own sockets."""
    return team_dir(settings) / "run"


def logs_dir(settings: Settings) -> Path:
    """Every program's output, supervisord's log and the state changes."""
    return team_dir(settings) / "logs"


class Supervisor:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.socket = run_dir(settings) / "supervisor.sock"
        self.pid_file = run_dir(settings) / "supervisord.pid"

    def rpc(self):
        transport = SupervisorTransport(None, None, f"unix://{self.socket}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport).supervisor

    def pid(self) -> int:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return 0

    def running(self) -> bool:
        if not alive(self.pid()):
            return False
        try:
            return self.rpc().getState()["statename"] == "RUNNING"
        except (OSError, xmlrpc.client.Fault):
            return False

    def start(self, environment: dict[str, str], wrap=None) -> None:
        """supervisord itself (it daemonizes); the programs stay stopped until asked for. ``wrap``: its
        command as it runs elsewhere (on a host: in the host's namespaces)."""
        for directory in (run_dir(self.settings), logs_dir(self.settings)):
            directory.mkdir(parents=True, exist_ok=True)
        run_dir(self.settings).chmod(0o700)
        command = [sys.executable, "-m", "supervisor.supervisord", "-c", str(CONFIG)]
        started = subprocess.run(
            wrap(command) if wrap else command,
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if started.returncode != 0:
            raise ServiceError(f"supervisord did not start: {(started.stdout + started.stderr).strip()[-2000:]}")
        deadline = time.monotonic() + 30
        while not self.running():
            if time.monotonic() > deadline:
                log = logs_dir(self.settings) / "supervisord.log"
                tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
                raise ServiceError(f"supervisord did not answer on {self.socket}: {tail}")
            time.sleep(0.2)

    def programs(self) -> list[dict]:
        """Every program's name, state, pid, start time and the time now, as supervisord sees them."""
        return self.rpc().getAllProcessInfo()

    def qualified(self, name: str) -> str:
        """supervisord's name of a program's process: `group:name` (a numbered program's group is its
        program's name)."""
        found = [f"{p['group']}:{p['name']}" for p in self.programs() if p["name"] == name]
        return found[0] if found else name

    def info(self, name: str) -> dict:
        return self.rpc().getProcessInfo(self.qualified(name))

    def start_programs(self, names) -> None:
        """Start them together and wait until each has run for its `startsecs` (supervisord's RUNNING)."""
        rpc = self.rpc()
        for name in names:
            try:
                rpc.startProcess(self.qualified(name), False)
            except xmlrpc.client.Fault as fault:
                if "ALREADY_STARTED" not in fault.faultString:
                    raise self._failed(name, fault.faultString) from None
        deadline = time.monotonic() + 120
        while waiting := [n for n in names if self.info(n)["statename"] != "RUNNING"]:
            failed = [n for n in waiting if self.info(n)["statename"] in ("FATAL", "EXITED", "STOPPED")]
            if failed or time.monotonic() > deadline:
                raise self._failed((failed or waiting)[0], self.info((failed or waiting)[0])["statename"])
            time.sleep(0.5)

    def _failed(self, name: str, why: str) -> ServiceError:
        log = logs_dir(self.settings) / f"{name}.log"
        tail = log.read_text(errors="replace")[-2500:] if log.is_file() else ""
        return ServiceError(f"{name} did not start ({why}); {log} ends:\n{tail}")

    def stop(self) -> None:
        """Every program, in reverse priority order, each with its process group; then supervisord."""
        rpc = self.rpc()
        rpc.stopAllProcesses(True)
        pid = self.pid()
        rpc.shutdown()
        deadline = time.monotonic() + 60
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)


def program_sections() -> dict[str, str]:
    """Each process the configuration declares (numbered ones expanded), in its order, and the program it
    is one of; without the event listener: read from the file, so a program added there is known
    everywhere."""
    import configparser

    parser = configparser.RawConfigParser()
    parser.read(CONFIG)
    names = {}
    for section in parser.sections():
        if not section.startswith("program:"):
            continue
        name = section.split(":", 1)[1]
        count = int(parser.get(section, "numprocs", fallback="1"))
        first = int(parser.get(section, "numprocs_start", fallback="0"))
        pattern = parser.get(section, "process_name", fallback=name)
        names |= {pattern.replace("%(process_num)d", str(n)): name for n in range(first, first + count)}
    return names


def program_names(settings: Settings | None = None) -> list[str]:
    """The processes the configuration declares, in its order (numbered ones expanded)."""
    return list(program_sections())


def own_processes(settings: Settings) -> list:
    """Processes of this deployment that run outside supervisord's process groups (psutil): Airflow puts
    each task into a process group of its own, so a task, the flow it started and its Spark driver are
    out of reach of a group stop. They still carry the deployment's variable in their environment."""
    import psutil

    mine, found = str(team_dir(settings)), []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if process.environ().get(MARKER) == mine:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found
