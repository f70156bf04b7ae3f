"""The chaos run's own parts, without a deployment: its plan follows from the seed and holds every named
moment, and each of its checks fails on the difference it is there to find (a check that cannot fail
proves nothing)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import socket
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from nyc_taxi.core import datasets as d
from nyc_taxi_proving.chaos import check, readings
from nyc_taxi_proving.chaos import run as chaos_run
from nyc_taxi_proving.chaos.run import NAMED, Fault, _within_tasks, plan
from nyc_taxi_proving.fixtures.lineage_server import DATAHUB_INGEST_PATH, OPENLINEAGE_PATH, LineageServer


def test_the_plan_follows_from_the_seed_and_holds_every_named_moment():
    first, again, other = plan(20, 7, 5), plan(20, 7, 5), plan(20, 8, 5)
    assert [vars(f) for f in first] == [vars(f) for f in again]
    assert [vars(f) for f in first] != [vars(f) for f in other]
    assert len(first) == 20 and [f.number for f in first] == list(range(1, 21))
    assert {f.moment for f in first if f.moment != "during"} == set(NAMED)
    assert max(sum(f.run == r for f in first) for r in {f.run for f in first}) <= 5
    assert all(f.step.startswith("month") for f in first if f.moment == "lineage shipper after the server accepted")
    assert all(f.target.startswith("train_forecast_model.") for f in first if f.component == "metaflow-step")


def test_a_moment_drawn_later_than_a_short_task_lasts_is_brought_within_its_shortest_clean_run():
    # seed 2 drew a volume server's kill 4.0 s into a download that ended sooner: the moment never came
    download, merge = "ingest_yellow_taxi_data.download_published_files", "ingest_weather_data.merge"
    faults = [
        Fault(1, 1, "month 2024-01", "seaweedfs-volume", "during", download, 4.0),
        Fault(2, 1, "month 2024-01", "redis", "during", merge, 4.0),
        Fault(3, 1, "month 2024-01", "postgres", "PostgreSQL mid-commit"),
    ]
    clean = [
        {"dag_id": "ingest_yellow_taxi_data", "durations": {"download_published_files": 3.0, "merge": 1.0}},
        {"dag_id": "ingest_yellow_taxi_data", "durations": {"download_published_files": 5.0}},
        {"dag_id": "ingest_weather_data", "durations": {"merge": 20.0}},
    ]
    assert _within_tasks(faults, clean) == [faults[0]]
    assert [f.delay for f in faults] == [1.5, 4.0, 0.0]
    assert _within_tasks(faults, clean) == []  # a second look changes nothing


def _tables(rows_by_table: dict[str, dict[str, dict]]) -> dict:
    return {
        name: {"by_key": {k: check._row_hash(v) for k, v in rows.items()}, "doubled": []}
        for name, rows in rows_by_table.items()
    }


def test_the_table_check_finds_a_missing_an_extra_a_changed_and_a_doubled_row_and_ignores_when_rows_were_written():
    row = {"row_key": "a", "fare": 1.0, "ingested_at": "2026-01-01T00:00:00"}
    clean = _tables({name: {"a": row, "b": {**row, "row_key": "b"}} for name in check.TABLES})
    same = _tables(
        {name: {"a": {**row, "ingested_at": "2027-01-01"}, "b": {**row, "row_key": "b"}} for name in check.TABLES}
    )
    assert check.table_differences(clean, same) == {}  # written at another time, by another run: equal
    changed = _tables({name: {"a": {**row, "fare": 2.0}, "c": {**row, "row_key": "c"}} for name in check.TABLES})
    said = check.table_differences(clean, changed)
    assert set(said) == set(check.TABLES) and all(v == "1 rows missing, 1 extra, 1 changed" for v in said.values())
    doubled = _tables({name: {"a": row, "b": {**row, "row_key": "b"}} for name in check.TABLES})
    doubled["yellow_taxi_raw"]["doubled"] = ['["a"]']
    assert check.table_differences(clean, doubled) == {"yellow_taxi_raw": "1 keys twice"}


def _event(job: str, kind: str, run: str, version: str, model: str = "ns/actuals", time: str = "t1") -> dict:
    dataset = {"namespace": "iceberg://lakehouse", "name": "nyc_taxi.yellow_taxi_raw"}
    return {
        "eventType": kind,
        "eventTime": time,
        "run": {"runId": run},
        "job": {"name": job},
        "inputs": [{**dataset, "facets": {"version": {"datasetVersion": version}}}],
        "outputs": [
            {
                "namespace": "metaflow://x",
                "name": "nyc_taxi.model",
                "facets": {
                    "version": {"datasetVersion": f"TrainForecastModelFlow/{run}/train/1"},
                    "columnLineage": {"fields": {"wet": {"inputFields": [{**dataset, "field": "pickup_datetime"}]}}},
                },
            }
        ],
    }


def test_the_lineage_check_compares_what_the_versions_hold_not_their_ids():
    contents = {"11": "rows:A", "12": "rows:A", "13": "rows:B"}  # two snapshots holding the same rows

    def resolve(dataset, version):
        return contents.get(version, version)

    clean = check.lineage_edges([_event("Flow.train", "COMPLETE", "r1", "11")], resolve)
    # another run id, another snapshot id of the same rows, a model named by another run: the same edges
    assert check.lineage_edges([_event("Flow.train", "COMPLETE", "r9", "12")], resolve) == clean
    # a failed try's events are not edges; a read of other rows is another edge
    assert (
        check.lineage_edges(
            [_event("Flow.train", "FAIL", "r2", "13"), _event("Flow.train", "COMPLETE", "r1", "11")], resolve
        )
        == clean
    )
    assert check.lineage_edges([_event("Flow.train", "COMPLETE", "r1", "13")], resolve)[0] != clean[0]
    edges, columns = clean
    assert ("Flow.train", "read", "iceberg://lakehouse/nyc_taxi.yellow_taxi_raw", "rows:A") in edges
    assert columns == {
        (
            "Flow.train",
            "metaflow://x/nyc_taxi.model.wet",
            "iceberg://lakehouse/nyc_taxi.yellow_taxi_raw.pickup_datetime",
        )
    }


def test_the_delivery_check_finds_an_event_the_server_lacks_or_holds_twice(tmp_path):
    events = [_event("Dag.task", kind, "r1", "11", time=kind) for kind in ("START", "COMPLETE")]
    events.append(_event("Dag.task", "START", "r2", "11"))  # a try that never completed: not counted
    server = LineageServer(tmp_path / "server.jsonl")
    log = [{"path": OPENLINEAGE_PATH, "status": 201, "body": e} for e in events[:2]]
    log.append(log[1])  # the same COMPLETE sent again (its answer was lost): stored once by its identity
    server.log.write_text("".join(json.dumps(line) + "\n" for line in log))
    stored = server.stored(OPENLINEAGE_PATH)
    assert len(stored) == 2 and check.delivery(events, stored) == {"missing": [], "twice": []}
    assert check.delivery(events, stored[:1]) == {"missing": [("r1", "COMPLETE")], "twice": []}
    other_time = {**stored[1], "body": {**stored[1]["body"], "eventTime": "later"}}  # a second COMPLETE of a run
    assert check.delivery(events, [*stored, other_time])["twice"] == [("r1", "COMPLETE")]


def test_a_request_its_sender_was_killed_in_the_middle_of_is_not_stored(tmp_path):
    # a chaos run's shipper kill cut a DataHub request after its headers: it was logged as stored, empty
    server = LineageServer(tmp_path / "server.jsonl").start()
    proposal = {"proposal": {"entityUrn": "urn:li:dataset:x", "aspectName": "status", "aspect": {"value": "{}"}}}
    whole = json.dumps(proposal).encode()
    try:
        for sent in (b"", whole[: len(whole) // 2]):  # killed after the headers; in the middle of the body
            with socket.create_connection(("127.0.0.1", server.port)) as cut:
                head = f"POST {DATAHUB_INGEST_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(whole)}\r\n\r\n"
                cut.sendall(head.encode() + sent)
        request = urllib.request.Request(server.url + DATAHUB_INGEST_PATH, whole, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200
        deadline = time.monotonic() + 10
        while len(server.requests()) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [r["status"] for r in server.requests() if r["status"] != 200] == [400, 400]
        assert [r["body"] for r in server.stored(DATAHUB_INGEST_PATH)] == [proposal]
    finally:
        server.stop()


_SENDER = """
import json, sys, urllib.request
value = {"value": json.dumps({"removed": sys.argv[3] == "removed"}), "contentType": "application/json"}
record = {"proposal": {"entityUrn": "urn:li:dataset:x", "aspectName": "status", "aspect": value}}
request = urllib.request.Request(sys.argv[1], json.dumps(record).encode(), {"Content-Type": "application/json"})
try:
    urllib.request.urlopen(request, timeout=float(sys.argv[2])).read()
except OSError:
    print("gave up", flush=True)
"""


def test_the_shipper_moment_kills_the_sender_the_server_names_and_holds_the_next_record_when_one_gave_up(tmp_path):
    # a system-lane run found "no sender found": the record's sender had given up waiting (its 2 s request
    # timeout) before the moment looked for it, on a busy machine
    import subprocess
    import sys
    import threading

    from nyc_taxi_proving.chaos import lineage_moments

    server = LineageServer(tmp_path / "server.jsonl").start()
    for name, left in (("held", "{not json"), ("hold", "")):  # left by a run stopped midway
        Path(f"{server.log}.{name}").write_text(left)
    url = server.url + DATAHUB_INGEST_PATH
    impatient = subprocess.Popen([sys.executable, "-c", _SENDER, url, "0.5", "kept"], stdout=subprocess.PIPE, text=True)
    patient = []

    calls = []

    def wait(ready, seconds=1800, step=0.2):  # the moment's waits for a held record, its hold placed
        calls.append(ready)
        if len(calls) == 2:  # the second hold: a sender that waits
            patient.append(
                subprocess.Popen([sys.executable, "-c", _SENDER, url, "60", "removed"], stdout=subprocess.PIPE)
            )
        deadline = time.monotonic() + 30
        while not ready():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        if len(calls) == 1:  # the first: its sender gives up before the moment looks
            assert impatient.stdout.readline().strip() == "gave up" and impatient.wait(10) == 0
        return True

    ctx = SimpleNamespace(server=server, wait=wait, now=lambda: "nothing running")
    try:
        killed = []
        moment = threading.Thread(target=lambda: killed.append(lineage_moments.shipper_after_accept(ctx)))
        moment.start()
        moment.join(60)
        (kill,) = killed
        assert kill.pids == [patient[0].pid] and patient[0].wait(10) == -9, kill
        # both records held went unanswered, each named as the delivery check names it
        kept, removed = (_status_key(flag) for flag in (False, True))
        assert kill.unanswered == [kept, removed], kill.unanswered
        assert "on 127.0.0.1:" in kill.moment and [r["status"] for r in server.requests()] == [200, 200]
        assert not any(Path(f"{server.log}.{name}").exists() for name in ("hold", "held"))
        # every sender gone each time: nothing killed, and the run says so
        gone = lineage_moments.shipper_after_accept(
            SimpleNamespace(server=server, wait=_send_and_give_up(url), now=lambda: ""), tries=2
        )
        assert gone.pids == [] and "each sender had gone" in gone.moment and gone.unanswered == [kept, kept], gone
        assert [r["status"] for r in server.requests()] == [200] * 4  # four records stored, one per hold
    finally:
        server.stop()


def _status_key(removed: bool) -> str:
    value = {"value": json.dumps({"removed": removed}), "contentType": "application/json"}
    return check.record_key(
        DATAHUB_INGEST_PATH, {"proposal": {"entityUrn": "urn:li:dataset:x", "aspectName": "status", "aspect": value}}
    )


def _send_and_give_up(url):
    import subprocess
    import sys

    def wait(ready, seconds=1800, step=0.2):
        sender = subprocess.run([sys.executable, "-c", _SENDER, url, "0.3", "kept"], capture_output=True, text=True)
        assert sender.stdout.strip() == "gave up" and ready()
        return True

    return wait


def test_a_held_moment_is_described_when_a_busy_api_answers_late_and_a_kill_fires_only_while_it_holds(
    tmp_path, monkeypatch
):
    # a CI run killed PostgreSQL mid-commit with "(the API does not answer)" for what ran: its one try
    # timed out after 5 s while the machine was busy
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from nyc_taxi.airflow_adapter.rest_api import passwords_file
    from nyc_taxi.core.settings import Settings
    from nyc_taxi_proving.chaos import moments

    answers = []

    class SlowAirflow(BaseHTTPRequestHandler):
        def do_POST(self):  # the token
            self.rfile.read(int(self.headers["Content-Length"]))
            self._send({"access_token": "t"})

        def do_GET(self):
            answers.append(self.path)
            if len(answers) == 2:  # a refusal, asked again
                self.send_error(503)
                return
            if len(answers) <= 3:
                time.sleep(7)  # longer than one try of 5 s waits
            self._send({"task_instances": [{"dag_id": "d", "task_id": "merge", "try_number": 2, "state": "running"}]})

        def _send(self, body):
            data = json.dumps(body).encode()
            with contextlib.suppress(OSError):
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowAirflow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = Settings(state_dir=tmp_path, profile="local", airflow_port=server.server_address[1])
    settings.airflow_home.mkdir(parents=True)
    passwords_file(settings).write_text(json.dumps({"admin": "generated"}))
    ctx = moments.Context(settings, None, threading.Event())
    try:
        assert ctx.now(seconds=5) == "(the API does not answer)"  # as a moment that passes by itself
        assert ctx.now(seconds=moments.HELD_DESCRIBED_WITHIN) == "d.merge try 2"  # as a held one
        assert len(answers) == 3
        # a held moment that ended while it was described is an error, and nothing is killed
        killed = []
        monkeypatch.setattr(
            ctx, "supervisor", lambda: SimpleNamespace(programs=lambda: [{"name": "postgres", "pid": 1}])
        )
        monkeypatch.setattr(moments.components, "kill", lambda component, pid: killed.append(pid))
        with pytest.raises(RuntimeError, match="ended while it was described"):
            moments._kill_program(ctx, "postgres", "PostgreSQL mid-commit", held=lambda: False)
        assert killed == []
        moments._kill_program(ctx, "postgres", "PostgreSQL mid-commit", held=lambda: True)
        assert killed == [1]
    finally:
        server.shutdown()


def test_a_killed_sender_is_named_by_its_title_or_its_command():
    # seed 2's shipper kill named its two senders "  ,  ": Airflow's task runners set their title, and
    # the rest of their command line reads as empty words
    import subprocess
    import sys

    import psutil

    from nyc_taxi_proving.chaos.lineage_moments import process_name

    titled = "import setproctitle, time; setproctitle.setproctitle('airflow task runner: d t r'); print(1, flush=True); time.sleep(30)"
    plain = "import time; print(1, flush=True); time.sleep(30)"
    started = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) for code in (titled, plain)]
    try:
        for process in started:
            process.stdout.readline()
        assert process_name(psutil.Process(started[0].pid)) == "airflow task runner: d t r"
        assert process_name(psutil.Process(started[1].pid)) == f"-c {plain}"[:80]
    finally:
        for process in started:
            process.kill()
            process.wait()


def test_a_sender_killed_on_its_connection_prints_no_traceback_from_the_server(tmp_path):
    # seed 1's shipper kill left the server's traceback for a reset connection in the chaos run's output
    import struct
    import subprocess
    import sys

    server = subprocess.Popen(
        [sys.executable, "-m", "nyc_taxi_proving.fixtures.lineage_server", str(tmp_path / "server.jsonl")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(server.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)) as sender:
            sender.sendall(b"GET /config HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.3)  # answered (unread); the server waits on the kept-open connection for the next request
            # closed as by a kill: a reset, not a goodbye
            sender.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        time.sleep(0.5)
    finally:
        server.kill()
        server.wait()
    assert server.stderr.read() == ""


# ---- the ways a chaos run could pass without checking, each closed ------------------------------------------


def test_a_chaos_run_with_no_fault_is_refused_and_passes_nothing():
    from nyc_taxi_proving.chaos.run import chaos, passed
    from nyc_taxi_proving.cli.chaos import main

    with pytest.raises(SystemExit) as refused:
        main(["--faults", "0"])
    assert refused.value.code == 2
    with pytest.raises(ValueError, match="at least one fault"):
        chaos(0, 1, 5, 100, 1, None)
    assert passed({"runs": []}) is False  # all() over no runs would say True
    assert passed({"runs": [{**_run_verdicts(), "faults": []}]}) is False


def _run_verdicts(**changed) -> dict:
    verdicts = {
        "tables equal": True,
        "tables as published": True,
        "files readable": True,
        "lineage equal": True,
        "delivered once": True,
        "nothing left": True,
        "runs failed": [],
        "runs equal": True,
        "runs as triggered": [],
        "lineage as written out": True,
    }
    return {**verdicts, **changed}


def _fault_result(**changed) -> dict:
    return {
        "pids": [42],
        "proven": "supervisord: redis pid 42 exited, terminated by SIGKILL",
        "recovered_s": 3.0,
        "error": "",
        **changed,
    }


def test_a_fault_that_killed_nothing_is_an_error_and_fails_the_run(monkeypatch):
    from nyc_taxi_proving.chaos import run as chaos_run
    from nyc_taxi_proving.chaos.moments import Kill

    fault = Fault(1, 1, "month 2024-01", "lineage shipper", "lineage shipper after the server accepted")
    ctx = SimpleNamespace(wait=lambda *args, **kwargs: True)
    said = []
    # the shipper moment found no sender connected to the server: nothing was killed
    monkeypatch.setattr(chaos_run, "_kill", lambda c, f: Kill("lineage shipper", [], "no sender found", time.time()))
    chaos_run._inject(ctx, fault, SimpleNamespace(step=fault.step, passed=[]), said.append)
    assert fault.error == "RuntimeError: killed nothing: no sender found" and fault.recovered_s is None
    assert not chaos_run.passed({"runs": [{**_run_verdicts(), "faults": [_fault_result(pids=[], error="")]}]})
    assert chaos_run.passed({"runs": [{**_run_verdicts(), "faults": [_fault_result()]}]})
    assert not chaos_run.passed({"runs": [{**_run_verdicts(), "faults": [_fault_result(proven="")]}]})


def test_a_killed_shipper_is_back_when_a_later_shipping_reaches_the_server_and_an_unknown_kill_never_is(tmp_path):
    from nyc_taxi_proving.chaos import run as chaos_run
    from nyc_taxi_proving.chaos.moments import Kill

    log = tmp_path / "server.jsonl"
    server = LineageServer(log)
    killed_at = time.time()
    log.write_text(json.dumps({"path": OPENLINEAGE_PATH, "received": killed_at - 1, "status": 201, "body": {}}) + "\n")
    ctx = SimpleNamespace(server=server, supervisor=lambda: None)
    kill = Kill("lineage shipper", [42], "the shipper", killed_at)
    fault = Fault(1, 1, "month 2024-01", "lineage shipper", "lineage shipper after the server accepted")
    monkey = chaos_run.RECOVERY_BOUND
    try:
        chaos_run.RECOVERY_BOUND = 1  # no shipping after the kill: not back (it was "back" at once before)
        with pytest.raises(RuntimeError, match="not back within"):
            chaos_run._recovered(ctx, fault, kill)
        with log.open("a") as out:  # the next task's shipping reaches the server
            out.write(json.dumps({"path": OPENLINEAGE_PATH, "received": time.time(), "status": 201, "body": {}}) + "\n")
        assert chaos_run._recovered(ctx, fault, kill) >= 0
        with pytest.raises(RuntimeError, match="not back within"):  # what no check knows is never back
            chaos_run._recovered(ctx, fault, Kill("something else", [42], "?", time.time()))
    finally:
        chaos_run.RECOVERY_BOUND = monkey


def _result(**changed):
    from nyc_taxi_proving.chaos import expected
    from nyc_taxi_proving.chaos.run import Result

    tables = {name: {"rows": 10, "doubled": [], "by_key": {}} for name in check.TABLES}
    fields = {
        "run": 0,
        "faults": [],
        "tables": tables,
        "unexpected": {},
        "unreadable": [],
        "edges": {(job, kind, f"ns//{name}", "v1") for job, kind, name in expected.mission_edges(False)},
        "columns": set(),
        "delivery": {"once": True},
        "leftovers": [],
        "runs": [
            {
                "dag_id": "ingest_yellow_taxi_data",
                "run_id": "r",
                "state": "success",
                "type": "manual",
                "conf": {"month": "2024-01"},
            },
            {
                "dag_id": "train_forecast_model",
                "run_id": "t",
                "state": "success",
                "type": "asset_triggered",
                "conf": {},
            },
        ],
        "seconds": 1.0,
        "triggered": [("ingest_yellow_taxi_data", {"month": "2024-01"})],
        "merges": 1,
    }
    return Result(**{**fields, **changed})


def test_the_clean_run_is_checked_on_its_own_rows_keys_expectations_and_delivery():
    assert _result().problems() == []
    empty = {name: {"rows": 0, "doubled": [], "by_key": {}} for name in check.TABLES}
    assert "yellow_taxi_raw holds no rows" in _result(tables=empty).problems()
    doubled = {**_result().tables, "weather_raw": {"rows": 10, "doubled": ["k"], "by_key": {}}}
    assert _result(tables=doubled).problems() == ["weather_raw: 1 keys twice"]
    wrong = _result(unexpected={"yellow_taxi_raw": "not the published trips of f"})
    assert wrong.problems() == ["yellow_taxi_raw: not the published trips of f"]
    assert _result(edges=set()).problems() == ["the lineage server received no lineage of a successful run"]
    assert len(_result(delivery={"once": False}).problems()) == 1


def _train_and_predict(run: str, raw_version: str) -> list[dict]:
    model = {"namespace": "metaflow://x", "name": "nyc_taxi.model"}
    pathspec = f"TrainForecastModelFlow/{run}/train/1"
    train = _event("Flow.train", "COMPLETE", run, raw_version)
    predict = {
        "eventType": "COMPLETE",
        "eventTime": "t2",
        "run": {"runId": f"{run}-predict"},
        "job": {"name": "Flow.predict"},
        "inputs": [{**model, "facets": {"version": {"datasetVersion": pathspec}}}],
        "outputs": [],
    }
    return [train, predict]


def test_a_model_resolves_to_the_versions_it_was_trained_from():
    contents = {"11": "rows:A", "12": "rows:A", "13": "rows:B"}

    def resolve(dataset, version):
        return contents.get(version, version)

    same = check.lineage_edges(_train_and_predict("r1", "11"), resolve)
    assert check.lineage_edges(_train_and_predict("r9", "12"), resolve) == same  # other run, same data
    other = check.lineage_edges(_train_and_predict("r9", "13"), resolve)[0]
    predict_reads = {e for e in other if e[0] == "Flow.predict"}
    assert predict_reads and predict_reads.isdisjoint(same[0])  # a model trained from other data is another model
    [read] = [e for e in same[0] if e[0] == "Flow.predict"]
    assert read[3] == 'trained from [["iceberg://lakehouse/nyc_taxi.yellow_taxi_raw", "rows:A"]]'


def test_the_mission_s_events_are_told_by_their_run_type_not_by_a_word_anywhere_in_them():
    from nyc_taxi_proving.chaos.readings import mission_events

    def event(run_type: str, note: str) -> dict:
        facets = {"airflow": {"dagRun": {"run_id": f"{run_type}__2026", "run_type": run_type}}, "tags": note}
        return {"eventType": "COMPLETE", "run": {"runId": run_type, "facets": facets}, "job": {"name": "d.t"}}

    manual = event("manual", "a parameter that says scheduled__ somewhere")
    flow_step = {"eventType": "COMPLETE", "run": {"runId": "s", "facets": {}}, "job": {"name": "Flow.step"}}
    assert mission_events([manual, event("scheduled", ""), flow_step]) == [manual, flow_step]


def test_lineage_is_compared_as_the_server_received_it_and_datahub_delivery_counts_a_second_send(tmp_path, monkeypatch):
    from nyc_taxi.core.settings import Settings
    from nyc_taxi.lineage.write.outbox import Outbox

    log = tmp_path / "server.jsonl"
    server = LineageServer(log)
    events = _train_and_predict("r1", "11")
    status = {"entityType": "dataset", "entityUrn": "urn:li:dataset:x", "changeType": "UPSERT"}
    status |= {"aspectName": "status", "aspect": {"json": {"removed": False}}}
    value = {"value": '{"removed": false}', "contentType": "application/json"}
    proposal = {"proposal": {"entityUrn": "urn:li:dataset:x", "aspectName": "status", "aspect": value}}
    requests = [{"path": OPENLINEAGE_PATH, "received": 1, "status": 201, "body": e} for e in events]
    requests += [{"path": DATAHUB_INGEST_PATH, "received": 2, "status": 200, "body": proposal}] * 2  # sent twice
    log.write_text("".join(json.dumps(r) + "\n" for r in requests))
    monkeypatch.setattr(check, "VersionResolver", lambda state: lambda dataset, version: version)
    # nothing in the deployment's own outbox: the edges are what the server received
    edges, _ = readings.received_lineage(server, tmp_path)
    assert {e[0] for e in edges} == {"Flow.train", "Flow.predict"}
    settings = Settings(_env_file=None, state_dir=tmp_path / "state")
    outbox = Outbox(settings, "airflow")
    outbox.add_records([status])  # the outbox holds it once, the server accepted it twice
    again = check.record_key(DATAHUB_INGEST_PATH, proposal)
    assert readings.delivery_of(settings, server, unanswered=[])["once"] is False  # a record accepted twice
    assert readings.delivery_of(settings, server, unanswered=[again])["once"] is True  # the one a shipper resent
    other = check.record_key(DATAHUB_INGEST_PATH, {"proposal": {**proposal["proposal"], "aspectName": "x"}})
    said = readings.delivery_of(settings, server, unanswered=[other])  # a record held was another one
    assert said["once"] is False and said["sent again unexplained"] == [again], said
    # two runs wrote the same aspect with the same value (a dataset's status): two records, each sent once
    outbox.add_records([status])
    assert readings.delivery_of(settings, server, unanswered=[])["once"] is True
    assert readings.delivery_of(settings, server, unanswered=[])["sent again"] == 0


def test_the_chaos_runs_expectations_agree_with_the_suites_own_reading_of_the_files(tmp_path):
    """The chaos command's oracle (chaos/expected.py, from the registry's column declarations) and the
    suite's (tests/expected_loads.py, from columns written out by hand) read the same files alike."""
    import datetime as dt

    import pyarrow as pa
    from expected_loads import (
        comparable,
        expected_actuals,
        expected_daily_prcp,
        expected_taxi_rows,
        expected_weather,
        expected_weather_adjusted,
        seasonal_naive,
    )

    from nyc_taxi_proving.chaos import expected
    from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month

    months = ((2019, 3), (2019, 4))
    files = [add_taxi_month(tmp_path, y, m, rows=3_000, seed=m) for y, m in months]
    for y, m in months:
        add_weather_month(tmp_path, y, m, seed=m, n_counties=30)
    for path in files:
        rows = expected.taxi_rows(path)
        names = ["source_file", *(c.name for c in expected.d.YELLOW_TRIP_COLUMNS)]
        mine = comparable(pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)}, schema=None))
        assert mine.equals(comparable(expected_taxi_rows(path)))
    assert expected.weather_rows(tmp_path, 2019, 4) == expected_weather(tmp_path, 2019, 4, "scaled")
    assert expected.daily_rain(tmp_path, months) == expected_daily_prcp(tmp_path, months)
    as_of = dt.datetime(2019, 4, 15)
    window = (as_of - dt.timedelta(days=28), as_of + dt.timedelta(hours=24))
    counts = expected.hourly_rides(files, *window)
    assert counts == expected_actuals(files, *window)
    assert expected.seasonal_naive(counts, as_of) == seasonal_naive(counts, as_of, 24)
    _, adjusted = expected_weather_adjusted(counts, expected_daily_prcp(tmp_path, months), as_of, 24)
    assert expected.weather_adjusted(counts, expected.daily_rain(tmp_path, months), as_of) == adjusted


def test_a_dag_run_twice_or_not_triggered_fails_the_run_even_with_equal_tables():
    """A duplicate asset-triggered training writes the same rows as the clean run's one: the tables and the
    edge sets cannot tell. The runs can: each DAG's runs (type, conf) against what the mission triggered and
    against the clean run's."""
    clean = _result()
    twice = _result(runs=[*clean.runs, {**clean.runs[1], "run_id": "t2"}])
    assert any("2 asset-triggered runs" in said for said in twice.problems())
    assert check.runs_by_kind(clean.runs) != check.runs_by_kind(twice.runs)
    missing = _result(runs=clean.runs[1:])
    assert any("manual runs []" in said for said in missing.problems())
    other = _result(
        runs=[
            *clean.runs,
            {
                "dag_id": "ingest_weather_data",
                "run_id": "w",
                "state": "success",
                "type": "manual",
                "conf": {"month": "2024-01"},
            },
        ]
    )
    assert any("the mission triggered" in said for said in other.problems())
    assert check.runs_by_kind(clean.runs) == check.runs_by_kind(_result().runs)


def test_lineage_is_compared_with_the_edges_written_out_by_hand():
    from nyc_taxi_proving.chaos import expected

    assert _result().problems() == []
    edges = _result().edges
    dropped = {e for e in edges if not (e[0].endswith(".compute_actuals") and e[1] == "write")}
    assert any("lineage: missing" in said for said in _result(edges=dropped).problems())
    weather = edges | {(job, kind, f"ns//{name}", "v") for job, kind, name in expected.WEATHER_ADJUSTED_EDGES}
    assert any("not written out" in said for said in _result(edges=weather).problems())
    assert _result(edges=weather, weather_adjusted=True).problems() == []


def test_a_kill_is_proven_by_supervisords_logs_of_that_pid_and_a_victim_already_gone_is_not(tmp_path, monkeypatch):
    """A program's kill counts when supervisord's process-states log saw that very pid exit and its own log
    says SIGKILL ended it, both after the kill; an exit of another pid, or a program that died of something
    else (exit status 1), does not. A task's process that had exited before the kill was not killed."""
    import datetime as dt
    import signal
    import subprocess

    from nyc_taxi.core.settings import Settings
    from nyc_taxi_proving.chaos import components
    from nyc_taxi_proving.deployment.supervisor import logs_dir

    settings = Settings(_env_file=None, profile="team", state_dir=tmp_path)
    logs = logs_dir(settings)
    logs.mkdir(parents=True)
    now = time.time()
    stamp = dt.datetime.fromtimestamp(now + 1).strftime("%Y-%m-%d %H:%M:%S,%f")[:23]
    (logs / "process-states.jsonl").write_text(
        json.dumps({"time": now + 1, "process": "redis", "to": "EXITED", "pid": 42, "expected": 0}) + "\n"
    )
    spawned = f"{stamp} INFO spawned: 'redis' with pid 42\n"
    sigkill = f"{stamp} WARN exited: redis (terminated by SIGKILL; not expected)\n"
    (logs / "supervisord.log").write_text(spawned + sigkill)
    assert "pid 42 exited, terminated by SIGKILL" in components.exited_by_sigkill(settings, "redis", 42, now)
    assert components.exited_by_sigkill(settings, "redis", 43, now) is None  # another pid
    assert components.exited_by_sigkill(settings, "redis", 42, now + 60) is None  # before the kill
    (logs / "supervisord.log").write_text(spawned + f"{stamp} WARN exited: redis (exit status 1; not expected)\n")
    assert components.exited_by_sigkill(settings, "redis", 42, now) is None  # died of something else
    # the SIGKILL supervisord saw was another process's: 42 exited before, the one spawned after it killed
    (logs / "supervisord.log").write_text(
        spawned + f"{stamp} WARN exited: redis (exit status 1; not expected)\n"
        f"{stamp} INFO spawned: 'redis' with pid 44\n" + sigkill
    )
    assert components.exited_by_sigkill(settings, "redis", 42, now) is None

    gone = subprocess.Popen(["true"])
    gone.wait()
    assert components.kill(components.COMPONENTS["spark-driver"], gone.pid) is False
    alive = subprocess.Popen(["sleep", "30"])
    assert components.kill(components.COMPONENTS["spark-driver"], alive.pid) is True
    assert alive.wait(timeout=10) == -signal.SIGKILL


def test_the_hosts_plan_follows_from_the_seed_holds_the_issues_faults_and_a_run_passes_only_when_all_hold():
    from dataclasses import asdict

    from nyc_taxi_proving.chaos import across_hosts
    from nyc_taxi_proving.chaos import host_faults as faults_module
    from nyc_taxi_proving.chaos import hosts_plan as hosts

    plans = [hosts.plan(seed) for seed in range(1, 9)]
    assert [asdict(f) for f in hosts.plan(3)] == [asdict(f) for f in plans[2]]
    assert len({tuple((f.step, f.component, f.delay, f.lasts) for f in p) for p in plans}) > 1  # the seed chooses
    assert len({next(f.held for f in p if f.moment == hosts.LATENCY) for p in plans}) > 1  # the latency's too
    for faults in plans:
        assert [f.number for f in faults] == list(range(1, 8))
        assert {f.moment for f in faults} == set(
            faults_module.MOMENTS
        )  # every kind once, the four the issue names among them
        by = {f.moment: f for f in faults}
        assert by[hosts.LOST_MID_MERGE].step != by[hosts.CUT_AT_COMMIT].step  # two merge faults, a month each
        assert by[hosts.LOST_IN_FLOW].step == "backtest" and by[hosts.LOSS].component in ("worker-a", "worker-b")
        # the latency in the month no host is lost in (the delayer would die with a lost host), 50-150 ms
        assert (
            by[hosts.LATENCY].step == by[hosts.CUT_AT_COMMIT].step
            and 0.05 <= by[hosts.LATENCY].held <= 0.15
            and by[hosts.LATENCY].delay == 0
        )
        latency, loss = by[hosts.LATENCY], by[hosts.LOSS]  # never on the link the loss is on at the same time
        assert (latency.step, latency.component) != (loss.step, loss.component)
        assert all(f.lasts > 0 for f in faults if f.moment not in (hosts.LOST_MID_MERGE, hosts.LOST_IN_FLOW))

    def report(**changes) -> dict:
        faults = [asdict(f) | {"proven": "seen", "recovered_s": 3.0} for f in plans[0]]
        for fault in faults:  # a lost host's task done by a later try, the flow's resuming its run
            if fault["moment"] in (hosts.LOST_MID_MERGE, hosts.LOST_IN_FLOW):
                fault["task"] = {"try_number": 1, "done_by_try": 2, "resumed": "TrainForecastModelFlow/1"}
        checks = {key: [] for key in ("tables not as published", "lineage not delivered once", "left")} | {
            "rows": {"a": 1}
        }
        found = {"faults": faults, "checks": checks}
        for key, value in changes.items():
            if key == "fault":
                faults[0] |= value
            else:
                checks[key] = value
        return found

    assert across_hosts.passed(report())
    assert not across_hosts.passed(report(fault={"error": "its moment did not come"}))
    assert not across_hosts.passed(report(fault={"proven": ""}))
    assert not across_hosts.passed(report(fault={"recovered_s": None}))
    assert not across_hosts.passed(report(left=["task x running"]))
    assert not across_hosts.passed(
        report(**{"lineage not delivered once": ["worker-a: 3 records sent, control holds 6"]})
    )
    assert not across_hosts.passed(report() | {"faults": report()["faults"][:5]})
    assert not across_hosts.passed(report(fault={"recovered_s": 121.0}))  # beyond the bound, from the fault's end
    lost = report()
    merge = next(f for f in lost["faults"] if f["moment"] == hosts.LOST_MID_MERGE)
    merge["task"]["done_by_try"] = 1  # done by the try the host took with it: the kill did not hit it
    assert not across_hosts.passed(lost)
    unresumed = report()
    next(f for f in unresumed["faults"] if f["moment"] == hosts.LOST_IN_FLOW)["task"]["resumed"] = ""
    assert not across_hosts.passed(unresumed)


def test_a_training_try_s_log_says_which_run_it_ran_and_which_it_resumed_as_the_operator_writes_it():
    """The hosts' flow fault reads what each try ran from its log, in the words the training operator
    logs (Metaflow's resume is a new run: the line names its origin)."""
    from nyc_taxi.airflow_adapter.operators import run_said
    from nyc_taxi_proving.chaos.host_faults import run_logged

    def log(earlier, run) -> list[dict]:
        return [{"event": "some other line"}, {"event": run_said(earlier, run, {"model": "weather_adjusted"})}]

    assert run_logged(log(None, "TrainForecastModelFlow/7")) == ("", "TrainForecastModelFlow/7")
    assert run_logged(log("TrainForecastModelFlow/7", "TrainForecastModelFlow/9")) == (
        "TrainForecastModelFlow/7",
        "TrainForecastModelFlow/9",
    )
    assert run_logged([{"event": "TrainForecastModelFlow/7 finished in an earlier try"}]) == ("", "")


def test_a_datahub_record_is_one_record_whether_its_value_came_as_a_string_or_an_object_in_any_key_order(tmp_path):
    """The chaos checks and the fixture server name a DataHub record by one function: its value sent as a
    string (REST) or held as an object (a file's record), its keys in any order, is the same record; and
    the server's store keeps one of two such acceptances."""
    import datahub.metadata.schema_classes as dhs
    from datahub.emitter.mcp import MetadataChangeProposalWrapper

    from nyc_taxi.core import datasets as registry
    from nyc_taxi.core.naming import identity
    from nyc_taxi.core.settings import Settings
    from nyc_taxi_proving.fixtures.lineage_server import DATAHUB_INGEST_PATH, LineageServer, datahub_identity

    urn = identity(registry.YELLOW_TAXI_RAW, Settings(_env_file=None, state_dir=tmp_path)).datahub_urn
    aspect = dhs.DatasetPropertiesClass(
        name=registry.YELLOW_TAXI_RAW.name, description="trips", customProperties={"a": "1", "b": "2"}
    )
    sent = MetadataChangeProposalWrapper(entityUrn=urn, aspect=aspect).make_mcp().to_obj()  # REST: the value a string
    value = json.loads(sent["aspect"]["value"])
    held = {**sent, "aspect": {"json": dict(reversed(value.items()))}}  # a file's record, its keys in another order
    assert datahub_identity(sent) == datahub_identity(held) == check.record_key(DATAHUB_INGEST_PATH, {"proposal": held})
    other = {**held, "aspect": {"json": {**value, "description": "other trips"}}}
    assert datahub_identity(sent) != datahub_identity(other)
    server = LineageServer(tmp_path / "requests.log").start()
    try:
        for proposal in (
            sent,
            {**sent, "aspect": {**sent["aspect"], "value": json.dumps(dict(reversed(value.items())))}},
        ):
            request = urllib.request.Request(
                f"{server.url}{DATAHUB_INGEST_PATH}",
                data=json.dumps({"proposal": proposal}).encode(),
                headers={"Content-Type": "application/json"},
            )
            urllib.request.urlopen(request, timeout=10).close()
        assert len(server.accepted(DATAHUB_INGEST_PATH)) == 2 and len(server.stored(DATAHUB_INGEST_PATH)) == 1
    finally:
        server.stop()


def test_a_programs_latest_heartbeat_is_what_the_api_servers_health_says_and_none_when_it_does_not_say(tmp_path):
    """What the scheduler's partition is proven by (its heartbeat's age): the API server's health answer,
    read on the deployment's address; None when it does not answer or names no heartbeat (no proof)."""
    import datetime as dt
    import http.server
    import threading

    from nyc_taxi.core.settings import Settings
    from nyc_taxi_proving.deployment.services import latest_heartbeat

    answers = [{"scheduler": {"status": "healthy", "latest_scheduler_heartbeat": "2026-11-29T12:00:05.5+00:00"}}, {}]

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(answers.pop(0) if self.path == "/api/v2/monitor/health" else {}).encode()
            self.send_response(200 if self.path == "/api/v2/monitor/health" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = Settings(_env_file=None, state_dir=tmp_path, airflow_port=server.server_address[1])
    try:
        assert (
            latest_heartbeat(settings, "airflow-scheduler")
            == dt.datetime(2026, 11, 29, 12, 0, 5, 500000, dt.UTC).timestamp()
        )
        assert latest_heartbeat(settings, "airflow-scheduler") is None  # it answered, naming none
    finally:
        server.shutdown()
        server.server_close()
    assert latest_heartbeat(settings, "airflow-scheduler") is None  # it does not answer


def test_a_shipper_moment_stopped_while_it_waits_for_a_held_record_ends_with_that_error_and_leaves_no_hold(tmp_path):
    """A run stopped while the moment waits for the server to hold a record: the moment ends with the
    stop's own error at once (not a release nobody takes), and no hold or release stays for a later run."""
    from nyc_taxi_proving.chaos import lineage_moments

    server = LineageServer(tmp_path / "server.jsonl").start()

    def wait(ready, seconds=1800, step=0.2):
        raise TimeoutError("the run was stopped")

    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="the run was stopped"):
            lineage_moments.shipper_after_accept(SimpleNamespace(server=server, wait=wait))
        assert time.monotonic() - started < 5
        assert not [p for p in tmp_path.iterdir() if p.name.endswith((".hold", ".held", ".release"))]
    finally:
        server.stop()


def _mission_scores(root: Path, wape: float, scored_at: dt.datetime, twice: bool = False):
    """A lake of the mission's last tables through pyiceberg (its SQL catalog, files on disk): actuals, the
    forecast, and a score of it naming the snapshots it was computed from, scored at ``scored_at`` (``twice``:
    the score appended again, its key doubled); the lineage's version of the scores (its snapshot id)
    resolved by the chaos check."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from nyc_taxi.core.tables import iceberg_schema

    root.mkdir(parents=True)
    lake = SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    lake.create_namespace("nyc_taxi")

    def table_of(declared, rows: dict, times: int = 1):
        schema = iceberg_schema(declared)
        table = lake.create_table(f"nyc_taxi.{declared.name}", schema)
        arrow = schema.as_arrow()
        for _ in range(times):
            table.append(pa.Table.from_pydict({f.name: rows.get(f.name, [None]) for f in arrow}, schema=arrow))
        return table

    hour, origin = dt.datetime(2024, 2, 15, 1), dt.datetime(2024, 2, 15)
    actuals = table_of(
        d.YELLOW_RIDES_HOURLY_ACTUALS,
        {"pickup_location_id": [1], "pickup_hour": [hour], "ride_count": [3], "computed_at": [scored_at]},
    )
    forecast = table_of(
        d.YELLOW_RIDES_HOURLY_FORECAST,
        {
            "model_name": ["seasonal_naive"],
            "as_of_datetime": [origin],
            "pickup_location_id": [1],
            "forecast_hour": [hour],
            "predicted_ride_count": [2.0],
            "model_version": [f"F/{scored_at:%s}/train/1"],
            "created_at": [scored_at],
        },
    )
    scores = table_of(
        d.YELLOW_RIDES_FORECAST_SCORES,
        {
            "model_name": ["seasonal_naive"],
            "as_of_datetime": [origin],
            "model_version": [f"F/{scored_at:%s}/t/1"],
            "first_hour": [hour],
            "last_hour": [hour],
            "forecast_zone_hours": [1],
            "scored_zone_hours": [1],
            "coverage": [1.0],
            "actual_rides": [3],
            "predicted_rides": [2.0],
            "mae": [1.0],
            "wape": [wape],
            "bias": [-1.0],
            "forecast_snapshot_id": [forecast.current_snapshot().snapshot_id],
            "actuals_snapshot_id": [actuals.current_snapshot().snapshot_id],
            "scored_at": [scored_at],
        },
        times=2 if twice else 1,
    )
    resolve = check.VersionResolver(None, lake=lake)
    version = resolve("nyc_taxi.yellow_rides_forecast_scores", str(scores.current_snapshot().snapshot_id))
    by_key, doubled = check.table_rows(scores, resolve=resolve)  # as the chaos run's table check reads it
    return version, {"by_key": by_key, "doubled": doubled}


def _tables_with(scores: dict) -> dict:
    """The chaos check's tables of a run whose scores are ``scores`` and whose other tables are empty."""
    return {
        name: scores if name == d.YELLOW_RIDES_FORECAST_SCORES.name else {"by_key": {}, "doubled": []}
        for name in check.TABLES
    }


def test_the_scores_lineage_compares_their_figures_and_the_versions_they_name_never_when_they_were_taken(tmp_path):
    """Two runs of the mission write the same scores at other moments, of forecasts and actuals under
    other snapshot ids: their lineage is equal (bash run chaos failed on exactly this). A score whose WAPE
    differs is not. The report says which columns it leaves out, and why."""
    first, first_rows = _mission_scores(tmp_path / "clean", 0.25, dt.datetime(2026, 11, 27, 10, tzinfo=dt.UTC))
    again, again_rows = _mission_scores(tmp_path / "faulty", 0.25, dt.datetime(2026, 11, 27, 11, 30, tzinfo=dt.UTC))
    other, other_rows = _mission_scores(tmp_path / "wrong", 0.26, dt.datetime(2026, 11, 27, 10, tzinfo=dt.UTC))
    assert first.startswith("rows:") and first == again and other != first
    doubled, doubled_rows = _mission_scores(
        tmp_path / "doubled", 0.25, dt.datetime(2026, 11, 27, 10, tzinfo=dt.UTC), True
    )
    assert doubled != first
    # the table check, row for row, says the same: the scores equal but for when they were taken; a WAPE differs
    scores = d.YELLOW_RIDES_FORECAST_SCORES.name
    assert check.table_differences(_tables_with(first_rows), _tables_with(again_rows)) == {}
    assert check.table_differences(_tables_with(first_rows), _tables_with(other_rows)) == {
        scores: "0 rows missing, 0 extra, 1 changed"
    }
    assert check.table_differences(_tables_with(first_rows), _tables_with(doubled_rows)) == {scores: "1 keys twice"}
    assert "scored_at" in check.LEFT_OUT and "forecast_snapshot_id" in check.LEFT_OUT
    assert check.LEFT_OUT in chaos_run.table({"runs": []})
