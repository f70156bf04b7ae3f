"""Long work says how it goes (``core/progress``): a task's and a flow step's end reach the person who
started the demo or a backtest as they happen, through the tools' logging in between. The demo's own
output: tests/test_lineage.py::test_the_demo_says_each_task_and_each_flow_step_as_it_ends."""

from __future__ import annotations

import sys
import time

from nyc_taxi.airflow_adapter.operators import STEP_FINISHED
from nyc_taxi.core.progress import MARK, run_showing_progress


def test_progress_lines_are_printed_as_they_come_and_everything_is_kept(capsys):
    child = (
        "import os, sys, time\n"
        "print('result line')\n"
        "sys.stderr.write('a task log line\\n'); sys.stderr.flush()\n"
        f"os.write(2, b'[2024-01-01] INFO - {MARK}first: success\\n')\n"
        "time.sleep(1.0)\n"
        f"os.write(2, b'{MARK}second: done\\n')\n"
        "sys.exit(3)\n"
    )
    started = time.monotonic()
    done = run_showing_progress([sys.executable, "-c", child], env={"PATH": "/usr/bin:/bin"}, indent="  ")
    assert time.monotonic() - started >= 1.0
    assert done.returncode == 3 and done.stdout == "result line\n"
    assert "a task log line" in done.stderr and f"{MARK}second: done" in done.stderr
    assert capsys.readouterr().out == "  first: success\n  second: done\n"


def test_a_flow_steps_end_is_read_from_metaflows_own_line():
    ran = "2026-12-01 23:38:12.417 [1796168299312263/compute_actuals/2 (pid 40122)] Task finished successfully."
    cloned = "2026-12-01 23:40:01.002 [1796168299312999/start/1] Task finished successfully."
    assert STEP_FINISHED.search(ran)[1] == "compute_actuals" and STEP_FINISHED.search(cloned)[1] == "start"
    assert STEP_FINISHED.search("[1796/compute_actuals/2 (pid 40122)] Task is starting.") is None
