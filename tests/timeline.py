"""The lane's timeline, printed at its end: each test's start, end and worker (its fixtures' set-up and
tear-down with it), so the next slow test names itself and a worker left idle shows (docs/testing.md).
Read from the reports pytest sends each worker's results in: the times are the workers' own clocks, on
one machine. Beside each span, how busy the machine's cores were meanwhile (every process, the tests'
deployments too: read from the kernel's counters each second), so a lane bound by its cores says so."""

from __future__ import annotations

import os
import re
import threading
import time
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

SHOWN_FROM = 5.0  # seconds: shorter tests are counted, not listed
PROC_STAT = Path("/proc/stat")
SAMPLE_EVERY = 1.0  # seconds
NEAR = 2 * SAMPLE_EVERY  # a moment with no sample this near (the sampler stopped) has no figure

_spans: dict[str, list] = {}  # nodeid -> [worker, start, stop]


@dataclass
class Cores:
    """The machine's CPU time as the kernel counts it (``/proc/stat``'s ``cpu`` line, every core summed):
    samples of (wall clock, busy ticks, available ticks), and the busy share between two moments, from
    the samples nearest to each."""

    samples: list[tuple[float, int, int]] = field(default_factory=list)
    cores: int = 0  # the cores the ``cpu`` line sums (its ``cpuN`` lines)

    @staticmethod
    def read(stat: str) -> tuple[int, int]:
        """(busy, available) ticks of the ``cpu`` line: busy is this machine's processes and interrupts
        (guest time is in user time already); idle and waiting for I/O are available, not busy; time a
        hypervisor gave another machine (steal) is neither."""
        user, nice, system, idle, iowait, irq, softirq = (int(t) for t in stat.split("\n", 1)[0].split()[1:8])
        busy = user + nice + system + irq + softirq
        return busy, busy + idle + iowait

    def sample(self, at: float, stat: str) -> None:
        self.samples.append((at, *self.read(stat)))
        self.cores = self.cores or sum(1 for line in stat.splitlines() if re.match(r"cpu\d", line))

    def _near(self, moment: float) -> tuple[float, int, int] | None:
        index = bisect_left(self.samples, moment, key=lambda s: s[0])
        around = self.samples[max(index - 1, 0) : index + 1]
        nearest = min(around, key=lambda s: abs(s[0] - moment), default=None)
        return nearest if nearest is not None and abs(nearest[0] - moment) <= NEAR else None

    def busy(self, start: float, stop: float) -> float | None:
        """The share of the cores busy from ``start`` to ``stop`` (None: no sample near either end, or one
        sample nearest both)."""
        first, last = self._near(start), self._near(stop)
        if first is None or last is None or last[2] <= first[2]:
            return None
        return min((last[1] - first[1]) / (last[2] - first[2]), 1.0)  # the kernel's I/O wait may step back

    def core_seconds(self, start: float, stop: float) -> float | None:
        first, last = self._near(start), self._near(stop)
        return (last[1] - first[1]) / os.sysconf("SC_CLK_TCK") if first and last else None


_cores = Cores()
_sampling = threading.Event()  # set: stop sampling
_sampler: threading.Thread | None = None


def _sample_every_second() -> None:
    while not _sampling.wait(SAMPLE_EVERY):
        _cores.sample(time.time(), PROC_STAT.read_text())


def pytest_sessionstart(session):
    # the controller alone (xdist's workers report to it); a machine without the kernel's counters shows none
    global _sampler
    if os.environ.get("PYTEST_XDIST_WORKER") or not PROC_STAT.exists():
        return
    _cores.sample(time.time(), PROC_STAT.read_text())
    _sampler = threading.Thread(target=_sample_every_second, daemon=True, name="timeline")
    _sampler.start()


def pytest_runtest_logreport(report):
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    span = _spans.setdefault(report.nodeid, [gateway.id if gateway else "main", report.start, report.stop])
    span[1], span[2] = min(span[1], report.start), max(span[2], report.stop)


def _busy(start: float, stop: float) -> str:
    share = _cores.busy(start, stop)
    return f"{share:4.0%}" if share is not None else "   -"


def pytest_terminal_summary(terminalreporter):
    if not _spans:
        return
    if _sampler is not None:
        _sampling.set()
        _sampler.join(5)
        _cores.sample(time.time(), PROC_STAT.read_text())
    began = min(start for _, start, _ in _spans.values())
    by_worker = defaultdict(list)
    for nodeid, (worker, start, stop) in _spans.items():
        by_worker[worker].append((start, stop, nodeid))
    ended = max(stop for spans in by_worker.values() for _, stop, _ in spans)
    terminalreporter.section("timeline: start, end and seconds of each test, by worker; the cores busy meanwhile")
    if _cores.busy(began, ended) is not None:
        terminalreporter.write_line(
            f"the machine's {_cores.cores} cores: busy {_busy(began, ended).strip()} of the lane's "
            f"{ended - began:.0f} s ({_cores.core_seconds(began, ended):.0f} core-seconds), every process counted"
        )
    for worker, spans in sorted(by_worker.items()):
        spans.sort()
        busy = sum(stop - start for start, stop, _ in spans)
        last = max(stop for _, stop, _ in spans)
        terminalreporter.write_line(
            f"{worker}: {len(spans)} tests, busy {busy:.0f} s, done at {last - began:.0f} s of {ended - began:.0f} s "
            f"(idle at the end {ended - last:.0f} s)"
        )
        short = [s for s in spans if s[1] - s[0] < SHOWN_FROM]
        for start, stop, nodeid in spans:
            if stop - start >= SHOWN_FROM:
                terminalreporter.write_line(
                    f"  {start - began:7.0f} {stop - began:7.0f} {stop - start:6.0f} {_busy(start, stop)}  {nodeid}"
                )
        if short:
            terminalreporter.write_line(
                f"  and {len(short)} tests under {SHOWN_FROM:.0f} s each ({sum(b - a for a, b, _ in short):.0f} s)"
            )
