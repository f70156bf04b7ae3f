"""A service of the team deployment: its supervisord programs and what it needs around them (``Service``), and
waiting for one to answer."""

from __future__ import annotations

import time
from pathlib import Path

from nyc_taxi.core.processes import ServiceError
from nyc_taxi.core.settings import Settings
from nyc_taxi_proving.deployment.supervisor import Supervisor, logs_dir


def wait_until(ready, seconds: float, what: str, log: Path | None = None) -> None:
    """Wait until ``ready()``; past ``seconds``, an error naming ``what`` and ending with its log's end."""
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2500:] if log and log.is_file() else ""
            raise ServiceError(
                f"{what} did not answer within {seconds:.0f} s{'; ' + str(log) + ' ends:' if tail else ''}\n{tail}"
            )
        time.sleep(0.5)


def answers_now(check) -> bool:
    """Whether ``check()`` answers now."""
    try:
        return bool(check())
    except Exception:  # not up yet: any client error means "not yet"
        return False


class Service:
    """A service of the deployment: its supervisord programs and what it needs around them."""

    name = ""
    key = ""  # its part of the record: ports and secrets
    programs: tuple[str, ...] = ()
    given_by = ""  # the setting that names a team's own instead
    across_hosts_only = False  # only the hosts layout runs it

    def __init__(self, settings: Settings, record: dict):
        self.settings, self.record = settings, record

    @property
    def given(self) -> bool:
        return False

    def ports(self) -> dict:
        """The ports it listens on, chosen once (first `up`) and kept."""
        return {}

    def prepare(self) -> None:
        """What must exist before its programs start."""

    def prepare_on(self, first_host: bool) -> None:
        """What must exist on a host before its programs of this service start (across hosts:
        ``first_host``, whether it is the first host that runs them)."""
        self.prepare()

    def ready(self) -> bool:
        return True

    def answers(self, program: str) -> bool:
        """Whether one of its programs answers a request now (RUNNING is not answering: a process up but
        not yet listening refuses a connection)."""
        return answers_now(self.ready)

    def after(self) -> None:
        """What needs it answering (databases, a bucket, the files other programs read)."""

    def given_up(self) -> None:
        """What `up` still does for a service the team gives."""

    def address(self) -> str:
        return ""

    def up(self, supervisor: Supervisor) -> str:
        if self.given:
            self.given_up()
            return f"{self.name}: given ({self.given_by})"
        self.prepare()
        supervisor.start_programs(self.programs)
        wait_until(
            lambda: all(self.answers(p) for p in self.programs),
            180,
            self.name,
            logs_dir(self.settings) / f"{self.programs[-1]}.log",
        )
        self.after()
        return f"{self.name}: {self.address()}"
