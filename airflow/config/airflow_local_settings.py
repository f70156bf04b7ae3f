"""Airflow's local settings: Airflow imports this module in every one of its processes (it is on their
``PYTHONPATH``, set with the rest of Airflow's configuration in ``airflow_adapter/environment.py``).

A process an Airflow component forks ends when the component does: a scheduler's lineage pool worker, a
Celery worker's pool process and the task it supervises, a DAG processor's parser. supervisord restarts a
component that died; what it had forked would otherwise run on beside the new one, orphaned — a chaos
run found the scheduler's OpenLineage pool worker left so after the scheduler lost its database.
"""

import os

from nyc_taxi.core.processes import die_with_parent

os.register_at_fork(after_in_child=die_with_parent)
