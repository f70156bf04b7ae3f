"""The processes the project leaves running are found again by their records: whether one still runs,
free ports, and records written whole with mode 0600."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from nyc_taxi.core import processes
from nyc_taxi.core.processes import alive, free_port, read_record, stop_group, write_private


def test_a_process_is_alive_while_it_runs_and_not_once_it_exited_or_when_none_is_recorded():
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    assert alive(child.pid)
    child.terminate()
    deadline = time.monotonic() + 10
    while alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child.pid)  # exited: reaped here, never taken for a running process
    assert not alive(0) and not alive(-1)  # no pid recorded; as pids they would name process groups


LEAVES_A_ZOMBIE = """
import os, time
child = os.fork()
if child == 0:
    os._exit(0)  # exits at once; its parent never reaps it
print(child, flush=True)
time.sleep(60)
"""


def test_an_exited_process_nobody_reaped_is_not_alive():
    """A zombie (exited, its parent has not reaped it yet — as a program killed a moment ago, before
    supervisord sees it go) still takes signal 0, and is not alive: the heartbeat's answer and the chaos
    run's proof of a kill read it so."""
    parent = subprocess.Popen(
        [sys.executable, "-c", LEAVES_A_ZOMBIE], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        zombie = int(parent.stdout.readline())
        stat = Path(f"/proc/{zombie}/stat")
        deadline = time.monotonic() + 10
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
        os.kill(zombie, 0)  # no error: by signal 0 alone it would pass for a running process
        assert not alive(zombie)
        assert alive(parent.pid)
    finally:
        parent.kill()
        parent.wait()


HOLDS_THE_LOCK = """
import sys, time
from nyc_taxi.core.processes import machine_lock
with machine_lock(sys.argv[1], "waiting"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_a_machine_lock_is_held_by_one_process_at_a_time_and_freed_when_its_holder_is_killed():
    name = f"test-{os.getpid()}-{time.monotonic_ns()}"
    holder = subprocess.Popen([sys.executable, "-c", HOLDS_THE_LOCK, name, "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        waiter = subprocess.Popen(
            [sys.executable, "-c", HOLDS_THE_LOCK, name, "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert waiter.stderr.readline().strip() == "waiting"  # it found the lock held, and waits on it
        time.sleep(1)
        assert waiter.poll() is None
        holder.kill()  # SIGKILL: the kernel releases the lock with the process
        assert waiter.communicate(timeout=30)[0].strip() == "held" and waiter.returncode == 0
    finally:
        holder.kill()
        holder.wait()
        (Path(tempfile.gettempdir()) / f"nyc-taxi-{name}-{os.getuid()}.lock").unlink(missing_ok=True)


def test_team_up_waits_for_another_deployments_up_before_it_chooses_anything(tmp_path):
    """`team up` takes the machine's lock before it chooses a port or writes its record, and says why it
    waits (the lock is this test's own: TMPDIR gives both processes a temporary directory of their own)."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PROFILE": "team", "STATE_DIR": str(tmp_path / "state")}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDS_THE_LOCK, "team-up", "60"], env=env, stdout=subprocess.PIPE, text=True
    )
    up = None
    try:
        assert holder.stdout.readline().strip() == "held"
        up = subprocess.Popen(  # a group of its own: should it not wait, what it starts is stopped with it
            [sys.executable, "-m", "nyc_taxi_proving.cli.team", "up"],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        ready, _, _ = select.select([up.stderr], [], [], 60)
        said = up.stderr.readline() if ready else "(nothing said within 60 s)"
        assert "waiting for another deployment's `team up` on this machine" in said, said
        time.sleep(1)
        assert up.poll() is None and not (tmp_path / "state" / "team" / "services.json").exists()
    finally:
        if up is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        holder.kill()
        holder.wait()
        if (tmp_path / "state" / "team").exists():  # it did not wait: what it started goes too
            down = [sys.executable, "-m", "nyc_taxi_proving.cli.team", "down", "--delete-data"]
            subprocess.run(down, env=env, capture_output=True, timeout=300)


def test_a_record_is_private_and_whole(tmp_path):
    path = tmp_path / "team" / "service.json"
    write_private(path, {"port": 5432, "password": "x" * 64})
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_record(path) == {"port": 5432, "password": "x" * 64}
    assert read_record(tmp_path / "none.json") is None
    assert [p.name for p in path.parent.iterdir()] == ["service.json"]  # nothing half-written left beside it


FORKS_AND_DIES = """
import os, subprocess, sys, threading, time
if sys.argv[1] == "with-local-settings":
    import airflow_local_settings  # what Airflow imports in each of its processes
child = os.fork()
if child == 0:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the parent's output ends with the parent, not with this child
    os.dup2(devnull, 2)
    time.sleep(60)
    os._exit(0)
# what a thread starts (as the task starts its Spark JVM: Popen with a preexec_fn runs the fork hooks)
started = []
thread = threading.Thread(target=lambda: started.append(subprocess.Popen(
    ["sleep", "60"], preexec_fn=lambda: None, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
thread.start()
thread.join()  # the thread has ended; what it started must not end with it
time.sleep(0.5)
print(child, started[0].pid, started[0].poll() is None, flush=True)
os._exit(0)  # the component dies, with no chance to stop what it forked
"""


@pytest.mark.parametrize("local_settings", [True, False])
def test_a_process_an_airflow_component_forks_ends_when_the_component_does(local_settings):
    """With the project's airflow_local_settings (every Airflow process loads it), a forked child ends
    with its parent; without, it runs on, orphaned (what a chaos run found of the scheduler's pool).
    Either way, what a thread started outlives the thread."""
    import os
    import sys

    from nyc_taxi.airflow_adapter.environment import LOCAL_SETTINGS

    argument = "with-local-settings" if local_settings else "without"
    env = {**os.environ, "PYTHONPATH": str(LOCAL_SETTINGS)}
    done = subprocess.run([sys.executable, "-c", FORKS_AND_DIES, argument], env=env, capture_output=True, text=True)
    child, thread_child, outlived_its_thread = done.stdout.split()
    child, thread_child = int(child), int(thread_child)
    try:
        assert outlived_its_thread == "True"
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert alive(child) is not local_settings
    finally:
        for pid in (child, thread_child):
            if alive(pid):
                os.kill(pid, 9)


def test_a_free_port_is_outside_the_kernels_ephemeral_range_and_never_handed_out_twice():
    # an ephemeral port may be taken by any outgoing connection before its service listens
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [free_port() for _ in range(100)]
    assert len(set(ports)) == len(ports)
    assert [p for p in ports if low <= p <= high or p < 10000] == []
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # free indeed


def test_a_port_something_listens_on_is_never_handed_out(monkeypatch):
    with socket.socket() as taken, socket.socket() as probe:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        probe.bind(("127.0.0.1", 0))
        busy, free = taken.getsockname()[1], probe.getsockname()[1]
        probe.close()
        offered = iter([busy, free])
        monkeypatch.setattr(processes.random, "choice", lambda _: next(offered))
        assert free_port() == free


LEADER_AND_SLOW_CHILD = """
import signal, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", '''
import signal, sys, time
def shut_down(*_):
    time.sleep(1.5)  # as a scheduler finishing its shutdown
    open(sys.argv[1], "w").write("shut down")
    sys.exit(0)
signal.signal(signal.SIGTERM, shut_down)
print("ready", flush=True)
time.sleep(120)
''', sys.argv[1]], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(child.pid, flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the leader exits at once, its child still running
signal.pause()
"""
STUBBORN_CHILD = """
import signal, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(120)"], stdout=subprocess.PIPE)
child.stdout.readline()
print(child.pid, flush=True)
signal.pause()
"""


def test_a_stopped_group_is_waited_for_past_its_leader_and_what_ignores_the_signal_is_killed(tmp_path):
    # an Airflow standalone's scheduler outlived its standalone, stopped by a wait for the leader alone
    marker = tmp_path / "child-shut-down"
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER_AND_SLOW_CHILD, str(marker)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    child = int(leader.stdout.readline())
    assert stop_group(leader)  # ended on SIGTERM
    assert marker.read_text() == "shut down"  # it finished its own shutdown, and the stop waited for it
    assert not alive(child) and not processes._in_group(leader.pid)

    leader = subprocess.Popen(
        [sys.executable, "-c", STUBBORN_CHILD], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    child = int(leader.stdout.readline())
    started = time.monotonic()
    assert not stop_group(leader, seconds=2)  # had to be killed
    assert time.monotonic() - started < 15
    assert not alive(child) and not processes._in_group(leader.pid)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="/proc's tables of files are Linux's")
def test_the_processes_holding_a_pipe_are_those_given_its_write_end_and_never_this_one():
    read, write = os.pipe()
    given = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(write,))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # given neither end
    try:
        assert processes.holding_open(read) == [given.pid]  # this process holds both ends: not listed
        os.close(write)
        assert processes.holding_open(read) == [given.pid]
        given.kill()
        given.wait()
        assert processes.holding_open(read) == []
    finally:
        for process in (given, other):
            process.kill()
            process.wait()
        os.close(read)
