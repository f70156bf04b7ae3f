"""Airflow's local settings: Airflow imports this module in every one of its processes (it is on their
``PYTHONPATH``, set with the rest of Airflow's configuration in ``airflow_adapter/environment.py``).

A process an Airflow component forks ends when the component does: a scheduler's lineage pool worker, a
Celery worker's pool process and the task it supervises, a DAG processor's parser. supervisord restarts a
component that died; what it had forked would otherwise run on beside the new one, orphaned — a chaos
run found the scheduler's OpenLineage pool worker left so after the scheduler lost its database.

Only what the main thread forks: Linux ends the child when the *thread* that forked it ends, and a
thread that started something and finished (the task's Spark JVM, started in a thread so it boots while
the task reads the catalog) must not take it along.
"""

import os
import threading

from nyc_taxi.core.processes import die_with_parent

_forked_by_main_thread = False


def _note_forking_thread() -> None:
    global _forked_by_main_thread
    _forked_by_main_thread = threading.current_thread() is threading.main_thread()


def _end_with_parent() -> None:
    if _forked_by_main_thread:
        die_with_parent()


os.register_at_fork(before=_note_forking_thread, after_in_child=_end_with_parent)
