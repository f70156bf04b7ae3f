"""The project's client of Airflow's REST API (airflow_adapter/rest_api.py): a trigger is safe to ask
again. A try whose answer is lost (the API server waiting on its database, the connection dropped), or one
refused while the server restarts (503), is asked again under the same run name and finds the run its first
try made, never makes a second; so is a caller's own asking again with the name it chose (the chaos
mission's). Against a stand-in of the two endpoints it calls; the real API server: test_readme_path.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from nyc_taxi.airflow_adapter.rest_api import RestApi, passwords_file
from nyc_taxi.core.settings import Settings


@pytest.fixture
def airflow(tmp_path):
    """(the client, the runs the stand-in made, the run ids asked for, how it answers each POST in turn)."""
    runs: list[dict] = []
    posted: list[str] = []
    answers: list[str] = []  # per POST of a run, in turn: "lost" (made, the connection dropped), "503", "ok"

    class Airflow(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/auth/token":
                return self._answer(201, {"access_token": "t"})
            posted.append(body["dag_run_id"])
            answer = answers.pop(0) if answers else "ok"
            if answer == "503":  # restarting: nothing made
                return self._answer(503, {"detail": "unavailable"})
            if any(r["dag_run_id"] == body["dag_run_id"] for r in runs):
                return self._answer(409, {"detail": "already exists"})
            runs.append(body)
            if answer == "lost":
                self.close_connection = True
                self.connection.close()
                return None
            return self._answer(200, body)

        def _answer(self, status: int, body: dict):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Airflow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = Settings(_env_file=None, state_dir=tmp_path)
    passwords_file(settings).parent.mkdir(parents=True)
    passwords_file(settings).write_text(json.dumps({"admin": "pw"}))
    try:
        yield RestApi(settings, f"http://127.0.0.1:{server.server_port}"), runs, posted, answers
    finally:
        server.shutdown()


def test_a_trigger_whose_answer_is_lost_finds_the_run_it_made_and_makes_no_second(airflow):
    api, runs, posted, answers = airflow
    answers += ["lost"]
    run_id = api.trigger("ingest_weather_data", {"month": "2024-01"})
    assert len(runs) == 1 and runs[0]["dag_run_id"] == run_id and runs[0]["conf"] == {"month": "2024-01"}
    assert posted == [run_id, run_id]  # asked again under the same name: found (409), not made again


def test_a_trigger_refused_while_the_server_restarts_is_asked_again_and_a_callers_own_retry_finds_its_run(airflow):
    api, runs, posted, answers = airflow
    answers += ["503", "ok"]
    run_id = api.trigger("ingest_weather_data", {"month": "2024-02"})
    assert len(runs) == 1 and posted == [run_id, run_id]
    # the caller asks again with the name it chose (its own try's answer lost): the same run, no second
    assert api.trigger("ingest_weather_data", {"month": "2024-02"}, run_id) == run_id and len(runs) == 1
    # a new name is a new run
    assert api.trigger("ingest_weather_data", {"month": "2024-02"}) != run_id and len(runs) == 2


def test_idle_waits_for_an_asset_event_to_become_its_run_and_that_run_to_end_a_paused_dags_event_aside(
    tmp_path, monkeypatch
):
    """Between a merge's run ending and the run its asset event starts (the scheduler's next loop, or when
    `max_active_runs` lets it), no run is queued or running: `idle` still waits, for the waiting event; a
    paused DAG's event starts nothing and is not waited for. Against the answers of Airflow's endpoints."""
    import nyc_taxi.airflow_adapter.rest_api as rest_api

    monkeypatch.setattr(rest_api.time, "sleep", lambda seconds: None)
    training = {"dag_id": "train_forecast_model", "is_paused": False}
    paused = {"dag_id": "paused_dag", "is_paused": True}
    # each poll: (the active runs, the training DAG's waiting events); the paused DAG's event waits throughout
    polls = [([], ["raw"]), ([], ["raw"]), ([{"state": "queued"}], []), ([{"state": "running"}], []), ([], [])]
    asked: list[str] = []
    now: dict = {}

    def call(path, body=None, method=None, timeout=30):
        asked.append(path)
        if "dagRuns?state=queued" in path:
            now["runs"], now["events"] = polls.pop(0) if polls else ([], [])
            return {"dag_runs": now["runs"]}
        if path == "/api/v2/dags?paused=false&limit=100":
            return {"dags": [training]}
        if path.endswith("/assets/queuedEvents"):
            events = now["events"] if path.startswith("/api/v2/dags/train_forecast_model/") else ["raw"]
            return {"queued_events": [{"asset_id": 1} for _ in events], "total_entries": len(events)}
        return {"/api/v2/dags/paused_dag": paused, "/api/v2/dags/train_forecast_model": training}[path]

    api = object.__new__(RestApi)
    api.call = call
    api.idle()
    assert not polls and not any("paused_dag/assets" in p for p in asked)  # every poll made
    api.idle("paused_dag")  # its own runs ended; its event waits for an unpause, not for this
