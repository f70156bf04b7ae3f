"""Progress of long work, for the person waiting on it: a task's or a flow step's end, said as it happens.

A process deep in the work (an Airflow task, the flow it runs) says ``progress(text)``: a line on file
descriptor 2 itself, past the logging and redirections of the tools in between, marked ``progress:``.
The command a person started (the demo, a backtest) runs the work with ``run_showing_progress``, which
prints those lines as they come and keeps everything else for when something fails.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading

MARK = "progress: "


def progress(text: str) -> None:
    """Say ``text`` as progress (on fd 2: a task's own stderr is its log, this is the process's)."""
    with contextlib.suppress(OSError):  # no stderr to write to: progress is never worth failing the work
        os.write(2, f"{MARK}{text}\n".encode())


def run_showing_progress(args: list[str], env: dict, indent: str = "      ") -> subprocess.CompletedProcess:
    """``args`` run to its end as ``subprocess.run(..., capture_output=True, text=True)`` would, its
    progress lines printed as they arrive (without their mark, indented)."""
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said: list[str] = []

    def read_stderr() -> None:
        for line in process.stderr:
            said.append(line)
            if (at := line.find(MARK)) >= 0:
                print(indent + line[at + len(MARK) :].rstrip(), flush=True)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    out = process.stdout.read()
    process.wait()
    reader.join()
    return subprocess.CompletedProcess(args, process.returncode, out, "".join(said))
