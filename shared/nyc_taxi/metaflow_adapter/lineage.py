"""Lineage for Metaflow flows, through Metaflow's public extension API.

    @lineage(nominal_time="as_of_datetime", variant="model")
    class TrainForecastModelFlow(FlowSpec):
        @step
        def compute_actuals(self):
            self.actuals = forecast.compute_actuals(...)   # returns what it read and wrote

``lineage`` is a FlowMutator: it puts ``report_lineage`` (a UserStepDecorator) on every step. What
a step read and wrote comes from the reports its data functions returned: a ``StepReport``, or a
result carrying one as ``.report``, assigned to an artifact during the step. The flow file does no
lineage bookkeeping; the flow-specific facts (which parameter is the nominal time, which one picks
the model variant) are the mutator's arguments.

OpenLineage: the flow run is the parent job (FLOW), each step a child job (STEP) with START and
COMPLETE/FAIL, its upstream steps' runs in a JobDependencies facet; when an Airflow task started the
flow (``OPENLINEAGE_PARENT_ID``), the flow run's parent is that task run and its root the DAG run.
DataHub: DataFlow, DataJobs, a DataProcessInstance per step run and one per flow run (whose parent
is the Airflow task's run), the model as an ML model. Records are written to the local files first
and shipped at the end of every step (``nyc_taxi.lineage.write.delivery``); emission never fails the flow.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import time
from zoneinfo import ZoneInfo

from metaflow import FlowMutator, UserStepDecorator, current

from nyc_taxi.core.jobs import PIPELINES, Job, Pipeline
from nyc_taxi.core.settings import get_settings
from nyc_taxi.lineage.write.report import StepReport, report_of

log = logging.getLogger(__name__)
NEW_YORK = ZoneInfo("America/New_York")


class report_lineage(UserStepDecorator):  # noqa: N801 - used as @report_lineage, like Metaflow's decorators
    """Reports one step's run to OpenLineage and DataHub (put on every step by ``@lineage``)."""

    def init(self, *args, **kwargs):
        self.options = kwargs

    def pre_step(self, step_name, flow, inputs=None):
        began = time.perf_counter()
        self._run = _StepRun(step_name, flow, self.options)
        self._run.started()
        self._spent = time.perf_counter() - began

    def post_step(self, step_name, flow, exception=None):
        began = time.perf_counter()
        self._run.finished(_collect(flow, self._run.pathspec), exception)
        spent = self._spent + time.perf_counter() - began
        # one line in the step's log: what recording the lineage cost this step (`bash run bench flow` reads it)
        print(f"lineage of {self._run.pathspec} recorded in {spent:.2f} s", flush=True)
        return (exception, None) if exception else (None, None)


class lineage(FlowMutator):  # noqa: N801
    """``@lineage(nominal_time=<parameter>, variant=<parameter>)`` above a flow: every step reports its lineage."""

    def init(self, *args, **kwargs):
        self.options = kwargs

    def mutate(self, mutable_flow):
        parameters = sorted(name for name, _ in mutable_flow.parameters)
        for _, step in mutable_flow.steps:
            step.add_decorator(
                report_lineage, deco_kwargs={**self.options, "parameters": parameters}, duplicates=step.IGNORE
            )


def _collect(flow, pathspec: str) -> StepReport:
    """The reports this step's data functions returned: in artifacts, not yet recorded by a step."""
    total = StepReport()
    for value in list(vars(flow).values()):
        report = report_of(value)
        if report is not None and report.recorded_by is None:
            report.recorded_by = pathspec
            total = total + report
    return total


def _steps() -> dict[str, dict]:
    """The running flow's steps as Metaflow describes them (``current.graph``): name -> doc, next steps."""
    return current.graph["steps"]


def _upstream_of(step: str) -> list[str]:
    return sorted(name for name, info in _steps().items() if step in info["next"])


def _pipeline(flow) -> Pipeline:
    """The flow as the registry declares it; a flow the registry does not know is described by its graph."""
    name = type(flow).__name__
    if name in PIPELINES:
        return PIPELINES[name]
    return Pipeline(
        name,
        "metaflow",
        (type(flow).__doc__ or "").strip().split("\n")[0],
        current.graph["file"],
        jobs=tuple(Job(step, (info.get("doc") or "").strip()) for step, info in _steps().items()),
    )


class _StepRun:
    """One run of one step, and everything its lineage says about it."""

    def __init__(self, step: str, flow, options: dict):
        from nyc_taxi.lineage.write.openlineage import RunContext, RunRef, run_uuid

        self.settings = get_settings()
        self.pipeline = _pipeline(flow)
        self.job = getattr(self.pipeline, step)
        self.flow_name, self.run_id, self.task_id = current.flow_name, str(current.run_id), str(current.task_id)
        self.pathspec = f"{self.flow_name}/{self.run_id}/{step}/{self.task_id}"
        self.is_end = step == current.graph["end_step"]
        self.upstream = _upstream_of(step)
        self.started_ms = int(time.time() * 1000)
        self.variant = {name: str(getattr(flow, name)) for name in [options.get("variant")] if name}
        parameters = {f"param.{name}": str(getattr(flow, name)) for name in options.get("parameters", ())}
        nominal = options.get("nominal_time")
        nominal_time = (
            (
                dt.datetime.fromisoformat(str(getattr(flow, nominal)))
                .replace(tzinfo=NEW_YORK)
                .astimezone(dt.UTC)
                .isoformat()
            )
            if nominal
            else None
        )
        namespace = self.settings.openlineage_namespace
        origin = {"metaflow.origin_run_id": str(current.origin_run_id)} if current.origin_run_id else {}
        self.airflow_parent = RunRef.parse(self.settings.openlineage_parent_id)
        self.airflow_root = RunRef.parse(self.settings.openlineage_root_parent_id) or self.airflow_parent
        self.flow_run = RunContext(
            job_name=self.flow_name,
            run_id=run_uuid("metaflow", self.flow_name, self.run_id),
            job_type="FLOW",
            integration="METAFLOW",
            code_path=self.pipeline.code,
            parent=self.airflow_parent,
            root=self.airflow_root,
            tags={**parameters, "metaflow.run": f"{self.flow_name}/{self.run_id}", **origin},
            nominal_time=nominal_time,
        )
        flow_ref = RunRef(namespace, self.flow_name, self.flow_run.run_id)
        self.step_run = RunContext(
            job_name=self.job.qualified_name,
            run_id=run_uuid("metaflow", self.flow_name, self.run_id, step),
            job_type="STEP",
            integration="METAFLOW",
            code_path=self.pipeline.code,
            parent=flow_ref,
            root=self.airflow_root or flow_ref,
            upstream=[
                RunRef(namespace, f"{self.flow_name}.{u}", run_uuid("metaflow", self.flow_name, self.run_id, u))
                for u in self.upstream
            ],
            tags={**parameters, "metaflow.pathspec": self.pathspec, **origin},
            nominal_time=nominal_time,
        )

    # ---- what is recorded ------------------------------------------------------------------
    def job_version(self, report: StepReport) -> str:
        """Changes when the step's inputs, outputs, variant or code change (lineage evolution)."""
        from nyc_taxi.lineage.write.openlineage import git_revision

        parts = [
            self.job.name,
            git_revision()[1],
            *sorted(u.name for u in report.inputs),
            "->",
            *sorted(u.name for u in report.outputs),
            *sorted(f"{k}={v}" for k, v in self.variant.items()),
        ]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]

    def _datahub_run(self, report: StepReport):
        from nyc_taxi.lineage.write.datahub import StepRun, flow_run_instance

        flow_instance = flow_run_instance(self.pipeline, self._flow_instance_id, {}, None, self.settings)
        return StepRun(
            self.pipeline,
            self.job,
            f"{self.flow_name}/{self.run_id}/{self.job.name}/{self.task_id}",
            self.started_ms,
            self.job_version(report),
            upstream=self.upstream,
            properties={"metaflow_run_id": self.run_id, "metaflow_pathspec": self.pathspec, **self.variant},
            parent_instance=str(flow_instance.urn),
        )

    @property
    def _flow_instance_id(self) -> str:
        return f"{self.flow_name}/{self.run_id}"

    def _flow_instance(self):
        from nyc_taxi.lineage.write.datahub import airflow_task_instance_urn, flow_run_instance

        parent = None
        if self.settings.parent_airflow_task:
            dag_id, task_id, run_id = self.settings.parent_airflow_task.split("/", 2)
            parent = airflow_task_instance_urn(dag_id, task_id, run_id, self.settings)
        return flow_run_instance(
            self.pipeline,
            self._flow_instance_id,
            {"metaflow_run_id": self.run_id, **self.variant},
            parent,
            self.settings,
        )

    def _first_step_of_run(self) -> bool:
        """The first step this run executes starts the flow run (with `resume`, that is not `start`)."""
        marker = self.settings.lineage_dir / "metaflow" / "runs" / f"{self.flow_name}-{self.run_id}.started"
        marker.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            return False

    def _record(self, events: list, records: list) -> None:
        from nyc_taxi.lineage.write.outbox import Outbox

        try:
            outbox = Outbox(self.settings, "metaflow")
            outbox.add_events(events)
            outbox.add_records(records)
        except Exception as error:  # lineage must never fail the flow
            log.warning("lineage of %s not recorded: %s", self.pathspec, error)

    # ---- the step's life ---------------------------------------------------------------------
    def started(self) -> None:
        from nyc_taxi.lineage.write.openlineage import run_event

        events, records = [], []
        if self._first_step_of_run():
            events.append(run_event("START", self.flow_run, settings=self.settings))
            instance = self._flow_instance()
            records += [
                *instance.generate_mcp(created_ts_millis=self.started_ms, materialize_iolets=False),
                *instance.start_event_mcp(self.started_ms),
            ]
        events.append(run_event("START", self.step_run, settings=self.settings))
        self._record(events, records)

    def _job_records(self, run, report: StepReport, failed: bool) -> list:
        """The DataFlow and the DataJob; after a failure, with the inputs, outputs and columns of the
        job's last good run (a failed run is a run of the job, not a new version of what it does)."""
        from nyc_taxi.lineage.write import datahub

        records = datahub.job_records(run, report, self.settings)
        if not failed:
            datahub.keep_job_io(self.job, records, self.settings)
            return records
        kept = datahub.kept_job_io(self.job, self.settings)
        return [r for r in records if not (kept and r.aspectName == "dataJobInputOutput")] + kept

    def finished(self, report: StepReport, error: BaseException | None) -> None:
        from datahub.api.entities.dataprocess.dataprocess_instance import InstanceRunResult

        from nyc_taxi.lineage.write import datahub
        from nyc_taxi.lineage.write.delivery import ship_at_end_of
        from nyc_taxi.lineage.write.openlineage import run_event

        try:
            self.step_run.job_version = self.job_version(report)
            run = self._datahub_run(report)
            events = [run_event("FAIL" if error else "COMPLETE", self.step_run, report, error, self.settings)]
            records = [
                *self._job_records(run, report, failed=error is not None),
                *datahub.write_records(report, f"metaflow:{self.job.qualified_name}", self.settings),
                *datahub.model_records(run, report, self.settings),
                *datahub.run_records(run, report, succeeded=error is None, settings=self.settings),
            ]
            if error is not None or self.is_end:
                events.append(
                    run_event("FAIL" if error else "COMPLETE", self.flow_run, error=error, settings=self.settings)
                )
                result = InstanceRunResult.FAILURE if error else InstanceRunResult.SUCCESS
                records += self._flow_instance().end_event_mcp(
                    int(time.time() * 1000), result=result, result_type="metaflow"
                )
        except Exception as failure:  # lineage must never fail the flow
            log.warning("lineage of %s not built: %s", self.pathspec, failure)
            return
        self._record(events, records)
        ship_at_end_of(self.pathspec, self.settings)
