"""A process's descendants as the tests look for them (psutil), each read guarded: a process may end
between being listed and being read."""

from __future__ import annotations

import contextlib

import psutil


def descendants(pid: int) -> set[int]:
    """The pids of the processes ``pid`` started, and theirs (none once it has ended)."""
    with contextlib.suppress(psutil.Error):
        return {child.pid for child in psutil.Process(pid).children(recursive=True)}
    return set()


def java_descendants(pid: int) -> set[int]:
    """The Java processes among them: the JVMs of Spark sessions started under ``pid``."""
    found = set()
    for child in descendants(pid):
        with contextlib.suppress(psutil.Error):  # a process that ended meanwhile
            if psutil.Process(child).name() == "java":
                found.add(child)
    return found
