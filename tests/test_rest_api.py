"""The project's client of Airflow's REST API (airflow_adapter/rest_api.py): a trigger whose answer is lost
(the API server waiting on its database, the connection dropped) is asked again and finds the run its first
try made, never makes a second. Against a stand-in of the two endpoints it calls; the real API server:
test_readme_path.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from nyc_taxi.airflow_adapter.rest_api import RestApi, passwords_file
from nyc_taxi.core.settings import Settings


def test_a_trigger_whose_answer_is_lost_finds_the_run_it_made_and_makes_no_second(tmp_path):
    runs: list[dict] = []  # the runs the stand-in made, in order
    posted: list[str] = []  # the run ids asked for

    class Airflow(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/auth/token":
                return self._answer(201, {"access_token": "t"})
            posted.append(body["dag_run_id"])
            if any(r["dag_run_id"] == body["dag_run_id"] for r in runs):
                return self._answer(409, {"detail": "already exists"})
            runs.append(body)
            if len(posted) == 1:  # the first answer is lost: the run is made, the connection dropped
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
    try:
        settings = Settings(_env_file=None, state_dir=tmp_path)
        passwords_file(settings).parent.mkdir(parents=True)
        passwords_file(settings).write_text(json.dumps({"admin": "pw"}))
        api = RestApi(settings, f"http://127.0.0.1:{server.server_port}")
        run_id = api.trigger("ingest_weather_data", {"month": "2024-01"})
        assert len(runs) == 1 and runs[0]["dag_run_id"] == run_id and runs[0]["conf"] == {"month": "2024-01"}
        assert posted == [run_id, run_id]  # asked again under the same name: found (409), not made again
    finally:
        server.shutdown()
