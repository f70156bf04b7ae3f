"""`python -m nyc_taxi.airflow_adapter.dag_runs DAG_ID[:CONF_JSON] ...`: DAG runs one after another in one
process, each with Airflow's own ``dag.test()`` (what `airflow dags test` does for one run), so the
runs share one Python process and one Spark JVM. Prints each run's task states and seconds, one JSON
line per run, alone on stdout (everything else the runs print goes to stderr); exits 1 if one failed.

    python -m nyc_taxi.airflow_adapter.dag_runs 'ingest_yellow_taxi_data:{"month": "2024-01"}' ingest_weather_data
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    from airflow.dag_processing.dagbag import DagBag

    from nyc_taxi.airflow_adapter.environment import DAGS_FOLDER

    if not argv:
        sys.exit(__doc__)
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
        dag_id, _, conf = spec.partition(":")
        started = time.perf_counter()
        run = bag.get_dag(dag_id).test(run_conf=json.loads(conf) if conf else None)
        seconds = round(time.perf_counter() - started, 1)
        states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
        result = {
            "dag_id": dag_id,
            "conf": json.loads(conf) if conf else {},
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
