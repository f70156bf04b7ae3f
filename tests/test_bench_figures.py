"""The benchmarks' own arithmetic: figures read from a run's output are the spans its lines say."""

import datetime as dt
import json
import time

import pytest

from nyc_taxi_proving.bench.flow import metaflow_floor, verdict
from nyc_taxi_proving.bench.queries import read_event_log

RUN = """Metaflow 2.19.39 executing TrainForecastModelFlow for user:nyc-taxi
2026-11-25 20:44:21.400 Workflow starting (run-id 17):
2026-11-25 20:44:21.500 [17/start/1 (pid 1)] Task is starting.
2026-11-25 20:44:21.800 [17/start/1 (pid 1)] lineage of TrainForecastModelFlow/17/start/1 recorded in 0.003 s
2026-11-25 20:44:21.900 [17/start/1 (pid 1)] Task finished successfully.
2026-11-25 20:44:22.000 [17/evaluate/2 (pid 2)] Task is starting.
2026-11-25 20:44:22.500 [17/evaluate/2 (pid 2)] lineage of TrainForecastModelFlow/17/evaluate/2 recorded in 0.004 s
2026-11-25 20:44:23.800 [17/evaluate/2 (pid 2)] Task finished successfully.
2026-11-25 20:44:23.900 [17/end/3 (pid 3)] Task is starting.
2026-11-25 20:44:24.100 [17/end/3 (pid 3)] as of 2024-04-21 00:00:00, MAE 0.36
2026-11-25 20:44:24.200 [17/end/3 (pid 3)] lineage of TrainForecastModelFlow/17/end/3 recorded in 0.015 s
2026-11-25 20:44:24.300 [17/end/3 (pid 3)] Task finished successfully.
2026-11-25 20:44:24.310 Done!
"""


def test_metaflow_floor_is_the_runtime_start_an_empty_task_per_task_and_the_card_renders():
    started = dt.datetime(2026, 11, 25, 20, 44, 20, 800_000).timestamp()
    floor = metaflow_floor(RUN, started)
    assert floor["runtime_s"] == pytest.approx(0.6)
    assert floor["task_s"] == pytest.approx(0.4) and floor["tasks"] == 3
    assert floor["card_s"] == pytest.approx(1.3 - 0.1)  # evaluate after its body, less end's
    assert floor["floor_s"] == pytest.approx(0.6 + 3 * 0.4 + 1.2)


def test_a_target_line_says_met_at_or_under_its_target_and_otherwise_why_it_is_missed():
    assert verdict(0.84, 1, "the reason") == verdict(1.0, 1, "the reason") == "met"  # at target is met
    assert verdict(11.58, 6, "Metaflow's own floor is 5.3 s of it") == "missed: Metaflow's own floor is 5.3 s of it"


def _execution(execution: int, started: int, description: str, stage: int, rows: int | None) -> list[dict]:
    """One SQL execution whose plan scans a table (accumulator 7 counts its rows), and its one job."""
    scan = {"nodeName": "BatchScan t", "metrics": [{"name": "number of output rows", "accumulatorId": 7}]}
    plan = {"nodeName": "InMemoryTableScan", "children": [scan]} if rows is None else scan
    update = [] if rows is None else [{"ID": 7, "Update": rows}]
    return [
        {
            "Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart",
            "executionId": execution,
            "time": started,
            "description": description,
            "sparkPlanInfo": plan,
        },
        {
            "Event": "SparkListenerJobStart",
            "Stage IDs": [stage],
            "Properties": {"spark.sql.execution.id": str(execution)},
        },
        {"Event": "SparkListenerTaskEnd", "Stage ID": stage, "Task Info": {"Accumulables": update}},
        {
            "Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd",
            "executionId": execution,
            "time": started + 500,
        },
    ]


def test_a_query_over_a_cached_result_reads_nothing_although_its_plan_shows_the_cached_scan(tmp_path):
    log = tmp_path / "app"
    events = _execution(1, 1_000, "count.sql", stage=3, rows=100) + _execution(
        2, 2_000, "insert.sql", stage=4, rows=None
    )
    log.write_text("\n".join(json.dumps(e) for e in events))
    counted, inserted = read_event_log(log)
    assert (counted.description, counted.seconds, counted.scans) == ("count.sql", 0.5, {"rows": 100})
    assert (inserted.description, inserted.scans) == ("insert.sql", {"rows": 0})
    assert "read nothing from a table" in inserted.line() and "100 rows" in counted.line()


def test_an_idle_benchmark_counts_each_process_tree_s_cpu_with_what_it_forked_meanwhile():
    """A process that forks, inside the measurement, a child that burns half a second of CPU by its own clock
    and ends: its tree spent that half second (and the child's start); one that sleeps spent about nothing."""
    import subprocess
    import sys

    from nyc_taxi_proving.bench.idle import tree_cpu

    burn = "import time\nwhile time.process_time() < 0.5: pass\n"
    forks = f"import subprocess, sys, time\ntime.sleep(0.5)\nsubprocess.run([sys.executable, '-c', {burn!r}])\ntime.sleep(9)"
    parent = subprocess.Popen([sys.executable, "-c", forks])
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(9)"])
    time.sleep(0.2)  # both started: their interpreters' start is before the measurement
    try:
        shares = tree_cpu({"parent": parent.pid, "sleeper": sleeper.pid}, 3)
    finally:
        parent.kill()
        sleeper.kill()
    assert 0.45 <= shares["parent"] * 3 < 0.8  # the child's half second (to the clock tick), and its start
    assert shares["sleeper"] * 3 < 0.05


def test_the_demo_bench_reads_each_dag_run_as_the_demo_prints_it(tmp_path):
    """`bash run bench demo` takes each DAG run's seconds from the line the demo prints for it (the runs' own
    description, indented as the demo indents it)."""
    from nyc_taxi.cli.dag_run_results import describe
    from nyc_taxi.core.settings import Settings
    from nyc_taxi_proving.bench.demo import RUN_LINE

    conf = {"as_of_datetime": "2024-02-08T00:00", "model": "seasonal_naive", "lookback_days": 28}
    result = {"dag_id": "train_forecast_model", "conf": conf, "run_id": "r", "state": "success", "seconds": 41.6}
    [line] = describe(result, Settings(_env_file=None, state_dir=tmp_path))
    found = RUN_LINE.match(f"      {line}")
    assert found and (found["dag"], json.loads(found["conf"]), found["state"], found["seconds"]) == (
        "train_forecast_model",
        conf,
        "success",
        "41.6",
    )


def test_the_demo_benchs_typical_run_is_the_median_of_each_months_first_run():
    """A re-run (the same month again, after a republication) is set aside, and neither the fastest nor the
    slowest month stands for a run."""
    from nyc_taxi_proving.bench.demo import typical

    runs = [{"conf": {"month": m}, "seconds": s} for m, s in (("01", 9.0), ("02", 12.5), ("03", 30.0), ("01", 5.0))]
    assert typical(runs) == {"conf": {"month": "02"}, "seconds": 12.5}
    assert typical(runs[:2] + runs[3:]) == {"conf": {"month": "01"}, "seconds": 9.0}  # the first of January's


def test_the_demo_benchs_training_breakdown_names_each_part_from_its_lineages_times():
    """`bash run bench demo` splits a training DAG run by its lineage's start and end times: each step's code,
    Metaflow between the steps and around the flow, Airflow around the task; the first successful flow run of
    the run's parameters is the one (a re-run's and another origin's aside); a part that comes out negative
    is refused."""
    from nyc_taxi.lineage.read.runs import JobRun, Runs
    from nyc_taxi_proving.bench.demo import training_breakdown

    def at(second: float) -> str:
        return (dt.datetime(2024, 3, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=second)).isoformat()

    def flow_run(name: str, as_of: str, start: float, steps: list[tuple[str, float, float]], state="success"):
        task = JobRun(
            "train_forecast_model.run_training_flow",
            f"task-{name}",
            state=state,
            started=at(start),
            ended=at(start + 20),
        )
        parameters = {"as_of_datetime": as_of, "model": "seasonal_naive", "lookback_days": "28"}
        flow = JobRun(
            "TrainForecastModelFlow", f"flow-{name}", state=state, started=at(start + 2), ended=at(start + 18)
        )
        flow.parameters, flow.parent = parameters, (task.job, task.run_id)
        runs = [task, flow]
        for step, begin, end in steps:
            runs.append(
                JobRun(
                    f"TrainForecastModelFlow.{step}",
                    f"{name}-{step}",
                    state=state,
                    started=at(start + begin),
                    ended=at(start + end),
                )
            )
            runs[-1].parent = (flow.job, flow.run_id)
        return runs

    steps = [("start", 2.0, 2.5), ("compute_actuals", 4.0, 7.0), ("end", 16.0, 18.0)]
    runs = [
        *flow_run("failed", "2024-02-15T00:00", 0, [("start", 2.0, 12.0)], state="failure"),
        *flow_run("first", "2024-02-15T00:00", 100, steps),
        *flow_run("other", "2024-02-08T00:00", 200, [("start", 2.0, 10.0)]),
        *flow_run("rerun", "2024-02-15T00:00", 300, [("start", 2.0, 17.0)]),
    ]
    conf = {"as_of_datetime": "2024-02-15T00:00", "model": "seasonal_naive", "lookback_days": 28}
    rows = dict(training_breakdown(Runs({r.run_id: r for r in runs}), conf, 21.5))
    assert [rows[f"step {s}: its code"] for s, _, _ in steps] == [0.5, 3.0, 2.0]
    between, around, airflow = (v for k, v in rows.items() if not k.startswith("step "))
    assert (between, around, airflow) == (16 - 5.5, 20 - 16, 1.5)
    with pytest.raises(SystemExit, match="do not fit inside its run: Airflow"):  # a run shorter than its task
        training_breakdown(Runs({r.run_id: r for r in runs}), conf, 19.0)
    with pytest.raises(SystemExit, match="does not time the training run"):  # no run of these parameters
        training_breakdown(Runs({r.run_id: r for r in runs}), conf | {"model": "weather_adjusted"}, 21.5)
