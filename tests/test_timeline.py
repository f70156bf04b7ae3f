"""The lane's timeline says how busy the machine's cores were over each span (tests/timeline.py): the
kernel's busy ticks over its available ticks between the samples nearest the span's ends, computed here by
hand; and a real pytest run, one process and two workers, prints the figures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from timeline import Cores

# /proc/stat's first line: user nice system idle iowait irq softirq steal guest guest_nice
FIRST = "cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 50 2 25 400 20 1 1 0 3 0\nintr 1 2 3\n"
SECOND = "cpu  250 5 95 850 90 8 2 0 9 0\ncpu0 125 2 45 425 45 4 1 0 4 0\nintr 4 5 6\n"
THIRD = "cpu  260 5 95 1040 90 8 2 10 9 0\n"  # 10 ticks of steal: another machine's time, neither busy nor ours


def test_busy_is_user_nice_system_irq_and_softirq_and_available_adds_idle_and_iowait():
    assert Cores.read(FIRST) == (100 + 5 + 50 + 3 + 2, 100 + 5 + 50 + 3 + 2 + 800 + 40)
    assert Cores.read(THIRD) == (260 + 5 + 95 + 8 + 2, 260 + 5 + 95 + 8 + 2 + 1040 + 90)


def test_a_spans_share_is_its_busy_ticks_over_available_ticks_between_the_samples_nearest_its_ends():
    cores = Cores()
    for at, stat in ((100.0, FIRST), (101.0, SECOND), (102.0, THIRD)):
        cores.sample(at, stat)
    first = (150 + 45 + 5) / (150 + 45 + 5 + 50 + 50)  # SECOND - FIRST, by hand
    assert cores.busy(100.0, 101.0) == pytest.approx(first)
    assert cores.busy(100.4, 100.6) == pytest.approx(first)  # the samples at 100 and 101, the nearest
    assert cores.busy(101.0, 102.0) == pytest.approx(10 / (10 + 190))
    assert cores.busy(100.0, 102.0) == pytest.approx((200 + 10) / (200 + 100 + 10 + 190))
    assert cores.busy(101.2, 101.4) is None  # one sample nearest both ends: no share
    assert cores.busy(97.0, 101.0) is None  # no sample within two seconds of the start
    assert cores.busy(100.0, 105.0) is None  # nor of the end (the sampler had stopped)
    assert cores.core_seconds(100.0, 102.0) == pytest.approx(210 / os.sysconf("SC_CLK_TCK"))
    assert cores.cores == 1  # the cpuN lines of the first sample


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the kernel's counters are Linux's")
def test_this_machines_counters_read_as_busy_within_available():
    busy, available = Cores.read(Path("/proc/stat").read_text())
    assert 0 < busy < available


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the kernel's counters are Linux's")
@pytest.mark.parametrize("workers", ["0", "2"], ids=["one process", "two workers"])
def test_a_lane_run_by_pytest_prints_the_cores_busy_over_the_lane_and_beside_a_listed_test(tmp_path, workers):
    (tmp_path / "test_spin.py").write_text(
        "import time\n\ndef test_spins_a_core_for_six_seconds():\n"
        "    end = time.monotonic() + 6\n    while time.monotonic() < end:\n        pass\n"
        "\ndef test_short():\n    pass\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not a worker of this lane
    env["PYTHONPATH"] = str(Path(__file__).parent)
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "timeline",
            "-n",
            workers,
            "-q",
            "-p",
            "no:cacheprovider",
            "test_spin.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    lane = re.search(
        r"^the machine's \d+ cores: busy (\d+)% of the lane's (\d+) s \((\d+) core-seconds\)", ran.stdout, re.M
    )
    spin = re.search(
        r"^\s+\d+\s+\d+\s+\d+\s+(\d+)%  test_spin.py::test_spins_a_core_for_six_seconds$", ran.stdout, re.M
    )
    assert lane and spin, ran.stdout[-3000:]
    cores = int(re.search(r"the machine's (\d+) cores", ran.stdout)[1])
    assert int(lane[2]) >= 6 and int(lane[3]) >= 5  # the spinning test's own core, at least
    assert int(spin[1]) >= 100 / cores - 10  # the machine's: its core at least, on an idle machine or a busy one
