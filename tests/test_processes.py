"""The processes the project leaves running are found again by their records: whether one still runs,
and records written whole with mode 0600."""

from __future__ import annotations

import subprocess
import time

from nyc_taxi.core.processes import alive, read_record, write_private


def test_a_process_is_alive_while_it_runs_and_not_once_it_exited_or_when_none_is_recorded():
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    assert alive(child.pid)
    child.terminate()
    deadline = time.monotonic() + 10
    while alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child.pid)  # exited: reaped here, never taken for a running process
    assert not alive(0) and not alive(-1)  # no pid recorded; as pids they would name process groups


def test_a_record_is_private_and_whole(tmp_path):
    path = tmp_path / "team" / "service.json"
    write_private(path, {"port": 5432, "password": "x" * 64})
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_record(path) == {"port": 5432, "password": "x" * 64}
    assert read_record(tmp_path / "none.json") is None
    assert [p.name for p in path.parent.iterdir()] == ["service.json"]  # nothing half-written left beside it
