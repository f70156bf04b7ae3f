"""The parts the DAGs are built from. Each runs a job declared in ``nyc_taxi.core.jobs`` and tells both
lineage systems exactly what it read and wrote (identities from the registry).

OpenLineage gets typed datasets through the operators' ``get_openlineage_facets_on_*`` methods;
DataHub's Airflow plugin reads the same methods and maps the datasets to the registry's URNs, and the
operator adds the table schemas and an Operation carrying the Iceberg snapshot id, in the plugin's
own record file.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from airflow.providers.openlineage.extractors import OperatorLineage
from airflow.sdk import Asset, AssetAlias, BaseOperator, Param
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from nyc_taxi.core.datasets import Table
from nyc_taxi.core.jobs import MONTH, Job, Parameter, Pipeline
from nyc_taxi.core.naming import asset_uri, iceberg_identifier
from nyc_taxi.core.settings import REPO_ROOT
from nyc_taxi.ingest.errors import BadSourceFile, NotPublishedYet
from nyc_taxi.lineage.write.report import DatasetUse, StepReport

log = logging.getLogger(__name__)

DEFAULT_ARGS = {"owner": "data-platform", "retries": 1}


def param(parameter: Parameter) -> Param:
    """A declared parameter as an Airflow Param: the trigger form validates it, and a REST trigger with a
    value it refuses is refused. One without a default may be left empty (the DAG derives it)."""
    schema: dict = {"type": "integer" if parameter.kind is int else "string"}
    if parameter.pattern:
        schema["pattern"] = f"^{parameter.pattern}$"
    if parameter.choices:
        schema["enum"] = list(parameter.choices)
    schema |= {k: v for k, v in (("minimum", parameter.minimum), ("maximum", parameter.maximum)) if v is not None}
    if parameter.default is None:
        schema["type"] = ["null", schema["type"]]
    return Param(parameter.default, description=parameter.description, **schema)


def params(pipeline: Pipeline) -> dict[str, Param]:
    return {p.name: param(p) for p in pipeline.parameters}


def asset(table: Table) -> Asset:
    """A raw table as an Airflow Asset (no cloud call: safe while a DAG file is parsed)."""
    return Asset(name=iceberg_identifier(table), uri=asset_uri(table))


def commits_of(table: Table) -> AssetAlias:
    """The alias a task emits ``table``'s asset events through: only when it committed a snapshot."""
    return AssetAlias(f"{table.name} commits")


def target_month(context) -> tuple[int, int]:
    """The month a run works on: the `month` param of a manual run, else the run's data interval."""
    requested = (context.get("params") or {}).get("month")
    if requested:
        try:
            year, month = MONTH.check(requested).split("-")
        except ValueError as bad:
            raise AirflowFailException(str(bad)) from None
        return int(year), int(month)
    when = context.get("data_interval_start") or context.get("logical_date") or context["dag_run"].run_after
    return when.year, when.month


def _code_path(dag) -> str:
    path = Path(dag.fileloc)
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else path.name


class ReportsLineage(BaseOperator):
    """An operator that knows its job's declaration and reports a run's lineage from a StepReport."""

    job: Job
    report: StepReport | None = None  # what the last run read and wrote

    def pre_execute(self, context):
        """The task's work runs at a lower CPU priority than Airflow itself (and so do the Spark JVM and the
        flow it starts, which inherit it): on a small machine the API server and the scheduler stay
        responsive while a month loads (TASK_NICENESS; measured: docs/performance.md)."""
        from nyc_taxi.core.settings import get_settings

        niceness = get_settings().task_niceness
        if os.getpriority(os.PRIO_PROCESS, 0) < niceness:  # a level, not a step: tasks sharing a process
            os.setpriority(os.PRIO_PROCESS, 0, niceness)  # (dag.test()) do not add theirs up
        return super().pre_execute(context)

    def _lineage(self, inputs: list[DatasetUse], outputs: list[DatasetUse]) -> OperatorLineage:
        """Datasets plus the code version (git commit and DAG file), so runs can be compared."""
        from nyc_taxi.lineage.write.openlineage import input_dataset, output_dataset, source_code_location

        return OperatorLineage(
            inputs=[input_dataset(u) for u in inputs],
            outputs=[output_dataset(u) for u in outputs],
            job_facets={"sourceCodeLocation": source_code_location(_code_path(self.dag))},
        )

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        return self._lineage([DatasetUse(d) for d in self.job.reads], [DatasetUse(d) for d in self.job.writes])

    def get_openlineage_facets_on_complete(self, task_instance) -> OperatorLineage:
        if self.report is None:
            return self.get_openlineage_facets_on_start()
        return self._lineage(self.report.inputs, self.report.outputs)

    def get_openlineage_facets_on_failure(self, task_instance) -> OperatorLineage:
        # the inputs as the catalog holds them now: what this failed run saw, to compare with a good run
        from nyc_taxi.core.catalog import current_snapshot

        def now(dataset) -> DatasetUse:
            snapshot = current_snapshot(dataset) if isinstance(dataset, Table) else None
            return DatasetUse(dataset, version=str(snapshot.snapshot_id) if snapshot else None)

        try:
            inputs = [now(d) for d in self.job.reads]
        except Exception:  # the catalog is down too: the run's own error says why
            inputs = [DatasetUse(d) for d in self.job.reads]
        return self._lineage(inputs, [DatasetUse(d) for d in self.job.writes])

    def _record_datahub_extras(self) -> None:
        """Schema and snapshot id of what was written, through the DataHub plugin's own connection
        (its local record file), in order with the plugin's records of this task."""
        from nyc_taxi.airflow_adapter.datahub_connection import plugin_emitter
        from nyc_taxi.lineage.write.datahub import write_records

        try:
            emitter = plugin_emitter()
            if emitter is None:
                return
            for record in write_records(self.report, f"airflow:{self.job.qualified_name}"):
                emitter.emit(record)
            emitter.flush()
        except Exception as error:  # lineage must never fail the data work
            log.warning("DataHub records for %s not recorded: %s", self.task_id, error)


class IngestStepOperator(ReportsLineage):
    """Runs ``step(year, month) -> StepReport`` for the run's month and reports its lineage.

    A month the source has not published yet skips the task (and what follows); a source file that
    is not what the source publishes fails it without retries, with the reason. A raw table the step
    committed a snapshot to gets an Asset event (with the snapshot id); a run that changed nothing
    emits none, so nothing downstream runs for it.
    """

    ui_color = "#e8f4fd"

    def __init__(self, *, job: Job, step: Callable[[int, int], StepReport], **kwargs):
        raws = [d for d in job.writes if isinstance(d, Table) and d.layer == "raw"]
        kwargs.setdefault("outlets", [commits_of(t) for t in raws])
        super().__init__(task_id=job.name, doc_md=job.description, **kwargs)
        self.job, self.step = job, step

    def execute(self, context):
        year, month = target_month(context)
        try:
            self.report = self.step(year, month)
        except NotPublishedYet as missing:
            raise AirflowSkipException(f"not published yet: {missing}") from None
        except BadSourceFile as bad:
            raise AirflowFailException(str(bad)) from None
        self._record_datahub_extras()
        for use in self.report.outputs:
            if isinstance(use.dataset, Table) and use.dataset.layer == "raw" and use.committed:
                context["outlet_events"][commits_of(use.dataset)].add(
                    asset(use.dataset), extra={"snapshot_id": use.version, "month": f"{year:04d}-{month:02d}"}
                )
        log.info("%s", self.report.summary)
        return self.report.summary


class CreateTablesOperator(ReportsLineage):
    """Creates registry tables that do not exist yet (through pyiceberg: no Spark needed)."""

    ui_color = "#f4f4f4"

    def __init__(self, *, job: Job, tables: Sequence[Table], **kwargs):
        super().__init__(task_id=job.name, doc_md=job.description, **kwargs)
        self.job, self.tables = job, list(tables)

    def execute(self, context):
        from nyc_taxi.core.tables import ensure_tables

        created = ensure_tables(self.tables)
        log.info("created %s", ", ".join(created) if created else "nothing: the tables exist")
        return created


class RunFlowOperator(ReportsLineage):
    """Starts a Metaflow flow run as a child process, passing this task run as its OpenLineage parent
    (and the DAG run as its root) with the provider's own lineage macros, so the flow's lineage hangs
    under this task in both OpenLineage and DataHub.

    ``arguments(context)`` gives the flow's parameters for this run.
    """

    ui_color = "#fdebd8"

    def __init__(self, *, job: Job, flow: Pipeline, arguments: Callable[[dict], dict[str, str]], **kwargs):
        super().__init__(task_id=job.name, doc_md=job.description, **kwargs)
        self.job, self.flow, self.arguments = job, flow, arguments

    def execute(self, context):
        from airflow.providers.openlineage.plugins.macros import lineage_parent_id, lineage_root_parent_id

        ti = context["ti"]
        parameters = self.arguments(context)
        env = {
            "OPENLINEAGE_PARENT_ID": lineage_parent_id(ti),
            "OPENLINEAGE_ROOT_PARENT_ID": lineage_root_parent_id(ti),
            "PARENT_AIRFLOW_TASK": f"{ti.dag_id}/{ti.task_id}/{ti.run_id}",
        }
        command = [
            sys.executable,
            "-m",
            "nyc_taxi.metaflow_adapter",
            self.flow.name,
            "run",
            "--tag",
            f"airflow_dag_run:{ti.dag_id}/{ti.run_id}",
            *[item for name, value in parameters.items() for item in (f"--{name}", str(value))],
        ]
        log.info("starting %s: %s", self.flow.name, " ".join(command[3:]))
        run_id = None
        with subprocess.Popen(
            command, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as process:
            for line in process.stdout:
                log.info("%s", line.rstrip())
                if "(run-id " in line and run_id is None:
                    run_id = line.split("(run-id ")[1].split(")")[0]
        if process.returncode:
            raise AirflowFailException(
                f"{self.flow.name} run {run_id} failed (exit {process.returncode}); its log is above"
            )
        return {"flow": self.flow.name, "run_id": run_id, **parameters}
