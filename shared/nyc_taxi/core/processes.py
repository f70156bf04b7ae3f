"""Processes this project leaves running (the warm Spark server; the team deployment's services run
under supervisord) and the records that find them again: whether a process still runs, stopping a
process group whole, free ports, and records written whole with mode 0600 (they may hold a secret)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


class ServiceError(RuntimeError):
    """A service could not be started or reached; the message names what is missing."""


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def free_port() -> int:
    """A port free now, not handed out before by this process, and outside the kernel's ephemeral range.
    A port the kernel picks (bind to 0) is an ephemeral one, and an outgoing connection of any process
    may take it before the service it is meant for listens: a SeaweedFS gateway starting found its
    port so taken, and its deployment did not come up."""
    low, high = _ephemeral_range()
    # below the range where it leaves room, else above it; never the well-known ports under 10000
    choices = range(10000, low) if low - 10000 >= 5000 else range(high + 1, 65536)
    for _ in range(200):
        port = random.choice(choices)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise ServiceError(f"no free port on 127.0.0.1 in {choices.start}-{choices.stop - 1} after 200 tries")


def _ephemeral_range() -> tuple[int, int]:
    with contextlib.suppress(OSError, ValueError):
        low, high = map(int, EPHEMERAL_RANGE.read_text().split())
        return low, high
    return 32768, 60999  # Linux's default


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def alive(pid: int) -> bool:
    """Whether a process runs (an exited child of this process is reaped; an exited process nobody
    reaped — a container's first process may not — is a zombie, not alive)."""
    if pid <= 0:  # no process recorded: 0 and -1 would name process groups
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or another user's: not ours to use
        return False
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def lower_priority(niceness: int) -> None:
    """Run this process (and what it starts) at ``niceness`` at least: a level, not a step, so that work
    sharing a process (tasks of one dag.test()) does not add its levels up."""
    if os.getpriority(os.PRIO_PROCESS, 0) < niceness:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)


def stop_group(process: subprocess.Popen, first: int = signal.SIGTERM, seconds: float = 60) -> bool:
    """Stop ``process`` (started with ``start_new_session``) and every process in its group: ``first``
    to the group, SIGKILL to what still runs ``seconds`` later. Waits for the group, not only its
    leader: an Airflow standalone exits at SIGTERM while its scheduler is still shutting down, and a
    wait for the leader alone left that scheduler running as an orphan. Whether the group ended on
    ``first`` (False: it had to be killed)."""
    group = process.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, first)
    deadline = time.monotonic() + seconds
    while (process.poll() is None or _in_group(group)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if process.poll() is None or _in_group(group):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        process.wait()
        deadline = time.monotonic() + 10
        while _in_group(group) and time.monotonic() < deadline:
            time.sleep(0.1)
        return False
    return True


def _in_group(group: int) -> list[int]:
    """The processes of process group ``group`` that still run (a zombie nobody reaped does not)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError):
                if os.getpgid(int(entry.name)) == group and alive(int(entry.name)):
                    found.append(int(entry.name))
    return found


def holding_open(fd: int) -> list[int]:
    """The other processes that hold open the pipe this process has open as ``fd`` (a pipe: /proc names a
    regular file by its path, which other processes may have opened on their own): Linux's /proc names a
    pipe the same in each holder's table of files (none found elsewhere, nor among processes whose
    table this user may not read). This process is known by /proc's own name for it, so another pid
    namespace's numbering does not make it a holder of its own files."""
    try:
        target, me = os.readlink(f"/proc/self/fd/{fd}"), os.readlink("/proc/self")
    except OSError:  # no /proc, or the file closed meanwhile
        return []
    holders = []
    for files in Path("/proc").glob("[0-9]*/fd"):
        if files.parent.name != me:
            with contextlib.suppress(OSError):
                if any(_link(f) == target for f in files.iterdir()):
                    holders.append(int(files.parent.name))
    return holders


def _link(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except OSError:  # closed meanwhile
        return None


def write_private(path: Path, value: dict) -> None:
    write_private_text(path, json.dumps(value))


def write_private_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(path.with_suffix(".tmp"), path)


def read_record(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


@contextlib.contextmanager
def machine_lock(name: str, waiting: str | None = None):
    """Held by one process of this user on this machine at a time (``flock`` on a file of the user's own in
    the temporary directory, released when the process ends, however it ends): two deployments of
    different state directories that start at once would each choose free ports, and could take one
    before the other's service listens on it. ``waiting``: said on stderr when another process holds it."""
    import fcntl
    import tempfile

    path = Path(tempfile.gettempdir()) / f"nyc-taxi-{name}-{os.getuid()}.lock"
    descriptor = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting:
                print(waiting, file=sys.stderr, flush=True)
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing the last descriptor releases the lock


def die_with_parent() -> None:
    """Have Linux SIGKILL this process when the process that started it ends (``prctl`` with
    ``PR_SET_PDEATHSIG``): a task whose Airflow supervisor was killed with its worker, or a flow step
    whose Metaflow runtime was, does not run on as an orphan nobody waits for. A parent already gone
    when this is asked ends this process at once."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)
