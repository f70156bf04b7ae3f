"""Airflow glue: the operator that runs one ingestion step for the run's month and tells both
lineage systems exactly what it read and wrote (identities from the registry).

OpenLineage gets typed datasets through the operator's ``get_openlineage_facets_on_*`` methods;
DataHub's Airflow plugin reads the same methods and maps the datasets to the registry's URNs, and
this operator adds the schema and an Operation carrying the Iceberg snapshot id through the
plugin's own connection.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Callable, Sequence

from airflow.providers.openlineage.extractors import OperatorLineage
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from nyc_taxi.ingest.errors import BadSourceFile, NotPublishedYet
from nyc_taxi.lineage.report import (DatasetUse, StepReport, current_versions, datahub_records, openlineage_input,
                                     openlineage_output, source_code_location)
from nyc_taxi.registry import SourceFiles, Table

log = logging.getLogger(__name__)

MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
DEFAULT_ARGS = {"owner": "data-platform", "retries": 1}


def target_month(context) -> tuple[int, int]:
    """The month a run works on: the `month` param of a manual run, else the run's data interval."""
    requested = (context.get("params") or {}).get("month")
    if requested:
        match = MONTH.match(str(requested))
        if not match:
            raise AirflowFailException(f"month {requested!r} is not YYYY-MM (e.g. 2024-01)")
        return int(match[1]), int(match[2])
    when = context.get("data_interval_start") or context.get("logical_date") or context["dag_run"].run_after
    return when.year, when.month


class IngestStepOperator(BaseOperator):
    """Run ``step(year, month) -> StepReport`` and report its lineage.

    A month the source has not published yet skips the task (and what follows); a source file
    that is not what the source publishes fails it without retries, with the reason.
    """

    ui_color = "#e8f4fd"

    def __init__(self, *, step: Callable[[int, int], StepReport], reads: Sequence[Table | SourceFiles],
                 writes: Sequence[Table], **kwargs):
        kwargs.setdefault("outlets", [t.airflow_asset() for t in writes if t.layer == "raw"])
        super().__init__(**kwargs)
        self.step, self.reads, self.writes = step, list(reads), list(writes)
        self._report: StepReport | None = None

    def execute(self, context):
        year, month = target_month(context)
        try:
            self._report = self.step(year, month)
        except NotPublishedYet as missing:
            raise AirflowSkipException(f"not published yet: {missing}") from None
        except BadSourceFile as bad:
            raise AirflowFailException(str(bad)) from None
        self._emit_datahub_extras(context)
        log.info("%s", self._report.summary)
        return self._report.summary

    def _emit_datahub_extras(self, context) -> None:
        """Schema and snapshot id of what was written, on the DataHub plugin's own connection."""
        try:
            from datahub_airflow_plugin._config import get_lineage_config

            config = get_lineage_config()
            if not config.enabled:
                return
            emitter = config.make_emitter_hook().make_emitter()
            actor = f"airflow:{self.dag_id}.{self.task_id}"
            for record in datahub_records(self._report, actor):
                emitter.emit(record)
            emitter.flush()
        except Exception as error:  # lineage must never fail the data work
            log.warning("DataHub records for %s not emitted: %s", self.task_id, error)

    # ---- OpenLineage (read by the OpenLineage provider and by DataHub's plugin) ----
    def _lineage(self, inputs, outputs) -> OperatorLineage:
        """Datasets plus the code version (git commit and DAG file), so runs can be compared."""
        dag_file = f"airflow/dags/{Path(self.dag.fileloc).name}"
        return OperatorLineage(inputs=[openlineage_input(u) for u in inputs],
                               outputs=[openlineage_output(u) for u in outputs],
                               job_facets={"sourceCodeLocation": source_code_location(dag_file)})

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        return self._lineage([DatasetUse(d) for d in self.reads], [DatasetUse(d) for d in self.writes])

    def get_openlineage_facets_on_complete(self, task_instance) -> OperatorLineage:
        if self._report is None:
            return self.get_openlineage_facets_on_start()
        return self._lineage(self._report.inputs, self._report.outputs)

    def get_openlineage_facets_on_failure(self, task_instance) -> OperatorLineage:
        # the inputs as the catalog holds them now: what this failed run saw, to compare with a good run
        return self._lineage(current_versions(self.reads), [DatasetUse(d) for d in self.writes])


def ingestion_tasks(*, steps, source: SourceFiles, staging: Table, raw: Table, merge_task_id: str):
    """The ingestion chain of a DAG: create_tables → download_and_stage_data → <merge_task_id>.

    ``steps`` provides ``download_and_stage(year, month)`` and ``merge_into_raw(year, month)``.
    Call inside a ``with DAG(...)`` block.
    """
    from airflow.sdk import task

    @task
    def create_tables():
        """Create the staging and raw tables from the registry if they do not exist."""
        from nyc_taxi.spark import get_spark
        from nyc_taxi.tables import ensure_tables

        ensure_tables(get_spark(), [staging, raw])

    download = IngestStepOperator(task_id="download_and_stage_data", step=steps.download_and_stage,
                                  reads=[source], writes=[staging])
    merge = IngestStepOperator(task_id=merge_task_id, step=steps.merge_into_raw, reads=[staging], writes=[raw])
    create_tables() >> download >> merge
    return download, merge
