"""The README's user path, followed word for word: the commands of its code blocks and the DAG runs it
lists are read from README.md itself and run in order, on a state directory of their own, offline on
the fixture months the README's own command serves. Edit the README's path and this test runs the
edited path.

- `bash run …` lines run as written (from the repository's root); the commands that serve until
  Ctrl-C (`airflow standalone`, `fixtures`, `lineage serve`) run in the background until the end;
- the DAG runs of step 2 are triggered through Airflow's REST API, as the UI's Trigger button does;
- the placeholders of the lineage commands (RUN_A, RUN_B, RUN) are the run ids `bash run lineage --runs`
  prints, where the README says they come from.

Every command must succeed; the forecasts the flow wrote equal an independent seasonal-naive count of
the fixture files; the stop-and-start-over commands leave no state behind."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shlex
import signal
import subprocess
import time
import urllib.error
from pathlib import Path

import pytest
from expected_loads import expected_actuals, seasonal_naive

from nyc_taxi.core.processes import free_port, stop_group

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SERVING = ("airflow standalone", "fixtures", "lineage serve")  # commands that run until Ctrl-C

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.metaflow, pytest.mark.lineage]


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def steps(text: str) -> list[tuple[str, str]]:
    """The code blocks of a section in order: (language, line) for every line that is not a comment."""
    found = []
    for language, body in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S):
        for line in body.splitlines():
            line = re.split(r"\s{2,}#", line)[0].strip()
            if line and not line.startswith("#"):
                found.append((language, line))
    return found


def test_the_readme_path_reads_as_this_test_runs_it():
    """What the test takes from the README is there: the path's commands, a DAG run per month and
    source, the flow both ways, a lineage command per question, and how to stop and start over."""
    path = steps(section("The user's path"))
    commands = [line for language, line in path if language == "bash"]
    runs = [line for language, line in path if language == "text"]
    assert commands[0] == "bash run create-infra" and any(c.startswith("bash run airflow standalone") for c in commands)
    assert any(c.startswith("bash run fixtures") for c in commands)
    assert sorted(r.split()[0] for r in runs) == ["ingest_weather_data"] * 2 + ["ingest_yellow_taxi_data"] * 2
    assert all(json.loads(r.split(None, 1)[1])["month"] in ("2024-01", "2024-02") for r in runs)
    assert len([c for c in commands if c.startswith("bash run training-flow run")]) == 2
    assert len([c for c in commands if c.startswith("bash run lineage")]) >= 8
    stop = [line for _, line in steps(section("Stopping and starting over"))]
    assert "bash run clean" in stop


def _run(line: str, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(shlex.split(line), cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _wait(ready, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            answer = ready()
        except (OSError, ValueError, KeyError):
            answer = None
        if answer:
            return answer
        time.sleep(1)
    raise AssertionError(f"{what}: not within {seconds:.0f} s")


def _seasonal_naive_forecasts_equal_an_independent_count(line: str, state: Path, settings) -> None:
    """The forecasts the flow just wrote (seasonal naive, its defaults: 28 days back, 24 h ahead) equal an
    independent count of the fixture months the README's command served."""
    from nyc_taxi.core import datasets as registry
    from nyc_taxi.core.catalog import load_table

    as_of = dt.datetime.fromisoformat(re.search(r"--as_of_datetime (\S+)", line)[1])
    files = sorted(state.glob("fixtures/**/yellow_tripdata_*.parquet"))
    assert len(files) == 2, files
    counted = expected_actuals(files, as_of - dt.timedelta(days=28), as_of)
    rows = load_table(registry.YELLOW_RIDES_HOURLY_FORECAST, settings).scan().to_arrow().to_pylist()
    rows = [r for r in rows if r["as_of_datetime"] == as_of]
    assert rows and {r["model_name"] for r in rows} == {"seasonal_naive"}
    predicted = {(r["pickup_location_id"], r["forecast_hour"]): r["predicted_ride_count"] for r in rows}
    assert len(predicted) == len(rows) and predicted == seasonal_naive(counted, as_of, 24)


def test_the_users_path_as_the_readme_writes_it(tmp_path):
    from nyc_taxi.airflow_adapter.rest_api import RestApi, healthy
    from nyc_taxi.core.settings import Settings, state_settings_file

    state = tmp_path / "state"
    port = free_port()
    # a new user's shell: no test-session settings; the state directory and the UI's port are settings
    # the README names (STATE_DIR, AIRFLOW_PORT)
    keep = ("PATH", "HOME", "LANG", "USER", "TMPDIR", "UV_CACHE_DIR", "XDG_CACHE_HOME")
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("UV_")}
    env |= {"STATE_DIR": str(state), "AIRFLOW_PORT": str(port), "SPARK_LOCAL_IP": "127.0.0.1"}
    env["DATAHUB_TELEMETRY_ENABLED"] = "false"
    settings = Settings(_env_file=None, state_dir=state, airflow_port=port)
    base = f"http://127.0.0.1:{port}"

    serving: list[subprocess.Popen] = []
    placeholders: dict[str, str] = {}
    airflow_log = tmp_path / "airflow-standalone.log"
    try:
        for language, line in steps(section("The user's path")):
            if language == "text":  # step 2: a DAG run, triggered as the UI's Trigger button does
                dag_id, conf = line.split(None, 1)
                api = RestApi(settings)
                try:
                    run_id = api.trigger(dag_id, json.loads(conf))
                except (urllib.error.HTTPError, TimeoutError) as refused:  # with Airflow's answer and its log's end
                    answer = refused.read()[:500] if isinstance(refused, urllib.error.HTTPError) else b""
                    said = airflow_log.read_text(errors="replace")[-6000:]
                    raise AssertionError(f"{line}: {refused!r} {answer!r}\n{said}") from refused
                assert api.finished(dag_id, run_id, 900)["state"] == "success", (dag_id, conf)
                continue
            if not line.startswith("bash run"):
                continue
            if "RUN_A" in line or "/RUN" in line:
                line = line.replace("RUN_A", placeholders["RUN_A"]).replace("RUN_B", placeholders["RUN_B"])
                line = line.replace("/RUN", "/" + placeholders["RUN"])
            if any(line.startswith(f"bash run {command}") for command in SERVING):
                log = (airflow_log if "airflow standalone" in line else tmp_path / f"{len(serving)}.log").open("w")
                serving.append(
                    subprocess.Popen(
                        shlex.split(line),
                        cwd=REPO,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
                if "airflow standalone" in line:
                    _wait(lambda: healthy(base), 300, "bash run airflow standalone")
                    _wait(lambda: RestApi(settings).call("/api/v2/dags/ingest_weather_data"), 120, "the DAGs parsed")
                elif "fixtures" in line:
                    _wait(lambda: "TLC_BASE_URL" in state_settings_file(state).read_text(), 120, line)
                else:
                    said = Path(log.name)
                    _wait(lambda said=said: "http://127.0.0.1:" in said.read_text(), 120, line)
                continue
            if line.startswith("bash run training-flow"):
                RestApi(settings).idle(seconds=1800)  # the asset-triggered trainings first, as the UI shows them
            done = _run(line, env)
            if line.startswith("bash run training-flow") and "weather_adjusted" not in line:
                _seasonal_naive_forecasts_equal_an_independent_count(line, state, settings)
            if line.startswith("bash run airflow-login"):
                assert re.search(r"password\s+\S{8,}", done.stdout), done.stdout
            if line.startswith("bash run lineage --runs TrainForecastModelFlow"):
                runs = re.findall(r"TrainForecastModelFlow/(\d+)", done.stdout)
                assert len(set(runs)) >= 2, done.stdout
                placeholders |= {
                    "RUN_A": f"TrainForecastModelFlow/{runs[-2]}",
                    "RUN_B": f"TrainForecastModelFlow/{runs[-1]}",
                }
                placeholders["RUN"] = runs[-1]
        assert placeholders, "no `bash run lineage --runs TrainForecastModelFlow` before the commands that need run ids"
    finally:
        for process in serving:
            stop_group(process, signal.SIGINT)  # Ctrl-C, as the README says

    for _, line in steps(section("Stopping and starting over")):
        if line.startswith("bash run"):
            _run(line, env)
    assert not state.exists()
