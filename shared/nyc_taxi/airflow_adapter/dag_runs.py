"""`python -m nyc_taxi.airflow_adapter.dag_runs DAG_ID[:CONF_JSON] ...`: DAG runs in the order given.
Prints each run's task states and seconds, one JSON line per run, alone on stdout (everything else
the runs print goes to stderr); exits 1 if one failed.

Where the state directory's Airflow deployment runs (the team profile's `bash run team up`), each run
is triggered through the REST API, as the UI's Trigger button does, and the scheduler runs it on the
Celery workers. Runs given one after another whose DAGs share no dataset (``Pipeline.runs_beside``: a
month's taxi and weather loads) are triggered together, so the workers run them at once; a run starts
once the runs before it of the same DAG (those the scheduler started from asset events too) have ended,
and the command returns when no run of any DAG is left (across hosts, on control, and every task's
lineage has reached control: exit 1 naming those that did not). Otherwise each run is Airflow's own
``dag.test()`` in this one process (what `airflow dags test` does for one run), one after another, so the
runs share one Python process and one Spark JVM.

    python -m nyc_taxi.airflow_adapter.dag_runs 'ingest_yellow_taxi_data:{"month": "2024-01"}' ingest_weather_data
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time

from nyc_taxi.core.progress import progress


def main(argv: list[str]) -> int:
    from nyc_taxi.airflow_adapter.rest_api import RestApi, base_url, health
    from nyc_taxi.core.lakehouse import lakehouse
    from nyc_taxi.core.settings import get_settings

    if not argv:
        sys.exit(__doc__)
    settings = get_settings()
    if lakehouse(settings).airflow_deployment and health(base_url(settings)) is not None:
        api, since = RestApi(settings), dt.datetime.now(dt.UTC).isoformat()
        failed = through_the_scheduler(api, argv)
        missing = _lineage_missing(settings, api, since)  # a failed run's lineage is read next too
        return failed or missing
    return in_this_process(argv)


def _parse(spec: str) -> tuple[str, dict]:
    dag_id, _, conf = spec.partition(":")
    return dag_id, json.loads(conf) if conf else {}


def together(specs: list[str]) -> list[list[tuple[str, dict]]]:
    """The runs in groups that may run at once: each run joins the group of the runs given just before it
    when its DAG runs beside each of theirs (the project's DAGs; another DAG runs alone)."""
    from nyc_taxi.core.jobs import PIPELINES

    groups: list[list[tuple[str, dict]]] = []
    for spec in specs:
        dag_id, conf = _parse(spec)
        mine = PIPELINES.get(dag_id)
        if groups and mine and all(o in PIPELINES and mine.runs_beside(PIPELINES[o]) for o, _ in groups[-1]):
            groups[-1].append((dag_id, conf))
        else:
            groups.append([(dag_id, conf)])
    return groups


def through_the_scheduler(api, specs: list[str]) -> int:
    """Each group's runs triggered together; each run's line once its group has ended, its seconds from its
    trigger to its end (beside the group's other runs). When Airflow refuses a trigger (its reason said at
    once), the runs of its group triggered before it are waited for and said, then the refusal is raised."""
    import urllib.error

    failed = False
    for group in together(specs):
        triggered, refused, ended = [], None, {}
        for dag_id, conf in group:
            try:
                api.idle(dag_id)  # a DAG Airflow does not know is refused here (404)
                started = time.perf_counter()
                triggered.append((dag_id, conf, api.trigger(dag_id, conf), started))
            except urllib.error.HTTPError as error:  # said now: waiting for the group may end in another error
                print(
                    f"{dag_id}: Airflow refused the run: {error} {error.read().decode(errors='replace')}",
                    file=sys.stderr,
                )
                refused = error
                break
        try:
            _wait_saying_each_task(api, [(dag_id, run_id) for dag_id, _, run_id, _ in triggered], ended)
        finally:  # what ended is said, even when waiting for the rest timed out
            for dag_id, conf, run_id, started in triggered:
                if run_id in ended:
                    run, at = ended[run_id]
                    result = {
                        "dag_id": dag_id,
                        "conf": conf,
                        "run_id": run_id,
                        "state": run["state"],
                        "tasks": api.task_states(dag_id, run_id),
                        "seconds": round(at - started, 1),
                    }
                    print(json.dumps(result), flush=True)
                    failed |= run["state"] != "success"
        if refused is not None:
            raise refused
    api.idle()  # and the runs the scheduler started from the asset events of these
    return 1 if failed else 0


def _wait_saying_each_task(api, runs: list[tuple[str, str]], ended: dict, seconds: float = 3600) -> None:
    """Until each run (DAG id, run id) has ended, put in ``ended`` by run id with when it was first seen
    ended (``perf_counter``); each of their tasks' ends said as the scheduler records them (the tasks run on
    the workers, whose output is their own)."""
    said: set[tuple[str, str]] = set()

    def all_ended() -> bool:
        for dag_id, run_id in runs:
            if run_id in ended:
                continue
            for task, state in api.task_states(dag_id, run_id).items():
                if state in ("success", "failed", "skipped", "upstream_failed") and (run_id, task) not in said:
                    said.add((run_id, task))
                    progress(f"{dag_id}.{task}: {state}")
            run = api.run(dag_id, run_id)
            if run["state"] in ("success", "failed"):
                ended[run_id] = (run, time.perf_counter())
        return len(ended) == len(runs)

    if runs:
        api.wait(all_ended, seconds)


def _lineage_missing(settings, api, since: str, seconds: float = 300) -> int:
    """Across hosts, on control: waits until every task that ended in the runs since ``since`` has its last
    event here (the Airflow provider's COMPLETE or FAIL, which the worker that ran it writes after the task
    ends and its shipper sends to the receiver on control, after what the task shipped itself at its end);
    1, naming the tasks, when some have not arrived within ``seconds`` (a host cut off, its shipping
    refused). A record the task left for its shipper (its time budget spent) may still come after it."""
    from nyc_taxi.core import team
    from nyc_taxi.lineage.write.destinations import openlineage_events_dir
    from nyc_taxi.lineage.write.outbox import read_openlineage_file

    if not team.LineageReceiver(settings).here():
        return 0
    ended = {
        (ti["dag_id"], ti["dag_run_id"], ti["task_id"], ti["try_number"])
        for run in api.runs("~", run_after_gte=since, limit=100)  # the API's most per page
        for ti in api.task_instances(run["dag_id"], run["dag_run_id"])
        if ti["state"] in ("success", "failed")
    }

    def missing() -> set:
        arrived = set()
        for path in openlineage_events_dir(settings).glob("*.jsonl"):
            for event in read_openlineage_file(path):
                airflow = (event.get("run", {}).get("facets") or {}).get("airflow") or {}
                if event.get("eventType") in ("COMPLETE", "FAIL") and "taskInstance" in airflow:
                    run, task = airflow.get("dagRun") or {}, event["job"]["name"].partition(".")[2]
                    arrived.add((run.get("dag_id"), run.get("run_id"), task, airflow["taskInstance"].get("try_number")))
        return ended - arrived

    if not ended:  # runs were triggered: no task of them ended means they were not found, not that all is here
        print(
            f"no task of the runs since {since} was found through the API: their lineage is not known", file=sys.stderr
        )
        return 1
    deadline = time.monotonic() + seconds
    while left := missing():
        if time.monotonic() > deadline:
            named = ", ".join(f"{dag}.{task} of {run} (try {attempt})" for dag, run, task, attempt in sorted(left))
            print(
                f"the lineage of {len(left)} tasks did not reach control in {seconds:.0f} s: {named}", file=sys.stderr
            )
            return 1
        time.sleep(2)
    return 0


def in_this_process(argv: list[str]) -> int:
    from airflow.models import DagBag

    from nyc_taxi.airflow_adapter.environment import DAGS_FOLDER

    # The results get stdout to themselves: the tasks' logs, written by other threads too, went to the
    # same stream and could land inside a result line. From here on, fd 1 is stderr for everyone else.
    sys.stdout.flush()
    results = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    bag = DagBag(dag_folder=str(DAGS_FOLDER))  # examples are off in the project's configuration
    if bag.import_errors:
        sys.exit(f"DAG import errors: {bag.import_errors}")
    failed = False
    for spec in argv:
        dag_id, conf = _parse(spec)
        started = time.perf_counter()
        run = bag.get_dag(dag_id).test(run_conf=conf or None)
        seconds = round(time.perf_counter() - started, 1)
        states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
        result = {
            "dag_id": dag_id,
            "conf": conf,
            "run_id": run.run_id,
            "state": str(run.state),
            "tasks": states,
            "seconds": seconds,
        }
        results.write(json.dumps(result) + "\n")  # one write: a whole line
        failed |= str(run.state) != "success"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
