"""`bash run lineage --runs JOB` over runs as the OpenLineage events record them (lineage/read/runs.py): a DAG
run says every version the runs under it read, not one per dataset."""

from __future__ import annotations

import json

from nyc_taxi.core.datasets import YELLOW_TAXI_RAW
from nyc_taxi.lineage.read import runs as runs_module
from nyc_taxi.lineage.read.runs import JobRun, Runs, job_runs, render

RAW = YELLOW_TAXI_RAW.name


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


def test_a_resumed_flow_runs_steps_are_those_it_ran_and_those_it_cloned_from_the_run_it_resumed():
    """Metaflow's resume clones the steps before the one it resumes from without running them, so nothing of
    a clone is recorded: a resumed run's steps are those it ran and, for each it did not, the step of the run it
    resumed (through a resume of a resume). Its staleness is then judged from the raw version the cloned
    compute_actuals read, and a run whose resumed run is not recorded is not known fresh."""
    from nyc_taxi.core.jobs import TRAINING_FLOW
    from nyc_taxi.lineage.read.stale import flow_runs

    flow = TRAINING_FLOW.name

    def flow_run(run_id: str, state: str, resumed_from: str | None = None) -> JobRun:
        return JobRun(job=flow, run_id=f"u{run_id}", label=f"{flow}/{run_id}", state=state, resumed_from=resumed_from)

    def step(run_id: str, name: str, state: str = "success", inputs: dict | None = None, code: str = "c1") -> JobRun:
        job = getattr(TRAINING_FLOW, name).qualified_name
        return JobRun(
            job=job, run_id=f"u{run_id}.{name}", state=state, inputs=inputs or {}, parent=(flow, f"u{run_id}"),
            code_version=code,
        )  # fmt: skip

    recorded = [
        flow_run("1", "failure"),
        step("1", "start"),
        step("1", "compute_actuals", inputs={RAW: "41"}),
        step("1", "train_forecasting_model", "failure"),
        flow_run("2", "failure", resumed_from="1"),  # resumed at train, failed at predict
        step("2", "train_forecasting_model"),
        step("2", "predict", "failure"),
        flow_run("3", "success", resumed_from="2"),  # resumed at predict
        step("3", "predict"),
        step("3", "write_forecasts_to_table"),
        flow_run("5", "success", resumed_from="4"),  # resumed a run the lineage does not record
        step("5", "predict"),
        # compute_actuals refused a window (run 6), then ran again in the resume, whose record of it was lost: not
        # cloned, so run 6's failed reading stands for nothing; its steps ran other code than run 7's
        flow_run("6", "failure"),
        step("6", "start"),
        step("6", "compute_actuals", "failure", inputs={RAW: "40"}),
        flow_run("7", "success", resumed_from="6"),
        step("7", "train_forecasting_model", code="c2"),
        # one resume deeper: run 9 resumed run 8, which ran compute_actuals again and failed it; run 9's own record
        # of it was lost: run 0's successful one stands for nothing (not cloned from 8)
        flow_run("0", "success"),
        step("0", "compute_actuals", inputs={RAW: "39"}),
        flow_run("8", "failure", resumed_from="0"),
        step("8", "compute_actuals", "failure", inputs={RAW: "41"}),
        flow_run("9", "success", resumed_from="8"),
        step("9", "train_forecasting_model"),
    ]
    runs = Runs({run.run_id: run for run in recorded})
    steps = {s.job.split(".")[-1]: s.run_id for s in runs.steps(runs.by_id["u3"])}
    assert steps == {
        "predict": "u3.predict",
        "write_forecasts_to_table": "u3.write_forecasts_to_table",
        "train_forecasting_model": "u2.train_forecasting_model",  # not run 1's failed one
        "start": "u1.start",
        "compute_actuals": "u1.compute_actuals",
    }
    assert [s.run_id for s in runs.steps(runs.by_id["u5"])] == ["u5.predict"]
    assert [s.run_id for s in runs.steps(runs.by_id["u7"])] == ["u7.train_forecasting_model", "u6.start"]
    assert [s.run_id for s in runs.steps(runs.by_id["u9"])] == ["u9.train_forecasting_model"]
    assert flow_runs(runs) == {f"{flow}/{n}" for n in "012368"}  # not 7 or 9: their readings are lost


def test_a_resumed_run_whose_cloned_steps_ran_other_code_is_said_not_reproducible(monkeypatch, capsys, tmp_path):
    """`bash run lineage --reproduce` of a run that resumed one of other code (a resume after a fix) would run
    its cloned steps with code that did not make them: it says so, and which commits, and reproduces nothing."""
    from nyc_taxi.cli.reproduce import reproduce
    from nyc_taxi.core.jobs import TRAINING_FLOW
    from nyc_taxi.core.settings import Settings

    flow = TRAINING_FLOW.name
    compute, train = TRAINING_FLOW.compute_actuals.qualified_name, TRAINING_FLOW.train_forecasting_model.qualified_name
    recorded = [
        JobRun(job=flow, run_id="u1", label=f"{flow}/1", state="failure"),
        JobRun(job=compute, run_id="u1.c", state="success", parent=(flow, "u1"), code_version="a" * 40),
        JobRun(job=flow, run_id="u2", label=f"{flow}/2", state="success", resumed_from="1", code_version="b" * 40),
        JobRun(job=train, run_id="u2.t", state="success", parent=(flow, "u2"), code_version="b" * 40),
    ]
    monkeypatch.setattr(
        Runs, "read", classmethod(lambda cls, settings=None, until=None: Runs({r.run_id: r for r in recorded}))
    )
    assert reproduce(f"{flow}/2", Settings(_env_file=None, state_dir=tmp_path)) == 2
    said = capsys.readouterr().err
    assert (
        f"cannot reproduce {flow}/2: {flow}/2 and its steps ran the code of 2 commits ({'a' * 12}, {'b' * 12})" in said
    )
    # its own steps' records lost: the commit it ran, against the one its cloned step ran
    recorded.pop()
    assert reproduce(f"{flow}/2", Settings(_env_file=None, state_dir=tmp_path)) == 2
    assert f"2 commits ({'a' * 12}, {'b' * 12}): it resumed a run of other code" in capsys.readouterr().err
    # a run that resumed none, whose steps recorded two commits (a commit made while it ran): no word of a resume
    recorded[:] = [
        JobRun(job=flow, run_id="u3", label=f"{flow}/3", state="success", code_version="a" * 40),
        JobRun(job=compute, run_id="u3.c", state="success", parent=(flow, "u3"), code_version="b" * 40),
    ]
    assert reproduce(f"{flow}/3", Settings(_env_file=None, state_dir=tmp_path)) == 2
    said = capsys.readouterr().err
    assert (
        f"{flow}/3 and its steps ran the code of 2 commits ({'a' * 12}, {'b' * 12})" in said and "resumed" not in said
    )
