"""The parts the DAGs are built from. Each runs a job declared in ``nyc_taxi.core.jobs`` and tells both
lineage systems exactly what it read and wrote (identities from the registry).

OpenLineage gets typed datasets through the operators' ``get_openlineage_facets_on_*`` methods;
DataHub's Airflow plugin reads the same methods and maps the datasets to the registry's URNs, and the
operator adds the table schemas and an Operation carrying the Iceberg snapshot id, in the plugin's
own record file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from airflow.providers.openlineage.extractors import OperatorLineage
from airflow.sdk import Asset, AssetAlias, BaseOperator, Param
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from nyc_taxi.core.datasets import Table
from nyc_taxi.core.jobs import MONTH, Job, Parameter, Pipeline
from nyc_taxi.core.naming import asset_uri, iceberg_identifier
from nyc_taxi.core.progress import progress
from nyc_taxi.core.quality import ChecksFailed
from nyc_taxi.core.settings import REPO_ROOT
from nyc_taxi.forecast.errors import NoDataInWindow
from nyc_taxi.ingest.errors import BadSourceFile, NotPublishedYet
from nyc_taxi.lineage.write.report import DatasetUse, StepReport

log = logging.getLogger(__name__)

DEFAULT_ARGS = {"owner": "data-platform"}  # retries: the deployment's setting (TASK_RETRIES)
# Metaflow's line for a step's end: "[<run>/<step>/<task> (pid <n>)] Task finished successfully." (a step
# `resume` clones: without the pid)
STEP_FINISHED = re.compile(r"\[\d+/(\w+)/\d+(?: \(pid \d+\))?\] Task finished successfully")


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
        flow it starts, which inherit it; not a warm Spark server's work: docs/operations.md): on a small
        machine the API server and the scheduler stay responsive while a month loads (TASK_NICENESS;
        measured: docs/performance.md).

        And it ends with its Airflow supervisor: Airflow runs a task in a process group of its own, so a
        worker lost with its supervisor (killed, its machine gone) would leave the task running as an
        orphan, committing beside the retry Airflow starts elsewhere (a task attached to a warm Spark
        server: the server cancels the jobs of a process that ended, ``spark_server.tag_thread``)."""
        from nyc_taxi.core.processes import die_with_parent, lower_priority
        from nyc_taxi.core.settings import get_settings

        die_with_parent()
        lower_priority(get_settings().task_niceness)
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
        if self.report is not None:  # a run refused by a check: what it read, and the checks it failed
            return self._lineage(self.report.inputs, self.report.outputs)
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

    def _record_datahub_extras(self, ti) -> None:
        """Schema and snapshot id of what was written, the checks the run evaluated with their results, and
        the profiles of the snapshots it wrote, through the DataHub plugin's own connection (its local
        record file), in order with the plugin's records of this task. A result's run is the task run's
        OpenLineage run id (the provider's own macro)."""
        from airflow.providers.openlineage.plugins.macros import lineage_run_id

        from nyc_taxi.airflow_adapter.datahub_connection import plugin_emitter
        from nyc_taxi.lineage.write.datahub import write_records

        try:
            emitter = plugin_emitter()
            if emitter is None:
                return
            actor = f"airflow:{self.job.qualified_name}"
            for record in write_records(self.report, actor, run_id=lineage_run_id(ti)):
                emitter.emit(record)
            emitter.flush()
        except Exception as error:  # lineage must never fail the data work
            log.warning("DataHub records for %s not recorded: %s", self.task_id, error)


class IngestStepOperator(ReportsLineage):
    """Runs ``step(year, month, settings) -> StepReport`` for the run's month and reports its lineage.

    A month the source has not published yet skips the task (and what follows); a source file that
    is not what the source publishes, or a batch that fails an error check of what it writes, fails it
    without retries, with the reason. A raw table the step
    committed a snapshot to gets an Asset event (with the snapshot id); a run that changed nothing
    emits none, so nothing downstream runs for it.
    """

    ui_color = "#e8f4fd"

    def __init__(self, *, job: Job, step: Callable[..., StepReport], **kwargs):
        raws = [d for d in job.writes if isinstance(d, Table) and d.layer == "raw"]
        kwargs.setdefault("outlets", [commits_of(t) for t in raws])
        super().__init__(task_id=job.name, doc_md=job.description, **kwargs)
        self.job, self.step = job, step

    def execute(self, context):
        from nyc_taxi.core.settings import get_settings

        year, month = target_month(context)
        ti = context["ti"]
        # the task run, the same on every try: the commits the step makes carry it, so a retry finds its own
        settings = get_settings().model_copy(update={"task_run": f"{ti.dag_id}/{ti.task_id}/{ti.run_id}"})
        try:
            self.report = self.step(year, month, settings)
        except NotPublishedYet as missing:
            raise AirflowSkipException(f"not published yet: {missing}") from None
        except BadSourceFile as bad:
            raise AirflowFailException(str(bad)) from None
        except ChecksFailed as refused:  # a check the data fails fails every try the same way: no retries
            self.report = refused.report
            self._record_datahub_extras(ti)
            raise AirflowFailException(str(refused)) from None
        self._record_datahub_extras(ti)
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


# What a flow's step raises when its inputs are refused (their checks, a window with nothing to learn
# from): a retry reads the same data and is refused the same way.
REFUSALS = {f"{c.__module__}.{c.__qualname__}" for c in (ChecksFailed, NoDataInWindow)}


def _refusal(run) -> str | None:
    """The message of the refusal that failed a flow run's step, if a refusal did (Metaflow keeps a failed
    task's exception with its type)."""
    for step in run:
        for task in step:
            failure = None if task.successful else task.exception  # a failed task is not "finished" to Metaflow
            if failure is not None and getattr(failure, "type", None) in REFUSALS:
                return failure.exception
    return None


class RunFlowOperator(ReportsLineage):
    """Runs a Metaflow flow with Metaflow's Runner API, passing this task run as its OpenLineage parent
    (and the DAG run as its root) with the provider's own lineage macros, so the flow's lineage hangs
    under this task in both OpenLineage and DataHub. The run is tagged with the DAG run.

    A retry of the task does not start the work again: a run of the flow an earlier try of this DAG run
    finished is the result (the task was lost after the flow ended), and one it left unfinished is
    resumed — Metaflow's own recovery, which reruns only the steps that did not finish.

    ``arguments(context)`` gives the flow's parameters for this run; ``environment()`` Metaflow's
    configuration (the DAG file names the Metaflow adapter's: the two adapters never import each other).
    """

    ui_color = "#fdebd8"

    def __init__(
        self,
        *,
        job: Job,
        flow: Pipeline,
        arguments: Callable[[dict], dict[str, str]],
        environment: Callable[[], dict[str, str]],
        **kwargs,
    ):
        super().__init__(task_id=job.name, doc_md=job.description, **kwargs)
        self.job, self.flow, self.arguments, self.environment = job, flow, arguments, environment
        self._running = None

    def execute(self, context):
        from airflow.providers.openlineage.plugins.macros import lineage_parent_id, lineage_root_parent_id

        ti = context["ti"]
        declared = {p.name: p for p in self.flow.parameters}
        parameters = {name: declared[name].check(value) for name, value in self.arguments(context).items()}
        tag = f"airflow_dag_run:{ti.dag_id}/{ti.run_id}"
        # Metaflow reads its configuration when it is imported: set before the first import
        os.environ.update(self.environment())
        earlier = self._earlier_run(tag)
        if earlier is not None and earlier.successful:
            log.info("%s finished in an earlier try of this task: nothing left to run", earlier.pathspec)
            return {"flow": self.flow.name, "run_id": earlier.id, **parameters}
        lineage = {
            "OPENLINEAGE_PARENT_ID": lineage_parent_id(ti),
            "OPENLINEAGE_ROOT_PARENT_ID": lineage_root_parent_id(ti),
            "PARENT_AIRFLOW_TASK": f"{ti.dag_id}/{ti.task_id}/{ti.run_id}",
        }
        run = asyncio.run(self._run(lineage, tag, parameters, earlier))
        if not run.successful:
            if (refused := _refusal(run)) is not None:  # the same data is refused on every try: no retries
                raise AirflowFailException(f"{run.pathspec} refused what it read (a retry would too):\n{refused}")
            raise RuntimeError(f"{run.pathspec} failed; its log is above (a retry resumes it)")
        return {"flow": self.flow.name, "run_id": run.id, **parameters}

    def _earlier_run(self, tag: str):
        """The newest run of the flow tagged with this DAG run, if an earlier try started one."""
        from metaflow import Flow, namespace
        from metaflow.exception import MetaflowNotFound

        namespace(None)
        try:
            return next(iter(Flow(self.flow.name).runs(tag)), None)
        except MetaflowNotFound:  # the flow never ran here
            return None

    async def _run(self, env: dict[str, str], tag: str, parameters: dict, earlier):
        from metaflow import Runner

        flow_file = str(REPO_ROOT / self.flow.code)
        with Runner(flow_file, show_output=False, env=env, pylint=False) as runner:
            if earlier is None:
                self._running = await runner.async_run(tags=[tag], **parameters)
            else:
                self._running = await runner.async_resume(origin_run_id=earlier.id, tags=[tag])
            log.info("%s", run_said(earlier and earlier.pathspec, self._running.run.pathspec, parameters))

            run = self._running.run.pathspec

            def ended() -> bool:
                return self._running.returncode is not None

            async def relay(stream: str) -> None:
                async for line in log_lines(self._running.command_obj.log_files[stream], ended):
                    log.info("%s", line.rstrip())
                    if step := STEP_FINISHED.search(line):  # Metaflow's own line for a step's end
                        progress(f"{run}/{step[1]}: done")

            await asyncio.gather(relay("stdout"), relay("stderr"))
            await self._running.wait()
            return self._running.run

    def on_kill(self) -> None:
        """Airflow stops the task: the flow's process and its steps end with it. The Runner API has no
        public call for this; its process handle does (``command_obj``, what its own Ctrl-C handler uses)."""
        if self._running is not None:
            self._running.command_obj.kill()


async def log_lines(path: str, ended: Callable[[], bool], poll_seconds: float = 0.05):
    """The lines of a Metaflow run's log file as the run writes them, each whole. Metaflow's own reader
    (``stream_log``) returns half a line the run is still writing, stripped, and its rest at the next read:
    a step's end split after a space cannot be told from a whole line. Its file (``command_obj.log_files``,
    which Metaflow's Runner documents) is read here instead: text up to a newline is a line, what follows
    waits for its newline, and once the run has ended the rest is read and its last line given as it is."""
    pending = b""
    with open(path, "rb") as log_file:
        while True:
            done = ended()  # asked before reading: all the run wrote before it ended is in this read
            chunk = log_file.read()
            if chunk:
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", errors="replace")
            elif done:
                break
            else:
                await asyncio.sleep(poll_seconds)
    if pending:
        yield pending.decode("utf-8", errors="replace")


def run_said(earlier: str | None, run: str, parameters: dict) -> str:
    """What the training task logs of the flow run it runs: "started <run>: …", or, resuming an earlier
    try's, "resumed <earlier> as <run>: …" (Metaflow's resume is a run of its own, cloning what the earlier
    one finished). A chaos run across hosts reads it back."""
    return f"started {run}: {parameters}" if earlier is None else f"resumed {earlier} as {run}: {parameters}"
