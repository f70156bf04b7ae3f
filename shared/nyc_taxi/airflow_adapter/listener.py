"""What happens at the end of every Airflow task, after Airflow's own lineage listeners.

An Airflow listener, registered as a plugin (entry point ``airflow.plugins`` of this package), run
after the OpenLineage provider's and DataHub's listeners (``trylast``), which have written the task's
records to the local files by then:
1. Column lineage in DataHub: the plugin does not turn OpenLineage's columnLineage facet into
   DataHub's fine-grained lineage, so for a task that reported column lineage the task's DataJob
   input/output aspect is written again with it, through the plugin's own connection (after the
   plugin's version of the aspect, so this one stands). After a failed run, the aspect of the job's
   last good run is written again: a run that failed is a failed run of the job, not a new job.
2. The plugin's live record file becomes a segment of its own (its file emitter rewrites the whole
   file for every record: it must stay short).
3. What the servers have not accepted yet is shipped, within ``LINEAGE_SHIP_SECONDS``, to the DataHub of
   the user's connection (``[datahub] conn_id``, default ``datahub_rest_default``) where one is defined, and
   to the servers the tools' own settings name; the rest waits for the next task or `bash run lineage-replay`.
"""

from __future__ import annotations

import logging

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin

log = logging.getLogger(__name__)


def _column_lineage(task_instance, succeeded: bool) -> None:
    from nyc_taxi.airflow_adapter.datahub_connection import plugin_emitter
    from nyc_taxi.airflow_adapter.operators import ReportsLineage
    from nyc_taxi.core.registry import pipeline
    from nyc_taxi.lineage.write.datahub import job_io_records, keep_job_io, kept_job_io

    task = getattr(task_instance, "task", None)
    if not isinstance(task, ReportsLineage):
        return
    report = task.report
    if succeeded and report is not None and any(u.columns for u in report.outputs):
        records = job_io_records(pipeline(task_instance.dag_id), task.job, report, sorted(task.upstream_task_ids))
        keep_job_io(task.job, records)
    elif not succeeded:  # the plugin just recorded the job as this run saw it, without columns
        records = kept_job_io(task.job)
    else:
        return
    emitter = plugin_emitter() if records else None
    if emitter is None:
        return
    for record in records:
        emitter.emit(record)
    emitter.flush()


def _at_the_end(run, succeeded: bool) -> None:
    """``run``: a task instance or a DAG run."""
    from nyc_taxi.core.settings import get_settings
    from nyc_taxi.lineage.write.delivery import ship_at_end_of
    from nyc_taxi.lineage.write.outbox import rotate

    task = hasattr(run, "task_id")
    label = ".".join(filter(None, [run.dag_id, getattr(run, "task_id", None)]))  # read before anything else
    if task:
        try:
            _column_lineage(run, succeeded)
        except Exception as error:  # lineage must never fail the data work
            log.warning("column lineage of %s.%s not recorded in DataHub: %s", run.dag_id, run.task_id, error)
    try:
        rotate(get_settings())
    except Exception as error:
        log.warning("DataHub record file not rotated: %s", error)
    try:
        from nyc_taxi.airflow_adapter.datahub_connection import shipping_targets
        from nyc_taxi.core.team import LineageReceiver

        # a DAG run ends in the scheduler, inside its session: no lookup through the metadata database there;
        # a host that ships to another's receiver (across hosts) asks for no DataHub connection, nor its token
        settings = get_settings()
        elsewhere = LineageReceiver(settings).elsewhere()
        datahub = [] if elsewhere else shipping_targets(settings, environment_only=not task)
    except Exception as error:
        log.warning("the DataHub connection to ship to not read: %s", error)
        datahub = []
    ship_at_end_of(label, datahub=datahub)


def _said(task_instance, state: str) -> None:
    """The task's end, for whoever waits on the DAG run (``core/progress``)."""
    import datetime as dt

    from nyc_taxi.core.progress import progress

    started = getattr(task_instance, "start_date", None)
    took = f" in {(dt.datetime.now(dt.UTC) - started).total_seconds():.0f} s" if started else ""
    progress(f"{task_instance.dag_id}.{task_instance.task_id}: {state}{took}")


class AtTheEndOfEveryTask:
    @hookimpl(trylast=True)
    def on_task_instance_success(self, previous_state, task_instance):
        _said(task_instance, "success")
        _at_the_end(task_instance, succeeded=True)

    @hookimpl(trylast=True)
    def on_task_instance_failed(self, previous_state, task_instance, error):
        _said(task_instance, "failed")
        _at_the_end(task_instance, succeeded=False)

    @hookimpl(trylast=True)
    def on_dag_run_success(self, dag_run, msg):
        _at_the_end(dag_run, succeeded=True)

    @hookimpl(trylast=True)
    def on_dag_run_failed(self, dag_run, msg):
        _at_the_end(dag_run, succeeded=False)


class LineagePlugin(AirflowPlugin):
    name = "nyc_taxi_lineage"
    listeners = [AtTheEndOfEveryTask()]  # noqa: RUF012 - Airflow reads the class attribute
