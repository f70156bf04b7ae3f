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


def test_a_step_end_metaflow_reads_in_two_halves_is_one_line_again(tmp_path):
    """Metaflow's own log reader (``stream_log``, what the training task relays) returns half a line the flow is
    still writing, and its rest at the next read: the relay joins them, so a step's end is never missed. The
    child writes the rest only once the reader has read the half."""
    import asyncio

    from metaflow.runner.subprocess_manager import SubprocessManager

    from nyc_taxi.airflow_adapter.operators import whole_lines

    child = (
        "import os, sys, time\n"
        "sys.stdout.write('[1796/compute_actuals/2 (pid 1)] Task fin'); sys.stdout.flush()\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.01)\n"
        "sys.stdout.write('ished successfully.\\n\\nno newline at the end')\n"
    )

    async def read(joined: bool) -> list[str]:
        gate = tmp_path / f"half-read-{joined}"
        manager = SubprocessManager()
        command = manager.get(await manager.async_run_command([sys.executable, "-c", child, str(gate)]))

        async def parts():
            async for part in command.stream_log("stdout"):
                gate.touch()
                yield part

        if joined:
            return [line async for line in whole_lines(parts())]
        return [line async for _, line in parts()]

    raw = asyncio.run(read(joined=False))
    assert raw[:2] == ["[1796/compute_actuals/2 (pid 1)] Task fin", "ished successfully."]  # as Metaflow reads it
    lines = asyncio.run(read(joined=True))
    assert lines == ["[1796/compute_actuals/2 (pid 1)] Task finished successfully.", "", "no newline at the end"]
    assert STEP_FINISHED.search(lines[0])[1] == "compute_actuals"
