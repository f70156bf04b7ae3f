"""`bash run lineage --runs JOB` over runs as the OpenLineage events record them (lineage/read/runs.py): a DAG
or flow run says every version the runs under it read, not one per dataset."""

from __future__ import annotations

from nyc_taxi.lineage.read import runs as runs_module
from nyc_taxi.lineage.read.runs import JobRun, Runs, job_runs, render


def _two_flow_runs() -> Runs:
    """Two runs of a flow: the first's steps read two versions of raw (a merge committed between them) and
    one of the weather; the second's read one version of raw and fails."""

    def step(name: str, run_id: str, parent: str, inputs: dict, outputs: dict | None = None) -> JobRun:
        return JobRun(
            job=f"Flow.{name}", run_id=run_id, state="success", started=f"2026-01-01T00:0{run_id[-1]}:00",
            inputs=inputs, outputs=outputs or {}, parent=("Flow", parent),
        )  # fmt: skip

    flows = [
        JobRun(job="Flow", run_id="f1", state="success", started="2026-01-01T00:00:00", label="Flow/1"),
        step("compute_actuals", "s1", "f1", {"raw": "41"}, {"actuals": "7"}),
        step("train", "s2", "f1", {"actuals": "7", "raw": "42", "weather": "3"}),
        JobRun(job="Flow", run_id="f2", state="failure", started="2026-01-01T00:05:00", label="Flow/2"),
        step("compute_actuals", "s6", "f2", {"raw": "42"}, {"actuals": "8"}),
        step("train", "s7", "f2", {"actuals": "8", "weather": "3"}),
    ]
    return Runs({run.run_id: run for run in flows})


def test_a_flow_run_shows_each_version_its_steps_read(monkeypatch):
    monkeypatch.setattr(Runs, "read", classmethod(lambda cls, settings=None, until=None: _two_flow_runs()))
    first, second = job_runs("Flow", settings=object())
    # what the steps read from outside the run (the actuals are the run's own), every version of it
    assert first.read == [("raw", "41"), ("raw", "42"), ("weather", "3")]
    assert first.inputs == {"raw": None, "weather": "3"}  # no one version of raw stands for the run
    assert first.outputs == {"actuals": "7"}
    assert "read  raw@41, raw@42, weather@3" in render([first])
    assert second.read == [("raw", "42"), ("weather", "3")]
    assert second.changed_since_last_good == {"input raw": [["41", "42"], "42"]}
    assert "input raw: ['41', '42'] → 42" in render([second])
    assert runs_module.as_json([first])[0]["read"] == [("raw", "41"), ("raw", "42"), ("weather", "3")]
