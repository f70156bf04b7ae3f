"""How `bash run airflow standalone` stops its components (``airflow_adapter/standalone.py``): a component
that ends on the Ctrl-C it received itself is sent nothing more; one still running at the stop's deadline
is sent SIGTERM, and SIGKILL if that does not end it, each said; one whose process had not started yet
when the stop began is waited for and stopped all the same. Each component here is a real process
started by a thread, as Airflow's standalone starts its own."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from nyc_taxi.airflow_adapter.standalone import Interrupts, _Components

ENDS_ON_CTRL_C = "import time; print('up', flush=True); time.sleep(60)"
IGNORES_CTRL_C = (
    "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
)
IGNORES_BOTH = (
    "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('up', flush=True); time.sleep(60)"
)


class Component(threading.Thread):
    """Airflow's SubCommand as the standalone sees it: ``command``, ``process`` (set once its thread started
    it), ``stop()`` (SIGTERM), its output read until the process ends."""

    def __init__(self, script: str, start_after: float = 0.0):
        super().__init__()
        self.command, self.process, self.terminated = ["component"], None, False
        self._script, self._start_after, self.up = script, start_after, threading.Event()

    def run(self):
        time.sleep(self._start_after)
        self.process = subprocess.Popen([sys.executable, "-c", self._script], stdout=subprocess.PIPE)
        self.process.stdout.readline()
        self.up.set()
        self.process.stdout.read()

    def stop(self):
        self.terminated = True
        self.process.terminate()


def _stopped(script: str, ctrl_c: bool, capsys, start_after: float = 0.0) -> tuple[Component, str, float]:
    """A component started, then Ctrl-C (to it, as the terminal's reaches every component) and the
    standalone's stop with a 1 s deadline: the component, what the standalone said, the stop's seconds."""
    interrupts = Interrupts()
    components = _Components(interrupts.deadline, kill_after=1)
    component = Component(script, start_after)
    components["scheduler"] = component
    component.start()
    if not start_after:
        assert component.up.wait(30)
    with pytest.raises(KeyboardInterrupt):
        interrupts(signal.SIGINT, None)  # the standalone's own Ctrl-C: the stop's clock starts
    if ctrl_c:
        component.process.send_signal(signal.SIGINT)
    started = time.monotonic()
    components["scheduler"].stop()
    component.join(10)
    assert not component.is_alive()
    component.process.wait(10)
    return component, capsys.readouterr().out, time.monotonic() - started


@pytest.fixture(autouse=True)
def _short_grace(monkeypatch):
    monkeypatch.setattr("nyc_taxi.airflow_adapter.standalone.STOP_GRACE_SECONDS", 1)


def test_a_component_that_ends_on_its_own_ctrl_c_is_sent_nothing_more(capsys):
    component, said, _ = _stopped(ENDS_ON_CTRL_C, ctrl_c=True, capsys=capsys)
    assert component.process.returncode == -signal.SIGINT  # its own Ctrl-C, not a signal of ours
    assert not component.terminated and said == ""


def test_one_still_running_at_the_deadline_is_sent_sigterm_and_said(capsys):
    component, said, seconds = _stopped(IGNORES_CTRL_C, ctrl_c=True, capsys=capsys)
    assert component.terminated and component.process.returncode == -signal.SIGTERM
    assert said == "standalone | scheduler has not ended on Ctrl-C: SIGTERM\n"
    assert 0.8 < seconds < 5  # at the deadline, not before


def test_one_that_ignores_sigterm_too_is_killed_and_said(capsys):
    component, said, _ = _stopped(IGNORES_BOTH, ctrl_c=True, capsys=capsys)
    assert component.terminated and component.process.returncode == -signal.SIGKILL
    assert said.splitlines() == [
        "standalone | scheduler has not ended on Ctrl-C: SIGTERM",
        "standalone | scheduler has not ended 1 s after SIGTERM: SIGKILL",
    ]


def test_one_whose_process_starts_after_the_stop_began_is_waited_for_and_stopped(capsys):
    component, _, _ = _stopped(IGNORES_CTRL_C, ctrl_c=False, capsys=capsys, start_after=0.5)
    assert component.terminated and component.process.returncode == -signal.SIGTERM


def test_a_later_ctrl_c_is_said_and_ignored(capfd):
    interrupts = Interrupts()
    with pytest.raises(KeyboardInterrupt):
        interrupts(signal.SIGINT, None)
    first = interrupts.first
    interrupts(signal.SIGINT, None)  # uv's forwarded copy, or an impatient second Ctrl-C: no exception
    assert interrupts.first == first
    assert "stopping already: Ctrl-C again is ignored" in capfd.readouterr().err
