"""End to end through the UI: `bash run airflow standalone`, headless Chromium logs in and triggers
ingest_weather_data from its DAG page; the run's state is read from the REST API. Every listener of
Airflow and of the tasks' Spark drivers is on 127.0.0.1, and the admin password is in no log."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from nyc_taxi.airflow_adapter.operators import asset
from nyc_taxi.core import datasets as registry
from nyc_taxi.core.catalog import current_snapshot_id
from nyc_taxi.fixtures.site import add_weather_month

pytestmark = [pytest.mark.airflow, pytest.mark.ui]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str | None = None) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as response:
        return json.load(response)


@pytest.fixture
def standalone(airflow_db, settings, tmp_path):
    """`bash run airflow standalone` (Airflow's standalone without its log servers) on a free port of
    127.0.0.1; everything it started is stopped afterwards."""
    port = _free_port()
    # Only the run the test triggers: no scheduled runs competing for max_active_runs=1.
    env = {
        **os.environ,
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
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
        yield base, json.loads(passwords.read_text())["admin"], process.pid
    except BaseException:
        print((tmp_path / "standalone.log").read_text()[-6000:])
        raise
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def test_trigger_weather_dag_from_the_ui_and_it_succeeds(
    standalone, site, settings, tmp_path, browser, listening_sockets
):
    base, password, pid = standalone
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
        runs = _get(f"{base}/api/v2/dags/ingest_weather_data/dagRuns?order_by=-run_after&limit=20", token)["dag_runs"]
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
