"""The lane's timeline says how busy the machine's cores were over each span (tests/timeline.py): the
kernel's busy ticks over all its ticks between the samples around the span, computed here by hand."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from timeline import Cores

# /proc/stat's first line: user nice system idle iowait irq softirq steal guest guest_nice
FIRST = "cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 50 2 25 400 20 1 1 0 3 0\nintr 1 2 3\n"
SECOND = "cpu  250 5 95 850 90 8 2 0 9 0\ncpu0 125 2 45 425 45 4 1 0 4 0\nintr 4 5 6\n"
THIRD = "cpu  260 5 95 1040 90 8 2 10 9 0\n"


def test_busy_is_user_nice_system_irq_softirq_steal_and_idle_and_iowait_are_not():
    assert Cores.read(FIRST) == (100 + 5 + 50 + 3 + 2 + 0, 100 + 5 + 50 + 3 + 2 + 0 + 800 + 40)


def test_a_spans_share_is_its_busy_ticks_over_all_ticks_between_the_samples_at_or_before_its_ends():
    cores = Cores()
    for at, stat in ((100.0, FIRST), (101.0, SECOND), (102.0, THIRD)):
        cores.sample(at, stat)
    first_busy, second_busy = (150 + 45 + 5) / (150 + 45 + 5 + 50 + 50), 20 / (20 + 190)  # deltas by hand
    assert cores.busy(100.0, 101.0) == pytest.approx(first_busy)
    assert cores.busy(100.4, 101.9) == pytest.approx(first_busy)  # the samples at 100 and 101
    assert cores.busy(101.0, 102.0) == pytest.approx(second_busy)
    assert cores.busy(100.0, 102.0) == pytest.approx((200 + 20) / (200 + 100 + 20 + 190))
    assert cores.busy(101.2, 101.8) is None  # no sample between: no share
    assert cores.busy(99.0, 100.5) is None  # before the first sample: the first
    assert cores.core_seconds(100.0, 102.0) == pytest.approx(220 / os.sysconf("SC_CLK_TCK"))


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the kernel's counters are Linux's")
def test_this_machines_counters_read_as_busy_within_all():
    busy, every = Cores.read(Path("/proc/stat").read_text())
    assert 0 < busy < every
