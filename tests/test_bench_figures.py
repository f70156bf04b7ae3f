"""The benchmarks' own arithmetic: figures read from a run's output are the spans its lines say."""

import datetime as dt

import pytest

from nyc_taxi.bench.flow import metaflow_floor, verdict

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
