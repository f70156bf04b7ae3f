"""Long work says how it goes (``core/progress``): a task's and a flow step's end reach the person who
started the demo or a backtest as they happen, through the tools' logging in between. The demo's own
output: tests/test_lineage.py::test_the_demo_says_each_task_and_each_flow_step_as_it_ends."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("split", ["Task fin|ished", "Task |finished"], ids=["mid-word", "after a space"])
def test_a_step_end_the_run_writes_in_two_halves_is_read_as_one_line(tmp_path, split):
    """The training task reads a flow run's log as the run writes it: a step's end the run writes in two halves
    (the second only once the first has been read) is one line, so it is never missed. Metaflow's own reader
    (``stream_log``) gives the halves stripped, and one split after a space looks whole."""
    import asyncio

    from metaflow.runner.subprocess_manager import SubprocessManager

    from nyc_taxi.airflow_adapter.operators import log_lines

    first, rest = split.split("|")
    child = (
        "import os, sys, time\n"
        f"sys.stdout.write('[1796/compute_actuals/2 (pid 1)] {first}'); sys.stdout.flush()\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.01)\n"
        f"sys.stdout.write('{rest} successfully.\\n\\nno newline at the end')\n"
    )

    async def read(metaflows: bool) -> list[str]:
        gate = tmp_path / f"half-read-{metaflows}"
        manager = SubprocessManager()
        command = manager.get(await manager.async_run_command([sys.executable, "-c", child, str(gate)]))
        log = Path(command.log_files["stdout"])
        if metaflows:
            lines = []
            async for _, line in command.stream_log("stdout"):
                gate.touch()  # Metaflow's reader gave the half
                lines.append(line)
            return lines
        asked = []

        def ended() -> bool:  # asked before each read: asked twice since the half was written, it was read
            if log.stat().st_size > 0:
                asked.append(True)
                if len(asked) == 2:
                    gate.touch()
            return command.process.returncode is not None

        return [line async for line in log_lines(str(log), ended)]

    halves = asyncio.run(read(metaflows=True))
    assert halves[:2] == [f"[1796/compute_actuals/2 (pid 1)] {first}".rstrip(), f"{rest} successfully."]
    lines = asyncio.run(read(metaflows=False))
    assert lines == [f"[1796/compute_actuals/2 (pid 1)] {first}{rest} successfully.", "", "no newline at the end"]
    assert STEP_FINISHED.search(lines[0])[1] == "compute_actuals"
