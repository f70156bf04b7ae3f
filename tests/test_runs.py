"""`bash run lineage --runs JOB` over runs as the OpenLineage events record them (lineage/read/runs.py): a DAG
run says every version the runs under it read, not one per dataset."""

from __future__ import annotations

import json

from nyc_taxi.lineage.read import runs as runs_module
from nyc_taxi.lineage.read.runs import JobRun, Runs, job_runs, render


def _two_training_runs() -> Runs:
    """Two runs of a training DAG. The first's task failed its first try, having read raw at 41; a merge
    committed 42; the retry read 42 and succeeded; a third try that failed before it pinned a version read
    raw without one. The second DAG run read 42 only, and failed."""

    def task(run_id: str, parent: str, started: str, state: str, inputs: dict, outputs: dict | None = None):
        return JobRun(
            job="train.run_training_flow", run_id=run_id, state=state, started=started,
            inputs=inputs, outputs=outputs or {}, parent=("train", parent),
        )  # fmt: skip

    recorded = [
        JobRun(job="train", run_id="d1", state="success", started="2026-01-01T00:00:00", label="manual__1"),
        task("t1", "d1", "2026-01-01T00:00:01", "failure", {"raw": "41", "weather": "3"}),
        task("t2", "d1", "2026-01-01T00:02:00", "success", {"raw": "42", "weather": "3"}, {"forecast": "9"}),
        task("t3", "d1", "2026-01-01T00:04:00", "failure", {"raw": None}),
        JobRun(job="train", run_id="d2", state="failure", started="2026-01-01T01:00:00", label="manual__2"),
        task("t4", "d2", "2026-01-01T01:00:01", "failure", {"raw": "42"}),
    ]
    return Runs({run.run_id: run for run in recorded})


def test_a_dag_run_shows_each_version_its_tasks_read(monkeypatch):
    monkeypatch.setattr(Runs, "read", classmethod(lambda cls, settings=None, until=None: _two_training_runs()))
    first, second = job_runs("train", settings=object())
    assert first.read == [("raw", "41"), ("raw", "42"), ("weather", "3")]  # the try without a version adds none
    assert first.inputs == {"raw": None, "weather": "3"}  # no one version of raw stands for the DAG run
    assert first.outputs == {"forecast": "9"}
    assert "read  raw@41, raw@42, weather@3" in render([first])
    assert second.read == [("raw", "42")]
    assert second.changed_since_last_good == {"input raw": [["41", "42"], "42"], "input weather": ["3", "not read"]}
    assert "input raw: ['41', '42'] → 42" in render([second])
    answer = json.loads(json.dumps(runs_module.as_json([first, second])))  # what `--runs train --json` prints
    assert answer[0]["read"] == [["raw", "41"], ["raw", "42"], ["weather", "3"]]
    assert answer[0]["inputs"] == {"raw": None, "weather": "3"}
