"""The lane's timeline, printed at its end: each test's start, end and worker (its fixtures' set-up and
tear-down with it), so the next slow test names itself and a worker left idle shows (docs/testing.md).
Read from the reports pytest sends each worker's results in: the times are the workers' own clocks, on
one machine."""

from __future__ import annotations

from collections import defaultdict

SHOWN_FROM = 5.0  # seconds: shorter tests are counted, not listed

_spans: dict[str, list] = {}  # nodeid -> [worker, start, stop]


def pytest_runtest_logreport(report):
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    span = _spans.setdefault(report.nodeid, [gateway.id if gateway else "main", report.start, report.stop])
    span[1], span[2] = min(span[1], report.start), max(span[2], report.stop)


def pytest_terminal_summary(terminalreporter):
    if not _spans:
        return
    began = min(start for _, start, _ in _spans.values())
    by_worker = defaultdict(list)
    for nodeid, (worker, start, stop) in _spans.items():
        by_worker[worker].append((start - began, stop - began, nodeid))
    ended = max(stop for spans in by_worker.values() for _, stop, _ in spans)
    terminalreporter.section("timeline: start, end and seconds of each test, by worker")
    for worker, spans in sorted(by_worker.items()):
        spans.sort()
        busy = sum(stop - start for start, stop, _ in spans)
        last = max(stop for _, stop, _ in spans)
        terminalreporter.write_line(
            f"{worker}: {len(spans)} tests, busy {busy:.0f} s, done at {last:.0f} s of {ended:.0f} s "
            f"(idle at the end {ended - last:.0f} s)"
        )
        short = [s for s in spans if s[1] - s[0] < SHOWN_FROM]
        for start, stop, nodeid in spans:
            if stop - start >= SHOWN_FROM:
                terminalreporter.write_line(f"  {start:7.0f} {stop:7.0f} {stop - start:6.0f}  {nodeid}")
        if short:
            terminalreporter.write_line(
                f"  and {len(short)} tests under {SHOWN_FROM:.0f} s each ({sum(b - a for a, b, _ in short):.0f} s)"
            )
