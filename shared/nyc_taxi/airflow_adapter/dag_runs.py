"""`python -m nyc_taxi.airflow_adapter.dag_runs DAG_ID[:CONF_JSON] ...`: DAG runs one after another.
Prints each run's task states and seconds, one JSON line per run, alone on stdout (everything else
the runs print goes to stderr); exits 1 if one failed.

Where the state directory's Airflow deployment runs (the team profile's `bash run team up`), each run
is triggered through the REST API, as the UI's Trigger button does, and the scheduler runs it on the
Celery workers; a run starts once the runs before it of the same DAG (those the scheduler started from
asset events too) have ended, and the command returns when no run of any DAG is left. Otherwise each
run is Airflow's own ``dag.test()`` in this one process (what `airflow dags test` does for one run),
so the runs share one Python process and one Spark JVM.

    python -m nyc_taxi.airflow_adapter.dag_runs 'ingest_yellow_taxi_data:{"month": "2024-01"}' ingest_weather_data
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    from nyc_taxi.airflow_adapter.rest_api import RestApi, base_url, health
    from nyc_taxi.core.lakehouse import lakehouse
    from nyc_taxi.core.settings import get_settings

    if not argv:
        sys.exit(__doc__)
    settings = get_settings()
    if lakehouse(settings).airflow_deployment and health(base_url(settings)) is not None:
        failed = through_the_scheduler(RestApi(settings), argv)
        _lineage_arrived(settings)
        return failed
    return in_this_process(argv)


def _parse(spec: str) -> tuple[str, dict]:
    dag_id, _, conf = spec.partition(":")
    return dag_id, json.loads(conf) if conf else {}


def through_the_scheduler(api, specs: list[str]) -> int:
    failed = False
    for spec in specs:
        dag_id, conf = _parse(spec)
        api.idle(dag_id)
        started = time.perf_counter()
        run_id = api.trigger(dag_id, conf)
        run = api.finished(dag_id, run_id)
        result = {
            "dag_id": dag_id,
            "conf": conf,
            "run_id": run_id,
            "state": run["state"],
            "tasks": api.task_states(dag_id, run_id),
            "seconds": round(time.perf_counter() - started, 1),
        }
        print(json.dumps(result), flush=True)
        failed |= run["state"] != "success"
    api.idle()  # and the runs the scheduler started from the asset events of these
    return 1 if failed else 0


def _lineage_arrived(settings) -> None:
    """Across hosts, on control: the runs' lineage from the worker hosts, shipped to the receiver here,
    before anything reads it."""
    from nyc_taxi.core import team
    from nyc_taxi.lineage.write import receiver

    if team.LineageReceiver(settings).here() and not receiver.settled(settings):
        print("the worker hosts' lineage did not settle on control in 300 s: a host may be cut off", file=sys.stderr)


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
