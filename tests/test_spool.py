"""The spool between a Metaflow step and the lineage recorder: entries become records in the order
they were spooled, by the recorder process or, when none is alive, by whoever waits; an entry that
cannot be recorded is set aside and the others are still recorded; the recorder records a step's
start and end with the step's own times and leaves after the entry that ends the run."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import subprocess
import time

import pytest

from nyc_taxi.core.jobs import TRAINING_FLOW
from nyc_taxi.core.settings import Settings
from nyc_taxi.lineage.spec import validation_errors
from nyc_taxi.lineage.write.outbox import read_datahub_records, read_openlineage_file
from nyc_taxi.lineage.write.report import StepReport, report_to_dict
from nyc_taxi.lineage.write.spool import Spool
from nyc_taxi.metaflow_adapter import recorder


@pytest.fixture
def state(tmp_path, monkeypatch):
    """Settings of a state of its own; the environment says the same, for a recorder process."""
    for name in ("OPENLINEAGE_URL", "DATAHUB_GMS_URL", "OPENLINEAGE_PARENT_ID", "OPENLINEAGE_ROOT_PARENT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PROFILE", "local")
    return Settings()


def test_whoever_waits_with_no_recorder_alive_records_in_order_and_sets_a_bad_entry_aside(state):
    spool = Spool("test", "no.such.recorder", state)
    for n in range(5):
        spool.put({"n": n})
    recorded, shipped = [], []

    def convert(entry):
        if entry["n"] == 2:
            raise ValueError("no such dataset")
        recorded.append(entry["n"])

    spool.wait_until_recorded(convert, shipped.append, timeout=5)
    assert recorded == [0, 1, 3, 4]
    assert shipped == [[{"n": 0}, {"n": 1}, {"n": 3}, {"n": 4}]]  # one shipment, after the batch
    assert spool.pending() == []
    assert [json.loads(p.read_text()) for p in spool.directory.glob("*.failed")] == [{"n": 2}]


def _context(step: str, started: dt.datetime, **changes) -> dict:
    context = recorder.StepContext(
        flow_name=TRAINING_FLOW.name,
        run_id="4242",
        step=step,
        task_id="7",
        started_ms=int(started.timestamp() * 1000),
        upstream=["evaluate"],
        is_end=step == "end",
        first_of_run=False,
        variant={"model": "seasonal_naive"},
        parameters={"as_of_datetime": "2024-02-15T00:00"},
        nominal_time="2024-02-15T05:00:00+00:00",
        origin_run_id=None,
        openlineage_parent_id=None,
        openlineage_root_parent_id=None,
        parent_airflow_task=None,
    )
    return dataclasses.asdict(dataclasses.replace(context, **changes))


def test_the_recorder_records_a_step_with_its_own_times_and_leaves_at_the_end_of_the_run(state):
    spool = recorder.spool(state)
    started, ended = dt.datetime(2024, 2, 15, 6, tzinfo=dt.UTC), dt.datetime(2024, 2, 15, 6, 1, tzinfo=dt.UTC)
    spool.put({"kind": "started", "context": _context("end", started)})
    spool.start_recorder()
    finished = {
        "kind": "finished",
        "context": _context("end", started),
        "report": report_to_dict(StepReport()),
        "error": None,
        "ended_ms": int(ended.timestamp() * 1000),
    }
    spool.put(finished)

    def not_here(entry):
        raise AssertionError("the recorder process records the entries, not the waiting step")

    spool.wait_until_recorded(not_here, lambda entries: None, timeout=60)
    assert spool.pending() == []
    logged = spool.log_path.read_text()
    assert f"lineage of {TRAINING_FLOW.name}/4242/end/7 finished recorded" in logged, logged

    events = read_openlineage_file(state.lineage_dir / "openlineage" / "metaflow_events.jsonl")
    assert [(e["job"]["name"], e["eventType"], e["eventTime"]) for e in events] == [
        (f"{TRAINING_FLOW.name}.end", "START", started.isoformat()),
        (f"{TRAINING_FLOW.name}.end", "COMPLETE", ended.isoformat()),
        (TRAINING_FLOW.name, "COMPLETE", ended.isoformat()),  # the end step ends the flow run
    ]
    assert all(validation_errors(e) == [] for e in events)
    ends = [r for r in read_datahub_records(state, "metaflow") if r["aspectName"] == "dataProcessInstanceRunEvent"]
    assert {r["aspect"]["json"]["timestampMillis"] for r in ends if r["aspect"]["json"]["status"] == "COMPLETE"} == {
        int(ended.timestamp() * 1000)
    }

    deadline = time.monotonic() + 10
    while spool.recorder_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not spool.recorder_alive()  # the entry that ended the run let it go


def test_a_failed_step_is_recorded_with_its_error_and_ends_the_run(state):
    spool = recorder.spool(state)
    started = dt.datetime(2024, 2, 15, 6, tzinfo=dt.UTC)
    failed = {
        "kind": "finished",
        "context": _context("compute_actuals", started, upstream=["start"]),
        "report": report_to_dict(StepReport()),
        "error": "NoDataInWindow: no yellow taxi trips",
        "ended_ms": int(started.timestamp() * 1000) + 5000,
    }
    assert recorder.ends_run(failed)
    spool.put(failed)
    # no recorder alive: the waiting process records it
    spool.wait_until_recorded(lambda e: recorder.record(e, state), lambda e: recorder.ship(e, state), timeout=60)
    events = read_openlineage_file(state.lineage_dir / "openlineage" / "metaflow_events.jsonl")
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [
        (f"{TRAINING_FLOW.name}.compute_actuals", "FAIL"),
        (TRAINING_FLOW.name, "FAIL"),
    ]
    assert {e["run"]["facets"]["errorMessage"]["message"] for e in events} == {"NoDataInWindow: no yellow taxi trips"}


def test_a_killed_recorders_entries_are_recorded_by_the_next_reader(state):
    """What readers (`bash run lineage`, `lineage-replay`) do first: entries no recorder lives for."""
    spool = recorder.spool(state)
    spool.start_recorder()
    assert spool.recorder_alive()
    deadline = time.monotonic() + 10
    pids = []
    while not pids and time.monotonic() < deadline:  # the recorder process, once it shows in the table
        pids = [int(line.split()[0]) for line in _processes() if str(spool.directory) in line]
        time.sleep(0.05 if not pids else 0)
    assert pids, spool.log_path.read_text() if spool.log_path.exists() else "no recorder.log"
    os.kill(pids[0], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while spool.recorder_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    spool.put({"kind": "started", "context": _context("end", dt.datetime(2024, 2, 15, 6, tzinfo=dt.UTC))})
    assert recorder.record_leftovers(state) == 1
    events = read_openlineage_file(state.lineage_dir / "openlineage" / "metaflow_events.jsonl")
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [(f"{TRAINING_FLOW.name}.end", "START")]
    assert spool.pending() == [] and recorder.record_leftovers(state) == 0


def _processes() -> list[str]:
    return subprocess.run(
        ["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True, check=True
    ).stdout.splitlines()


def test_a_line_still_being_written_is_not_read_yet_and_is_whole_once_written(tmp_path):
    # OpenLineage's file transport appends without a lock: a reader can meet the half of a line
    path = tmp_path / "airflow_events.jsonl"
    first, second = {"eventType": "START", "n": 1}, {"eventType": "COMPLETE", "n": 2, "pad": "x" * 10_000}
    line = json.dumps(second) + "\n"
    path.write_text(json.dumps(first) + "\n" + line[:4096])
    assert read_openlineage_file(path) == [first]
    with path.open("a") as out:
        out.write(line[4096:])
    assert read_openlineage_file(path) == [first, second]
