"""The README's user path, followed word for word: the commands of its code blocks and the DAG runs it
lists are read from README.md itself and run in order, on a state directory of their own, offline on
the fixture months the README's own command serves. Edit the README's path and this test runs the
edited path.

- `bash run …` lines run as written (from the repository's root); the commands that serve until
  Ctrl-C (`airflow standalone`, `fixtures`, `lineage serve`) run in the background until the end;
- the DAG runs of step 2 are triggered in the UI, in headless Chromium signed in with the password
  `bash run airflow-login` prints: the DAG's page, Trigger, the month in the form;
- the placeholders of the lineage commands (RUN_A, RUN_B, RUN) are the run ids `bash run lineage --runs`
  prints, where the README says they come from.

Every command must succeed. The scheduler itself starts train_forecast_model after each taxi merge, from
its asset event; those forecasts and the flow's own equal an independent seasonal-naive count of the
fixture files. A month the form refuses is refused. Every listener of Airflow and of the tasks' Spark
drivers is on 127.0.0.1; the admin password is in no log and no lineage record; `bash run clean` while
the standalone runs is refused; the stop-and-start-over commands leave no state behind."""

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
from process_tree import descendants, java_descendants

from nyc_taxi.core.processes import alive, free_port, stop_group

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SERVING = ("airflow standalone", "fixtures", "lineage serve")  # commands that run until Ctrl-C

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.metaflow, pytest.mark.lineage, pytest.mark.ui]


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
    assert "bash run clean --yes" in stop


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


def _seasonal_naive_forecasts_equal_an_independent_count(line: str, said: str, state: Path, settings) -> None:
    """The forecasts the flow just wrote (seasonal naive, its defaults: 28 days back, 24 h ahead) equal an
    independent count of the fixture months the README's command served; at the origin the line gives, or
    the one the command said it chose (the latest whose horizon raw holds: the 29th of February)."""
    from nyc_taxi.core import datasets as registry
    from nyc_taxi.core.catalog import load_table

    given = re.search(r"--as_of_datetime (\S+)", line) or re.search(r"not given: training at (\S+),", said)
    as_of = dt.datetime.fromisoformat(given[1])
    assert "--as_of_datetime" in line or as_of == dt.datetime(2024, 2, 29), said[-2000:]
    files = sorted(state.glob("fixtures/**/yellow_tripdata_*.parquet"))
    assert len(files) == 2, files
    counted = expected_actuals(files, as_of - dt.timedelta(days=28), as_of)
    rows = load_table(registry.YELLOW_RIDES_HOURLY_FORECAST, settings).scan().to_arrow().to_pylist()
    rows = [r for r in rows if r["as_of_datetime"] == as_of]
    assert rows and {r["model_name"] for r in rows} == {"seasonal_naive"}
    predicted = {(r["pickup_location_id"], r["forecast_hour"]): r["predicted_ride_count"] for r in rows}
    assert len(predicted) == len(rows) and predicted == seasonal_naive(counted, as_of, 24)


def _signed_in(browser, base: str, password: str):
    """The UI in headless Chromium, signed in as the README's login step says (user admin)."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{base}/dags/ingest_weather_data")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/dags/ingest_weather_data**", timeout=60_000)
    return page


def _triggered_in_the_ui(page, base: str, api, dag_id: str, month: str) -> str:
    """A DAG run triggered as the README says: the DAG's page, Trigger, its month in the form; its run id,
    read back through the REST API (a manual run with that month that was not there before)."""
    before = {r["dag_run_id"] for r in api.runs(dag_id, limit=100)}
    page.goto(f"{base}/dags/{dag_id}")
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("textbox").last.fill(month)
    dialog.get_by_role("button", name="Trigger").click()

    def made():
        runs = api.runs(dag_id, limit=100)
        return [r for r in runs if r["dag_run_id"] not in before and r["run_type"] == "manual"]

    (run,) = _wait(made, 60, f"{dag_id} {month} triggered in the UI")
    assert run["conf"] == {"month": month}, run
    return run["dag_run_id"]


def _each_merge_started_one_training(api, settings, taxi_runs: dict[str, str], files: list[Path]) -> None:
    """The scheduler itself started train_forecast_model after each taxi merge (run type asset_triggered),
    each run consuming exactly the one event of its merge, and forecast from the start of the month after
    the one the merge loaded, as the DAG documents: the seasonal-naive count of the fixture files."""
    from nyc_taxi.core import datasets as registry
    from nyc_taxi.core.catalog import current_snapshot_id, load_table

    consumed = {}
    for run in api.runs("train_forecast_model", limit=100):
        url = f"/api/v2/dags/train_forecast_model/dagRuns/{run['dag_run_id']}/upstreamAssetEvents"
        events = api.call(url)["asset_events"]
        assert run["run_type"] == "asset_triggered" and run["state"] == "success" and len(events) == 1, (run, events)
        consumed[events[0]["source_run_id"]] = events[0]
    assert consumed.keys() == set(taxi_runs.values()), (consumed, taxi_runs)
    for month, run_id in taxi_runs.items():
        event = consumed[run_id]
        assert (event["source_dag_id"], event["source_task_id"], event["extra"]["month"]) == (
            "ingest_yellow_taxi_data",
            "merge_upsert_staging_into_raw_yellow",
            month,
        )
    assert event["extra"]["snapshot_id"] == str(current_snapshot_id(registry.YELLOW_TAXI_RAW, settings))
    rows = load_table(registry.YELLOW_RIDES_HOURLY_FORECAST, settings).scan().to_arrow().to_pylist()
    for month in taxi_runs:
        year, number = map(int, month.split("-"))
        as_of = dt.datetime(year + number // 12, number % 12 + 1, 1)
        predicted = {
            (r["pickup_location_id"], r["forecast_hour"]): r["predicted_ride_count"]
            for r in rows
            if r["as_of_datetime"] == as_of
        }
        loaded = [f for f in files if f.stem.rsplit("_", 1)[1] <= month]  # raw when that training ran
        counted = expected_actuals(loaded, as_of - dt.timedelta(days=28), as_of)
        assert predicted and predicted == seasonal_naive(counted, as_of, 24), as_of


def _each_weather_merge_emitted_its_event(api, settings, weather_runs: dict[str, str]) -> None:
    """Every weather merge that committed emitted an event of weather_raw's asset (an asset no DAG is
    scheduled on yet: Airflow lists it among the inactive ones) naming its month; the last one carries
    the snapshot raw holds now."""
    from nyc_taxi.airflow_adapter.operators import asset
    from nyc_taxi.core import datasets as registry
    from nyc_taxi.core.catalog import current_snapshot_id

    tasks = ("create_tables", "download_published_files", "stage_landed_files", "merge_upsert_staging_into_raw_weather")
    for run in weather_runs.values():
        assert api.task_states("ingest_weather_data", run) == dict.fromkeys(tasks, "success"), run
    assets = api.call("/api/v2/assets?uri_pattern=weather_raw&only_active=false")["assets"]
    assert [a["uri"] for a in assets] == [asset(registry.WEATHER_RAW).uri]
    events = api.call(f"/api/v2/assets/events?asset_id={assets[0]['id']}&limit=100")["asset_events"]
    said = [(e["source_dag_id"], e["source_task_id"], e["source_run_id"], e["extra"]["month"]) for e in events]
    merge = "merge_upsert_staging_into_raw_weather"
    assert sorted(said) == sorted(("ingest_weather_data", merge, run, month) for month, run in weather_runs.items())
    last = max(events, key=lambda e: e["timestamp"])
    assert last["extra"]["snapshot_id"] == str(current_snapshot_id(registry.WEATHER_RAW, settings))


def _stopped_by_ctrl_c(standalone: subprocess.Popen, stopped: dict[int, bool], said: str) -> None:
    """The standalone ended on its Ctrl-C, all of it: no kill from outside, its own exit, Airflow's shutdown
    to its end, and each of the four components' ending said by the standalone's stop, none killed (a
    SIGTERM at the stop's deadline is accepted: a loaded machine's shutdown may take that long), and no
    process a component left running held its output."""
    assert stopped[standalone.pid], "Ctrl-C did not stop the standalone within 90 s: it was killed"
    assert standalone.returncode == 0, said[-3000:]
    assert "standalone | Complete" in said and "SIGKILL" not in said, said[-3000:]
    assert "'s output is" not in said, said[-3000:]
    ended = re.findall(r"^standalone \| (\S+) ended: ", said, flags=re.M)
    assert sorted(ended) == ["api-server", "dag-processor", "scheduler", "triggerer"], said[-3000:]


def _new_users_shell(state: Path, port: int) -> dict:
    """A new user's shell: no test-session settings; the state directory and the UI's port are settings
    the README names (STATE_DIR, AIRFLOW_PORT)."""
    keep = ("PATH", "HOME", "LANG", "USER", "TMPDIR", "UV_CACHE_DIR", "XDG_CACHE_HOME")
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("UV_")}
    env |= {"STATE_DIR": str(state), "AIRFLOW_PORT": str(port), "SPARK_LOCAL_IP": "127.0.0.1"}
    return env | {"DATAHUB_TELEMETRY_ENABLED": "false"}


def _readme_line(section_title: str, starts: str) -> str:
    (line,) = [line for _, line in steps(section(section_title)) if line.startswith(starts)]
    return line


@pytest.mark.guards
def test_the_standalone_the_readme_starts_runs_a_triggered_dag_on_127_0_0_1_and_clean_refuses_to_remove_it(
    tmp_path, listening_sockets
):
    """The README's standalone, briefly (the whole path, each DAG run triggered in the UI, is the system
    lane's test below): its commands as written start the lakehouse, Airflow and the fixture months; the
    login is the one `bash run airflow-login` prints; a month the DAG's form refuses is refused, with the
    reason; a weather month triggered as the Trigger button does loads from the fixture server, whose
    address the running Airflow's task read from the state's settings (no restart), and its merge emits
    weather_raw's asset event; its Spark tasks attach to the warm Spark server the standalone keeps (no
    JVM of their own), which stops with it; Ctrl-C stops it all within its budget, no kill needed;
    everything Airflow and the Spark driver open listens on 127.0.0.1, no log server; the password is in
    no log; `bash run clean` is refused while the standalone runs; the stop-and-start-over commands leave
    nothing behind."""
    from nyc_taxi.airflow_adapter.rest_api import RestApi, healthy
    from nyc_taxi.core import spark_server
    from nyc_taxi.core.settings import Settings, state_settings_file

    state, port = tmp_path / "state", free_port()
    env = _new_users_shell(state, port)
    settings = Settings(_env_file=None, state_dir=state, airflow_port=port)
    base, path = f"http://127.0.0.1:{port}", "The user's path"
    serving: list[subprocess.Popen] = []
    listeners: set[tuple[str, str, int]] = set()
    try:
        _run(_readme_line(path, "bash run create-infra"), env)
        for line in (_readme_line(path, "bash run airflow standalone"), _readme_line(path, "bash run fixtures")):
            log = (tmp_path / f"{len(serving)}.log").open("w")
            serving.append(
                subprocess.Popen(
                    shlex.split(line), cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            )
        standalone = serving[0]
        _wait(lambda: healthy(base), 300, "bash run airflow standalone")
        _wait(lambda: "TLC_BASE_URL" in state_settings_file(state).read_text(), 120, "bash run fixtures")
        login = _run(_readme_line(path, "bash run airflow-login"), env)
        password = re.search(r"password\s+(\S{8,})", login.stdout)[1]
        api = RestApi(settings)
        assert api.call("/auth/token", {"username": "admin", "password": password})["access_token"]
        _wait(lambda: api.call("/api/v2/dags/ingest_weather_data"), 120, "the DAGs parsed")

        # a month the DAG's Param refuses is refused at the trigger, with the reason: no run
        with pytest.raises(urllib.error.HTTPError) as refused:
            api.trigger("ingest_weather_data", {"month": "2024-1"})
        assert refused.value.code == 400 and "month" in refused.value.read().decode()
        run_id = api.trigger("ingest_weather_data", {"month": "2024-01"})
        server = spark_server.running(settings)  # the standalone's warm Spark server
        assert server is not None and server["pid"] in descendants(standalone.pid), server
        jvms: set[int] = set()

        def finished():
            listeners.update(listening_sockets(standalone.pid))  # the server's Spark JVM too
            jvms.update(java_descendants(standalone.pid))
            return api.run("ingest_weather_data", run_id)["state"] in ("success", "failed")

        api.wait(finished, 900, every=1)
        _each_weather_merge_emitted_its_event(api, settings, {"2024-01": run_id})
        # the run's tasks attached to the server: no JVM but the server's, and their logs say so
        assert jvms - descendants(server["pid"]) == set(), (jvms, server)
        attached = f"attached to the Spark server (pid {server['pid']}"
        logs = [p for p in (settings.airflow_home / "logs").rglob("*.log") if f"run_id={run_id}" in str(p)]
        said = {p.parent.name for p in logs if attached in p.read_text(errors="replace")}
        assert {"task_id=stage_landed_files", "task_id=merge_upsert_staging_into_raw_weather"} <= said, said
        assert {address for _, address, _ in listeners} == {"127.0.0.1"}, listeners
        assert any("api_server" in name for name, _, _ in listeners), listeners
        assert any("java" in name for name, _, _ in listeners), listeners
        assert not [port for _, _, port in listeners if port in (8793, 8794)], listeners
        leaks = [
            str(p)
            for root in (settings.airflow_home / "logs", settings.lineage_dir)
            for p in root.rglob("*")
            if p.is_file() and password.encode() in p.read_bytes()
        ]
        assert leaks == []
        cleaned = subprocess.run(["bash", "run", "clean"], cwd=REPO, env=env, capture_output=True, text=True)
        assert cleaned.returncode == 1 and f"runs on {state} (pid " in cleaned.stderr, cleaned.stderr
        assert (settings.airflow_home / "airflow.db").is_file() and settings.catalog_db_path.is_file()
        assert standalone.poll() is None  # it runs until its Ctrl-C
    finally:
        # Ctrl-C, as the README says
        stopped = {process.pid: stop_group(process, signal.SIGINT, seconds=90) for process in serving}
    _stopped_by_ctrl_c(standalone, stopped, (tmp_path / "0.log").read_text(errors="replace"))
    assert spark_server.running(settings) is None and not alive(server["pid"])  # stopped with the standalone

    for _, line in steps(section("Stopping and starting over")):
        if line.startswith("bash run"):
            _run(line, env)
    assert not state.exists()


def _the_backtest_printed_duckdbs_scores(line: str, printed: str, settings) -> None:
    """`bash run backtest --origins N --last T`: a row per weekly origin with every model's WAPE and MAE as
    DuckDB computes them from the forecast and actuals tables' files, the winner, and the wins."""
    from expected_loads import duckdb_scores

    origins = int(re.search(r"--origins (\d+)", line)[1])
    last = dt.datetime.fromisoformat(re.search(r"--last (\S+)", line)[1])
    models = ("seasonal_naive", "weather_adjusted")
    scores, wins = duckdb_scores(settings=settings), dict.fromkeys(models, 0)
    for n in range(origins):
        origin = last - dt.timedelta(days=7 * n)
        [row] = [text for text in printed.splitlines() if text.startswith(f"{origin:%Y-%m-%d %H:%M}")]
        for model in models:
            score = scores[(model, origin)]
            assert score["coverage"] == 1 and f"{score['wape']:.1%} ({score['mae']:.2f})" in row, (model, row)
        winner = min(models, key=lambda m: scores[(m, origin)]["wape"])
        wins[winner] += 1
        assert row.rstrip().endswith(winner), row
    assert "wins: " + ", ".join(f"{m} {wins[m]} of {origins}" for m in models) in printed, printed


@pytest.mark.guards
@pytest.mark.system  # the suite runs the standalone's own claims (above); the whole path is the long proof
def test_the_users_path_as_the_readme_writes_it(tmp_path, browser, listening_sockets):
    from nyc_taxi.airflow_adapter.rest_api import RestApi, healthy
    from nyc_taxi.core.settings import Settings, state_settings_file

    state = tmp_path / "state"
    port = free_port()
    env = _new_users_shell(state, port)
    settings = Settings(_env_file=None, state_dir=state, airflow_port=port)
    base = f"http://127.0.0.1:{port}"
    screenshots = Path(os.environ.get("SCREENSHOT_DIR", tmp_path))

    serving: list[subprocess.Popen] = []
    placeholders: dict[str, str] = {}
    airflow_log = tmp_path / "airflow-standalone.log"
    password, page, standalone = None, None, None
    listeners: set[tuple[str, str, int]] = set()
    runs: dict[str, dict[str, str]] = {"ingest_yellow_taxi_data": {}, "ingest_weather_data": {}}
    try:
        for language, line in steps(section("The user's path")):
            if language == "text":  # step 2: a DAG run, triggered in the UI with its month
                dag_id, conf = line.split(None, 1)
                month = json.loads(conf)["month"]
                api = RestApi(settings)
                if page is None:
                    page = _signed_in(browser, base, password)
                    # a month the DAG's Param refuses is refused at the trigger, with the reason: no run
                    with pytest.raises(urllib.error.HTTPError) as refused:
                        api.trigger(dag_id, {"month": month.replace("-0", "-")})
                    assert refused.value.code == 400 and "month" in refused.value.read().decode()
                try:
                    run_id = _triggered_in_the_ui(page, base, api, dag_id, month)
                except (AssertionError, TimeoutError) as lost:  # with the end of Airflow's log
                    said = airflow_log.read_text(errors="replace")[-6000:]
                    raise AssertionError(f"{line}: {lost!r}\n{said}") from lost

                def finished(api=api, dag_id=dag_id, run_id=run_id, pid=standalone.pid):
                    listeners.update(listening_sockets(pid))  # the tasks' Spark JVMs too, while they run
                    return api.run(dag_id, run_id)["state"] in ("success", "failed")

                api.wait(finished, 900, every=1)
                assert api.run(dag_id, run_id)["state"] == "success", (dag_id, conf)
                runs[dag_id][month] = run_id
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
                    standalone = serving[-1]
                    _wait(lambda: healthy(base), 300, "bash run airflow standalone")
                    _wait(lambda: RestApi(settings).call("/api/v2/dags/ingest_weather_data"), 120, "the DAGs parsed")
                elif "fixtures" in line:
                    _wait(lambda: "TLC_BASE_URL" in state_settings_file(state).read_text(), 120, line)
                else:
                    said = Path(log.name)
                    _wait(lambda said=said: "http://127.0.0.1:" in said.read_text(), 120, line)
                continue
            if line.startswith("bash run training-flow") and not placeholders.get("trained"):
                api = RestApi(settings)
                api.idle(seconds=1800)  # the asset-triggered trainings first, as the UI shows them
                files = sorted(state.glob("fixtures/**/yellow_tripdata_*.parquet"))
                _each_merge_started_one_training(api, settings, runs["ingest_yellow_taxi_data"], files)
                _each_weather_merge_emitted_its_event(api, settings, runs["ingest_weather_data"])
                placeholders["trained"] = "yes"
            done = _run(line, env)
            if line.startswith("bash run training-flow") and "weather_adjusted" not in line:
                _seasonal_naive_forecasts_equal_an_independent_count(line, done.stderr, state, settings)
            if line.startswith("bash run backtest"):
                _the_backtest_printed_duckdbs_scores(line, done.stdout, settings)
            if line.startswith("bash run airflow-login"):
                password = re.search(r"password\s+(\S{8,})", done.stdout)[1]
            if line.startswith("bash run lineage --runs TrainForecastModelFlow"):
                flow_runs = re.findall(r"TrainForecastModelFlow/(\d+)", done.stdout)
                assert len(set(flow_runs)) >= 2, done.stdout
                placeholders |= {
                    "RUN_A": f"TrainForecastModelFlow/{flow_runs[-2]}",
                    "RUN_B": f"TrainForecastModelFlow/{flow_runs[-1]}",
                }
                placeholders["RUN"] = flow_runs[-1]
        assert "RUN" in placeholders, (
            "no `bash run lineage --runs TrainForecastModelFlow` before the commands that need run ids"
        )
        assert [len(months) for months in runs.values()] == [2, 2], runs

        page.goto(f"{base}/dags/ingest_weather_data/runs/{runs['ingest_weather_data']['2024-01']}")
        page.get_by_text("merge_upsert_staging_into_raw_weather").first.wait_for(timeout=30_000)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(screenshots / "airflow-ui-ingest_weather_data.png"))
        page.close()
        # every listener of Airflow and of the tasks' Spark drivers is on this machine only; no log servers
        assert {address for _, address, _ in listeners} == {"127.0.0.1"}, listeners
        assert any("api_server" in name for name, _, _ in listeners), listeners
        assert any("java" in name for name, _, _ in listeners), listeners
        assert not [port for _, _, port in listeners if port in (8793, 8794)], listeners
        # the admin password is in no task log and no lineage record
        leaks = [
            str(p)
            for root in (settings.airflow_home / "logs", settings.lineage_dir)
            for p in root.rglob("*")
            if p.is_file() and password.encode() in p.read_bytes()
        ]
        assert leaks == []
        # `bash run clean` while the standalone runs: refused, naming it; nothing removed
        cleaned = subprocess.run(["bash", "run", "clean"], cwd=REPO, env=env, capture_output=True, text=True)
        assert cleaned.returncode == 1 and f"runs on {state} (pid " in cleaned.stderr, cleaned.stderr
        assert (settings.airflow_home / "airflow.db").is_file() and settings.catalog_db_path.is_file()
        assert standalone.poll() is None  # it runs until its Ctrl-C
    finally:
        # Ctrl-C, as the README says
        stopped = {process.pid: stop_group(process, signal.SIGINT, seconds=90) for process in serving}
    _stopped_by_ctrl_c(standalone, stopped, airflow_log.read_text(errors="replace"))

    for _, line in steps(section("Stopping and starting over")):
        if line.startswith("bash run"):
            _run(line, env)
    assert not state.exists()
