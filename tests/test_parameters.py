"""Run parameters are declared once (``core/jobs.py``): the DAGs' Params and the flow's Parameters are
made from the declarations, so the two ways of starting a forecast agree; a value a declaration refuses
is refused where it is typed — the trigger form (a JSON schema Airflow validates), the flow's command
line (one line, before Metaflow starts) — and a port that is taken stops Airflow before it starts."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys

import pytest

from nyc_taxi.core import jobs
from nyc_taxi.core.settings import REPO_ROOT


def _flow_class():
    spec = importlib.util.spec_from_file_location("train_model_flow", REPO_ROOT / jobs.TRAINING_FLOW.code)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TrainForecastModelFlow


def test_the_dag_and_the_flow_take_their_parameters_from_one_declaration():
    from airflow.sdk.definitions.param import ParamsDict

    from nyc_taxi.airflow_adapter.operators import params
    from nyc_taxi.forecast.model import MODELS

    dag = params(jobs.TRAIN_FORECAST_MODEL)
    flow = _flow_class()
    for declared in jobs.TRAINING_PARAMETERS:
        assert dag[declared.name].value == declared.default
        option = getattr(flow, declared.name)
        option.init()  # what Metaflow does before it builds the command line
        assert option.kwargs.get("default") == declared.default, declared.name
        assert option.kwargs["type"] is declared.kind and option.kwargs["help"] == declared.description
    assert dag["lookback_days"].value == 28 and flow.lookback_days.kwargs["default"] == 28
    assert set(jobs.MODEL.choices) == set(MODELS)  # the declaration names exactly the models there are

    # the trigger form's schema accepts what the declaration accepts and refuses the rest
    form = ParamsDict(dag)
    form.update({"as_of_datetime": "2024-02-15T00:00", "model": "weather_adjusted", "lookback_days": 30})
    assert form.validate()["lookback_days"] == 30
    for name, bad in (("as_of_datetime", "2024-02-15"), ("model", "prophet"), ("lookback_days", 3)):
        form = ParamsDict(params(jobs.TRAIN_FORECAST_MODEL))
        with pytest.raises(ValueError):
            form.update({name: bad})
            form.validate()
    month = ParamsDict(params(jobs.INGEST_YELLOW_TAXI_DATA))
    month.update({"month": "2024-02"})
    assert month.validate()["month"] == "2024-02"
    for bad in ("2024-2", "2024-13", "January"):
        month = ParamsDict(params(jobs.INGEST_WEATHER_DATA))
        with pytest.raises(ValueError):
            month.update({"month": bad})
            month.validate()


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--as_of_datetime", "2024-02-15"], "as_of_datetime '2024-02-15' is not a New York local time"),
        (["--as_of_datetime=2024-02-15T00:00+01:00"], "without an offset"),
        (["--as_of_datetime", "2024-02-15T00:00", "--model", "prophet"], "model must be one of"),
        (["--as_of_datetime", "2024-02-15T00:00", "--lookback_days", "3"], "lookback_days must be at least 7"),
    ],
)
def test_a_bad_flow_parameter_stops_the_command_line_with_one_line(tmp_path, arguments, said):
    done = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.metaflow_adapter", jobs.TRAINING_FLOW.name, "run", *arguments],
        env={**os.environ, "STATE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and said in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "metaflow").exists()  # no run was started


def test_a_backtest_triggers_the_training_dag_with_values_its_form_accepts_oldest_origin_first():
    import datetime as dt
    import json

    from airflow.sdk.definitions.param import ParamsDict

    from nyc_taxi.airflow_adapter.operators import params
    from nyc_taxi.cli import backtest

    origins = backtest.weekly_origins(dt.datetime(2024, 2, 29), 3)
    assert origins == [dt.datetime(2024, 2, 15), dt.datetime(2024, 2, 22), dt.datetime(2024, 2, 29)]
    specs = backtest.dag_runs(origins, list(jobs.MODEL.choices), 28, 24)
    assert len(specs) == 3 * len(jobs.MODEL.choices)
    seen = []
    for spec in specs:
        dag_id, conf = spec.split(":", 1)
        assert dag_id == jobs.TRAIN_FORECAST_MODEL.name
        form = ParamsDict(params(jobs.TRAIN_FORECAST_MODEL))
        form.update(json.loads(conf))
        checked = form.validate()
        seen.append((checked["as_of_datetime"], checked["model"]))
    assert seen == [(f"{o:%Y-%m-%dT%H:%M}", m) for o in origins for m in jobs.MODEL.choices]


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--models", "seasonal_naive,prophet"], "model must be one of"),
        (["--last", "2024-02-15"], "as_of_datetime '2024-02-15' is not a New York local time"),
        (["--predict_horizon_hours", "0"], "predict_horizon_hours must be between 1 and 336"),
        (["--origins", "0"], "--origins must be between 1 and 52"),
    ],
)
def test_a_bad_backtest_argument_stops_it_with_one_line_before_any_run(tmp_path, arguments, said):
    done = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.backtest", *arguments],
        env={**os.environ, "STATE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "airflow").exists()


@pytest.fixture
def taken_port():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def test_a_taken_port_stops_airflow_standalone_with_its_name(tmp_path, taken_port):
    from nyc_taxi.airflow_adapter.environment import airflow_environment
    from nyc_taxi.core.settings import Settings

    settings = Settings(_env_file=None, state_dir=tmp_path, airflow_port=taken_port)
    done = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.airflow_adapter.standalone"],
        env={**os.environ, "STATE_DIR": str(tmp_path), **airflow_environment(settings)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"127.0.0.1:{taken_port} is taken" in done.stderr and "AIRFLOW_PORT" in done.stderr
    assert "Starting Airflow Standalone" not in done.stdout + done.stderr  # nothing of Airflow started


@pytest.mark.team
def test_a_taken_port_stops_team_up_with_its_name_before_anything_starts(tmp_path, taken_port):
    from nyc_taxi.core.settings import Settings
    from nyc_taxi_proving.deployment.supervisor import Supervisor

    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {"PROFILE": "team", "STATE_DIR": str(tmp_path), "AIRFLOW_PORT": str(taken_port)}
    # a machine lock of its own (per temporary directory): it does not wait on another test's `team up`
    env["TMPDIR"] = str(tmp_path)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "nyc_taxi_proving.cli.team", "up"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"127.0.0.1:{taken_port} is taken" in done.stderr and "AIRFLOW_PORT" in done.stderr
        assert not Supervisor(Settings(_env_file=None, profile="team", state_dir=tmp_path)).running()
    finally:
        subprocess.run(
            [sys.executable, "-m", "nyc_taxi_proving.cli.team", "down", "--delete-data"], env=env, timeout=300
        )


@pytest.mark.guards
def test_the_runner_handle_the_training_task_stops_its_flow_with_is_there():
    """RunFlowOperator.on_kill stops the flow through Metaflow's ExecutingRun.command_obj.kill(): the
    Runner API has no public call for it. A Metaflow release that moves it fails here, loudly."""
    import inspect

    from metaflow.runner.metaflow_runner import ExecutingRun
    from metaflow.runner.subprocess_manager import CommandManager

    assert "command_obj" in inspect.signature(ExecutingRun.__init__).parameters
    assert callable(CommandManager.kill)
