"""How `bash run airflow standalone` stops its components (``airflow_adapter/standalone.py``), on Airflow's
own ``SubCommand`` threads running a stand-in ``airflow`` (first on their PATH): a component that ends on
the Ctrl-C it received itself is sent nothing more; one still running at the stop's deadline is sent
SIGTERM, and one that ignores that too is killed with its children (one that holds the component's
output would hold the standalone); one whose process starts after the stop began is waited for and
stopped all the same; a Ctrl-C before Airflow's own loop stops the components already started; a child
that outlives its component and holds its output open is found by that pipe and stopped, even when the
component had ended before the stop began; each ending is said; a later Ctrl-C is said and ignored."""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.cli.commands import standalone_command
from airflow.cli.commands.standalone_command import SubCommand

from nyc_taxi.airflow_adapter import standalone
from nyc_taxi.airflow_adapter.standalone import Interrupts, LocalStandalone, _Components
from nyc_taxi.core.processes import alive

pytestmark = pytest.mark.guards  # Airflow's SubCommand and StandaloneCommand.run, as the standalone wraps them

GRACE, KILL_AFTER = 4, 2  # short, yet long enough for a loaded machine's processes to end on a signal

# the stand-in: `airflow <behaviour> [flags]`; it says "up", notes when SIGTERM reached it, and sleeps
STAND_IN = textwrap.dedent(
    """\
    import os, signal, subprocess, sys, time
    behaviour, notes = sys.argv[1], os.environ["NOTES"]
    if behaviour in ("ends-on-ctrl-c", "leaves-a-child", "leaves-a-stubborn-child"):  # ends a second later, as a shutdown does
        def sigint(signum, frame):
            time.sleep(1)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        signal.signal(signal.SIGINT, sigint)
    else:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    def sigterm(signum, frame):
        with open(os.path.join(notes, f"sigterm-{os.getpid()}"), "w") as note:
            note.write(repr(time.time()))
        if behaviour != "ignores-both":
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
    signal.signal(signal.SIGTERM, sigterm)
    if behaviour in ("ignores-both", "leaves-a-child", "leaves-a-stubborn-child"):  # it holds the component's output
        code = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"
        child = subprocess.Popen([sys.executable, "-c", STUBBORN if behaviour == "leaves-a-stubborn-child" else code])
        print(f"child {child.pid}", flush=True)
    print("up", flush=True)
    time.sleep(60)
    """
)


# the stubborn child: it ignores SIGTERM too, and starts one that holds no output and ignores SIGTERM
STUBBORN = textwrap.dedent(
    """\
    import signal, subprocess, sys, time
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    ignoring = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    grandchild = subprocess.Popen([sys.executable, "-c", ignoring], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"grandchild {grandchild.pid}", flush=True)
    time.sleep(60)
    """
)


@pytest.fixture
def env(tmp_path, monkeypatch) -> dict:
    monkeypatch.setattr(standalone, "STOP_GRACE_SECONDS", GRACE)
    bin_dir, notes = tmp_path / "bin", tmp_path / "notes"
    bin_dir.mkdir()
    notes.mkdir()
    stand_in = bin_dir / "airflow"
    stand_in.write_text(f"#!{sys.executable}\nSTUBBORN = {STUBBORN!r}\n{STAND_IN}")
    stand_in.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NOTES": str(notes)}


def _up(parent, names) -> None:
    deadline = time.monotonic() + 30
    while {name for name, line in list(parent.output_queue) if line == b"up\n"} < set(names):
        assert time.monotonic() < deadline, list(parent.output_queue)
        time.sleep(0.05)


def _stopped(env: dict, behaviours: dict[str, str], capsys, ended_first=False) -> tuple[dict, float, list[str], list]:
    """Components started and up, then Ctrl-C (the standalone's, and each component's own), then Airflow's
    stop of each in turn (``ended_first``: once every component's process has ended) and its join: the
    components, when the Ctrl-C came, what the standalone said, and what the components printed."""
    parent = SimpleNamespace(output_queue=collections.deque())
    interrupts = Interrupts()
    components = _Components(interrupts.deadline, kill_after=KILL_AFTER)
    for name, behaviour in behaviours.items():
        components[name] = SubCommand(parent, name=name, command=[behaviour], env=env)
        components[name].start()
    _up(parent, behaviours)
    ctrl_c_at = time.time()  # on the wall clock, which the stand-ins' notes use
    with pytest.raises(KeyboardInterrupt):
        interrupts(signal.SIGINT, None)
    for component in components.values():
        component.process.send_signal(signal.SIGINT)  # the terminal's Ctrl-C reaches every component
    for component in components.values() if ended_first else ():
        component.process.wait(20)
    for component in components.values():  # as Airflow's standalone does
        component.stop()
    for component in components.values():
        component.join(20)
        assert not component.is_alive()
    return components, ctrl_c_at, capsys.readouterr().out.splitlines(), list(parent.output_queue)


def _gone(pid: int, seconds: float = 10) -> bool:
    """Whether ``pid`` has ended within ``seconds``: a killed process closes its files a moment before it
    is gone, so the join that saw its output close can come first."""
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def _sigterm_at(env: dict, pid: int) -> float | None:
    note = Path(env["NOTES"]) / f"sigterm-{pid}"
    return float(note.read_text()) if note.exists() else None


def test_a_component_that_ends_on_its_own_ctrl_c_is_sent_nothing_more(env, capsys):
    components, _, said, _ = _stopped(env, {"scheduler": "ends-on-ctrl-c", "triggerer": "ends-on-ctrl-c"}, capsys)
    for component in components.values():
        assert component.process.returncode == -signal.SIGINT
        assert _sigterm_at(env, component.process.pid) is None
    assert said == ["standalone | scheduler ended: signal 2", "standalone | triggerer ended: signal 2"]


def test_one_still_running_at_the_deadline_is_sent_sigterm_then_and_said(env, capsys):
    behaviours = {"scheduler": "ends-on-ctrl-c", "api-server": "ignores-ctrl-c"}
    components, ctrl_c_at, said, _ = _stopped(env, behaviours, capsys)
    late = components["api-server"].process
    assert late.returncode == -signal.SIGTERM and components["scheduler"].process.returncode == -signal.SIGINT
    assert ctrl_c_at + GRACE - 0.2 <= _sigterm_at(env, late.pid) <= ctrl_c_at + GRACE + 3  # at the deadline
    assert said == [
        "standalone | api-server still runs at the stop's deadline: SIGTERM",
        "standalone | scheduler ended: signal 2",
        "standalone | api-server ended: signal 15",
    ]


def test_one_that_ignores_sigterm_too_is_killed_with_its_children_and_said(env, capsys):
    components, _, said, printed = _stopped(env, {"dag-processor": "ignores-both"}, capsys)
    process = components["dag-processor"].process
    assert process.returncode == -signal.SIGKILL and _sigterm_at(env, process.pid) is not None
    (child,) = [int(line.split()[1]) for _, line in printed if line.startswith(b"child ")]
    assert _gone(child)  # it held the component's output: the join above ended only because it died
    assert said == [
        "standalone | dag-processor still runs at the stop's deadline: SIGTERM",
        "standalone | dag-processor still runs 2 s after SIGTERM: SIGKILL, and 1 it started",
        "standalone | dag-processor ended: signal 9",
    ]


@pytest.mark.parametrize(
    "behaviour, signals",
    [("leaves-a-child", ["SIGTERM"]), ("leaves-a-stubborn-child", ["SIGTERM", "SIGKILL"])],
    ids=["ending on SIGTERM", "ignoring it"],
)
def test_a_child_that_outlives_its_component_and_holds_its_output_is_found_by_that_pipe_and_stopped(
    env, capsys, behaviour, signals
):
    """The component has ended before the stop begins (a record of its children taken then found none),
    and the child holding its output is found, it alone, by that pipe; SIGKILL takes its children too."""
    neighbour = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # holds no component's output
    try:
        components, _, said, printed = _stopped(env, {"scheduler": behaviour}, capsys, ended_first=True)
        assert neighbour.poll() is None
    finally:
        neighbour.kill()
    assert components["scheduler"].process.returncode == -signal.SIGINT  # it ended on its own Ctrl-C
    (child,) = [int(line.split()[1]) for _, line in printed if line.startswith(b"child ")]
    assert _gone(child)  # the component's thread ended above: only because the child no longer held its output
    assert said[0] == "standalone | scheduler ended: signal 2" and len(said) == 1 + len(signals), said
    for line, signal_name in zip(said[1:], signals, strict=True):
        held = re.fullmatch(
            rf"standalone \| scheduler's output is held open by (.+), left running: {signal_name}", line
        )
        assert held and [int(p.split()[0]) for p in held[1].split(", ")] == [child], said  # the child alone
    grandchildren = [int(line.split()[1]) for _, line in printed if line.startswith(b"grandchild ")]
    assert len(grandchildren) == (1 if behaviour == "leaves-a-stubborn-child" else 0), printed
    for grandchild in grandchildren:  # it held no output: gone only because SIGKILL took the child's children
        assert _gone(grandchild)


def test_an_output_held_by_no_process_it_can_read_is_said_with_what_to_kill(env, capsys, monkeypatch):
    monkeypatch.setattr(standalone, "_holding", lambda stream: [])  # as /proc of another user's process
    parent = SimpleNamespace(output_queue=collections.deque())
    interrupts = Interrupts()
    components = _Components(interrupts.deadline, kill_after=KILL_AFTER)
    components["scheduler"] = SubCommand(parent, name="scheduler", command=["leaves-a-child"], env=env)
    components["scheduler"].start()
    _up(parent, ["scheduler"])
    with pytest.raises(KeyboardInterrupt):
        interrupts(signal.SIGINT, None)
    components["scheduler"].process.send_signal(signal.SIGINT)
    components["scheduler"].stop()  # returns: Airflow's join that follows would wait for the child
    (child,) = [int(line.split()[1]) for _, line in parent.output_queue if line.startswith(b"child ")]
    os.kill(child, signal.SIGKILL)
    components["scheduler"].join(20)
    assert capsys.readouterr().out.splitlines() == [
        "standalone | scheduler ended: signal 2",
        "standalone | scheduler's output is still open, held by no process this user can read: "
        f"end this standalone with kill {os.getpid()}, then bash run spark-server stop",
    ]


def test_one_whose_process_starts_after_the_stop_began_is_waited_for_and_stopped(env, capsys, monkeypatch):
    popen = subprocess.Popen

    def slow_popen(*args, **kwargs):  # the thread's start of its process, after the stop's deadline
        time.sleep(GRACE + 1)
        return popen(*args, **kwargs)

    parent = SimpleNamespace(output_queue=collections.deque())
    interrupts = Interrupts()
    components = _Components(interrupts.deadline, kill_after=KILL_AFTER)
    components["triggerer"] = SubCommand(parent, name="triggerer", command=["ignores-ctrl-c"], env=env)
    monkeypatch.setattr(standalone_command.subprocess, "Popen", slow_popen)
    components["triggerer"].start()
    with pytest.raises(KeyboardInterrupt):
        interrupts(signal.SIGINT, None)
    components["triggerer"].stop()
    components["triggerer"].join(20)
    assert components["triggerer"].process.returncode == -signal.SIGTERM
    assert "standalone | triggerer ended: signal 15" in capsys.readouterr().out


def test_a_ctrl_c_before_airflows_own_loop_stops_the_components_already_started(env, monkeypatch):
    class StandIn(SubCommand):  # Airflow's component on the stand-in; the Ctrl-C lands at the API server's start
        def __init__(self, parent, name, command, env):
            super().__init__(parent, name, ["ignores-ctrl-c"], env)

        def start(self):
            if self.name == "api-server":
                raise KeyboardInterrupt
            super().start()

    monkeypatch.setattr(standalone_command, "SubCommand", StandIn)
    monkeypatch.setattr(LocalStandalone, "calculate_env", lambda self: env)
    monkeypatch.setattr(LocalStandalone, "find_user_info", lambda self: None)
    monkeypatch.setattr(LocalStandalone, "initialize_database", lambda self: None)
    command = LocalStandalone(Interrupts())
    with pytest.raises(KeyboardInterrupt):
        command.run()
    ran = {name: component for name, component in command.subcommands.items() if component.process is not None}
    assert set(ran) == {"scheduler", "dag-processor"}  # Airflow starts them in this order
    assert all(component.process.returncode == -signal.SIGTERM for component in ran.values())
    assert not any(component.is_alive() for component in command.subcommands.values())


def test_a_later_ctrl_c_is_said_and_ignored(capfd):
    interrupts = Interrupts()
    with pytest.raises(KeyboardInterrupt):
        interrupts(signal.SIGINT, None)
    first = interrupts.first
    interrupts(signal.SIGINT, None)  # uv's forwarded copy, or an impatient second Ctrl-C: no exception
    assert interrupts.first == first
    assert "stopping already: Ctrl-C again is ignored" in capfd.readouterr().err
