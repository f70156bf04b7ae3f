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


def test_idle_waits_for_an_asset_event_to_become_its_run_and_that_run_to_end_not_for_one_that_starts_none(monkeypatch):
    """Between a merge's run ending and the run its asset event starts (the scheduler's next loop, or when
    `max_active_runs` lets it), no run is queued or running: `idle` still waits, for the waiting event. An
    event that starts no run by itself (its DAG paused, failing to import, or scheduled on two assets, or on
    one or both of two) is not waited for; one of `any` plain assets is. Every page of DAGs is read. Against
    the answers of Airflow's endpoints, as Airflow 3.3 gives them."""
    import nyc_taxi.airflow_adapter.rest_api as rest_api

    polled = []

    def sleep(seconds):  # a regression that never sees the end fails here, not an hour later
        polled.append(seconds)
        assert len(polled) < 20, "idle never ended"

    monkeypatch.setattr(rest_api.time, "sleep", sleep)
    one_asset = {"all": [{"asset": {"uri": "iceberg://raw", "name": "raw", "group": "asset"}}]}
    dags = {
        "paused": ({"is_paused": True, "has_import_errors": False}, one_asset),
        "broken": ({"is_paused": False, "has_import_errors": True}, one_asset),
        "two_assets": ({"is_paused": False, "has_import_errors": False}, {"all": one_asset["all"] * 2}),
        "either": ({"is_paused": False, "has_import_errors": False}, {"any": [*one_asset["all"], *one_asset["all"]]}),
        "either_or_both": ({"is_paused": False, "has_import_errors": False}, {"any": [*one_asset["all"], one_asset]}),
        "train_forecast_model": ({"is_paused": False, "has_import_errors": False}, one_asset),  # on the last page
    }
    # the scheduler: the merge's event waits; it becomes a run the moment after `idle` has looked at the runs
    # (or at its third look at the DAGs), and the run ends after it has been seen twice
    scheduler = {"state": "event waiting", "looks": 0, "seen": 0}

    def look():
        scheduler["looks"] += 1
        if scheduler["looks"] == 3 and scheduler["state"] == "event waiting":
            scheduler["state"] = "run queued"

    def call(path, body=None, method=None, timeout=30):
        if path.startswith("/api/v2/dags?paused=false"):
            look()
            offset = int(path.rpartition("offset=")[2])
            unpaused = [{"dag_id": d, **state} for d, (state, _) in dags.items() if not state["is_paused"]]
            return {"dags": unpaused[offset : offset + 2], "total_entries": len(unpaused)}  # a page limit of 2
        if "/dagRuns?state=queued" in path:
            runs = [{"state": "queued"}] if scheduler["state"] == "run queued" else []
            if scheduler["state"] == "event waiting":
                scheduler["state"] = "run queued"
            elif runs:
                scheduler["seen"] += 1
                if scheduler["seen"] == 2:
                    scheduler["state"] = "run ended"
            return {"dag_runs": runs}
        dag, _, rest = path.removeprefix("/api/v2/dags/").partition("/")
        if rest == "assets/queuedEvents":
            waiting = dag not in ("train_forecast_model", "either") or scheduler["state"] == "event waiting"
            return {"queued_events": [{"dag_id": dag}] if waiting else [], "total_entries": int(waiting)}
        if rest == "details":
            return {"dag_id": dag, **dags[dag][0], "asset_expression": dags[dag][1]}
        look()
        return {"dag_id": dag, **dags[dag][0]}

    api = object.__new__(RestApi)
    api.call = call
    api.idle()
    assert scheduler["state"] == "run ended", scheduler  # not while the event waited, nor while its run ran
    for dag in ("paused", "broken", "two_assets", "either_or_both"):
        polled.clear()
        api.idle(dag)
        assert not polled, dag
    # any of plain assets: one event starts a run, waited for (on the last page of DAGs, the server's limit 2)
    scheduler.update(state="event waiting", looks=0, seen=0)
    polled.clear()
    api.idle("either")
    assert scheduler["state"] == "run ended", scheduler


def test_a_group_is_triggered_before_it_is_waited_for_said_in_order_and_a_refusal_waits_for_its_group_mate(
    monkeypatch, capsys
):
    """`dag_runs` through the scheduler: a month's two loads are both triggered before either is waited for,
    their lines come in the order given whichever ends first, each with its own seconds; when Airflow refuses
    the second's trigger, the first is still waited for and said, then the refusal is raised."""
    import urllib.error

    from nyc_taxi.airflow_adapter import dag_runs

    monkeypatch.setattr(dag_runs.time, "sleep", lambda seconds: None)

    class Scheduler:
        def __init__(self, refuse: str = ""):
            self.refuse, self.asked, self.polls = refuse, [], {}

        def idle(self, dag_id="~", seconds=3600):
            self.asked.append(("idle", dag_id))

        def trigger(self, dag_id, conf):
            self.asked.append(("trigger", dag_id))
            if dag_id == self.refuse:
                raise urllib.error.HTTPError("http://airflow", 400, "Bad Request", {}, None)
            self.polls[dag_id] = 0
            return f"run-{dag_id}"

        def run(self, dag_id, run_id):
            self.asked.append(("poll", dag_id))
            self.polls[dag_id] += 1
            ends_after = 1 if dag_id == "ingest_weather_data" else 3  # the weather load ends first
            return {"state": "success" if self.polls[dag_id] >= ends_after else "running"}

        def task_states(self, dag_id, run_id):
            return {}

        def wait(self, ready, seconds=3600, every=2):
            while not ready():
                pass

    specs = ['ingest_yellow_taxi_data:{"month": "2024-01"}', 'ingest_weather_data:{"month": "2024-01"}']
    api = Scheduler()
    assert dag_runs.through_the_scheduler(api, specs) == 0
    assert [a for a in api.asked if a[0] != "poll"][:4] == [
        ("idle", "ingest_yellow_taxi_data"),
        ("trigger", "ingest_yellow_taxi_data"),
        ("idle", "ingest_weather_data"),
        ("trigger", "ingest_weather_data"),
    ]
    assert api.asked.index(("trigger", "ingest_weather_data")) < api.asked.index(("poll", "ingest_yellow_taxi_data"))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["dag_id"], r["conf"], r["state"]) for r in lines] == [
        ("ingest_yellow_taxi_data", {"month": "2024-01"}, "success"),
        ("ingest_weather_data", {"month": "2024-01"}, "success"),
    ]
    assert all(isinstance(r["seconds"], float) for r in lines)

    api = Scheduler(refuse="ingest_weather_data")
    with pytest.raises(urllib.error.HTTPError):
        dag_runs.through_the_scheduler(api, specs)
    said = capsys.readouterr()
    assert [json.loads(line)["dag_id"] for line in said.out.splitlines()] == ["ingest_yellow_taxi_data"]
    assert api.polls["ingest_yellow_taxi_data"] == 3  # waited for until it ended
    assert "ingest_weather_data: Airflow refused the run: HTTP Error 400" in said.err

    class Stuck(Scheduler):  # the wait for the weather DAG's earlier runs times out
        def idle(self, dag_id="~", seconds=3600):
            if dag_id == "ingest_weather_data":
                raise TimeoutError("still waiting")

    api = Stuck()
    with pytest.raises(TimeoutError):
        dag_runs.through_the_scheduler(api, specs)
    assert api.polls == {"ingest_yellow_taxi_data": 0}  # raised at once: the triggered run not waited for
