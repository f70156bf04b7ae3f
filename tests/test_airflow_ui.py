"""End to end through the UI: `bash run airflow standalone`, headless Chromium logs in and triggers
ingest_weather_data from its DAG page; the run's state is read from the REST API. Every listener of
Airflow and of the tasks' Spark drivers is on 127.0.0.1, and the admin password is in no log. And the
mission's path through the scheduler: a taxi merge triggered through the REST API emits the
yellow_taxi_raw asset event, and the scheduler starts train_forecast_model from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

from nyc_taxi.airflow_adapter.operators import asset
from nyc_taxi.core import datasets as registry
from nyc_taxi.core.catalog import current_snapshot_id, load_table
from nyc_taxi.core.processes import free_port, stop_group
from nyc_taxi.fixtures.site import add_taxi_month, add_weather_month

pytestmark = [pytest.mark.airflow, pytest.mark.ui]


def _get(url: str, token: str | None = None) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as response:
        return json.load(response)


@pytest.fixture
def standalone(request, airflow_db, settings, tmp_path, airflow_state):
    """`bash run airflow standalone` (Airflow's standalone without its log servers) on a free port of
    127.0.0.1; everything it started is stopped afterwards: (base URL, admin password, pid, settings).
    Its scheduler creates no runs of its own unless the test asks for them
    (``@pytest.mark.parametrize("standalone", ["scheduling"], indirect=True)``); then it runs on a
    state of its own: its database has no asset events of other tests' merges, and no process but
    Airflow's own writes to it (SQLite is Airflow's development database: one set of writers)."""
    from nyc_taxi.airflow_adapter.environment import airflow_environment
    from nyc_taxi.core.lakehouse import lakehouse
    from nyc_taxi.core.settings import Settings

    port = free_port()
    scheduling = getattr(request, "param", None) == "scheduling"
    env = {**os.environ}
    if scheduling:
        settings = Settings(state_dir=tmp_path / "state", profile="local")
        airflow_state(settings)
        lakehouse(settings).create()
        env |= {"STATE_DIR": str(settings.state_dir), **airflow_environment(settings)}
        # `airflow db migrate` writes Airflow's configuration file, with the secret its components sign
        # and check the tasks' tokens with; without it each component the standalone starts at once
        # would make up a secret of its own. `bash run airflow` migrates before its first standalone.
        subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, check=True, capture_output=True)
    env |= {
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": str(scheduling),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
    }
    log = (tmp_path / "standalone.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "nyc_taxi.airflow_adapter.standalone"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                if _get(f"{base}/api/v2/monitor/health")["scheduler"]["status"] == "healthy":
                    break
            except Exception:
                pass
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "standalone.log").read_text()[
                -3000:
            ]
            time.sleep(2)
        passwords = settings.airflow_home / "simple_auth_manager_passwords.json.generated"
        yield base, json.loads(passwords.read_text())["admin"], process.pid, settings
    except BaseException:
        print((tmp_path / "standalone.log").read_text()[-6000:])
        raise
    finally:
        stop_group(process)
        log.close()


@pytest.mark.guards
def test_trigger_weather_dag_from_the_ui_and_it_succeeds(
    standalone, site, settings, tmp_path, browser, listening_sockets
):
    base, password, pid, _ = standalone
    listeners = listening_sockets(pid)
    add_weather_month(site, 2024, 3, n_counties=60)
    screenshots = Path(os.environ.get("SCREENSHOT_DIR", tmp_path))
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{base}/dags/ingest_weather_data")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/dags/ingest_weather_data**", timeout=60_000)
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("textbox").last.fill("2024-03")
    dialog.get_by_role("button", name="Trigger").click()

    request = urllib.request.Request(
        f"{base}/auth/token",
        headers={"Content-Type": "application/json"},
        data=json.dumps({"username": "admin", "password": password}).encode(),
    )
    token = json.load(urllib.request.urlopen(request, timeout=10))["access_token"]
    deadline, run = time.monotonic() + 300, None
    while time.monotonic() < deadline:
        try:
            runs = _get(f"{base}/api/v2/dags/ingest_weather_data/dagRuns?order_by=-run_after&limit=20", token)[
                "dag_runs"
            ]
        except (OSError, TimeoutError):  # one slow answer (the machine is busy) is "not yet", not a failure
            time.sleep(1)
            continue
        run = next((r for r in runs if r["run_type"] == "manual" and r["conf"].get("month") == "2024-03"), None)
        if run and run["state"] in ("success", "failed"):
            break
        listeners |= listening_sockets(pid)  # the task processes and their Spark JVMs too, while they run
        time.sleep(1)
    assert run is not None and run["state"] == "success", run
    # Every listener of Airflow and of the tasks' Spark drivers is on this machine only.
    assert {address for _, address, _ in listeners} == {"127.0.0.1"}, listeners
    assert any("api_server" in name for name, _, _ in listeners) and any("java" in name for name, _, _ in listeners), (
        listeners
    )
    assert not [port for _, _, port in listeners if port in (8793, 8794)]  # no log servers
    # The generated admin password is in no task log and no lineage record.
    leaks = [
        str(p)
        for root in (settings.airflow_home / "logs", settings.lineage_dir)
        for p in root.rglob("*")
        if p.is_file() and password.encode() in p.read_bytes()
    ]
    assert leaks == []
    tasks = _get(f"{base}/api/v2/dags/ingest_weather_data/dagRuns/{run['dag_run_id']}/taskInstances", token)
    assert {t["task_id"]: t["state"] for t in tasks["task_instances"]} == {
        "create_tables": "success",
        "download_published_files": "success",
        "stage_landed_files": "success",
        "merge_upsert_staging_into_raw_weather": "success",
    }
    # the merge committed a snapshot: weather_raw's asset has an event carrying it (an asset no DAG is
    # scheduled on yet, so Airflow lists it among the inactive ones)
    assets = _get(f"{base}/api/v2/assets?uri_pattern=weather_raw&only_active=false", token)["assets"]
    assert [a["uri"] for a in assets] == [asset(registry.WEATHER_RAW).uri]
    events = _get(f"{base}/api/v2/assets/events?asset_id={assets[0]['id']}&limit=100", token)["asset_events"]
    events = [e for e in events if e["source_run_id"] == run["dag_run_id"]]  # other tests share the database
    assert [(e["source_dag_id"], e["source_task_id"], e["extra"]["month"]) for e in events] == [
        ("ingest_weather_data", "merge_upsert_staging_into_raw_weather", "2024-03")
    ]
    assert events[0]["extra"]["snapshot_id"] == str(current_snapshot_id(registry.WEATHER_RAW))

    page.goto(f"{base}/dags/ingest_weather_data/runs/{run['dag_run_id']}")
    page.get_by_text("merge_upsert_staging_into_raw_weather").first.wait_for(timeout=30_000)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(screenshots / "airflow-ui-ingest_weather_data.png"))
    page.close()


def _post(url: str, token: str, body: dict) -> dict:
    request = urllib.request.Request(
        url,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        data=json.dumps(body).encode(),
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def _token(base: str, password: str) -> str:
    return _post(f"{base}/auth/token", "", {"username": "admin", "password": password})["access_token"]


def _wait_for(fetch, done, seconds: float):
    """Poll until done(answer); an answer that is slow to come (a busy machine) is "not yet"."""
    deadline, answer = time.monotonic() + seconds, None
    while time.monotonic() < deadline:
        try:
            answer = fetch()
        except (OSError, TimeoutError):
            answer = None
        if answer is not None and done(answer):
            return answer
        time.sleep(2)
    return answer


@pytest.mark.parametrize("standalone", ["scheduling"], indirect=True)
def test_a_taxi_merge_triggered_through_the_api_makes_the_scheduler_start_the_training_flow(standalone, site, settings):
    """The mission's path: a run of ingest_yellow_taxi_data triggered as the UI's Trigger button does
    (REST), its merge emits the yellow_taxi_raw asset event, and the scheduler itself starts
    train_forecast_model (run type asset_triggered), which runs the flow for the month after."""
    base, password, pid, settings = standalone
    # `bash run clean` of the standalone's state directory while it runs: refused, naming it; nothing removed
    env = {**os.environ, "STATE_DIR": str(settings.state_dir)}
    cleaned = subprocess.run([sys.executable, "-m", "nyc_taxi.cli.clean"], env=env, capture_output=True, text=True)
    assert cleaned.returncode == 1 and f"runs on {settings.state_dir} (pid {pid}," in cleaned.stderr, cleaned.stderr
    assert (settings.airflow_home / "airflow.db").is_file() and settings.catalog_db_path.is_file()
    add_taxi_month(site, 2024, 5, rows=20_000, seed=51)
    token = _token(base, password)
    # a month the DAG's Param refuses is refused at the trigger, with the reason (no run is made)
    with pytest.raises(urllib.error.HTTPError) as refused:
        _post(
            f"{base}/api/v2/dags/ingest_yellow_taxi_data/dagRuns",
            token,
            {"logical_date": None, "conf": {"month": "2024-5"}},
        )
    assert refused.value.code == 400 and "month" in refused.value.read().decode()
    triggered = _post(
        f"{base}/api/v2/dags/ingest_yellow_taxi_data/dagRuns",
        token,
        {"logical_date": None, "conf": {"month": "2024-05"}},
    )

    def taxi_run():
        return _get(f"{base}/api/v2/dags/ingest_yellow_taxi_data/dagRuns/{triggered['dag_run_id']}", token)

    run = _wait_for(taxi_run, lambda r: r["state"] in ("success", "failed"), 600)
    assert run and run["state"] == "success", run

    def training_runs():
        runs = _get(f"{base}/api/v2/dags/train_forecast_model/dagRuns?order_by=-run_after&limit=20", token)["dag_runs"]
        ours = []
        for candidate in runs:
            url = f"{base}/api/v2/dags/train_forecast_model/dagRuns/{candidate['dag_run_id']}/upstreamAssetEvents"
            events = _get(url, token)["asset_events"]
            if any(e["source_run_id"] == triggered["dag_run_id"] for e in events):
                ours.append((candidate, events))
        return ours

    ours = _wait_for(training_runs, lambda found: found and found[0][0]["state"] in ("success", "failed"), 900)
    assert ours and len(ours) == 1, ours  # one training run for the one merge
    training, events = ours[0]
    assert training["run_type"] == "asset_triggered" and training["state"] == "success", training
    # a database of its own: the run consumed exactly the one event of our merge
    assert [(e["source_dag_id"], e["source_task_id"], e["extra"]["month"]) for e in events] == [
        ("ingest_yellow_taxi_data", "merge_upsert_staging_into_raw_yellow", "2024-05")
    ]
    assert events[0]["extra"]["snapshot_id"] == str(current_snapshot_id(registry.YELLOW_TAXI_RAW, settings))
    # the flow forecast from the start of the month after the one the merge loaded, as the DAG documents
    forecasts = load_table(registry.YELLOW_RIDES_HOURLY_FORECAST, settings).scan(selected_fields=("as_of_datetime",))
    assert set(forecasts.to_arrow().column("as_of_datetime").to_pylist()) == {datetime(2024, 6, 1)}
