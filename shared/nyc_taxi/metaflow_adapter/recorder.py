"""The Metaflow lineage recorder: a step's spooled entries as OpenLineage events and DataHub records.

A step of a flow with ``@lineage`` spools two plain entries (``lineage.py``): when it starts (its
context: flow run, step, parameters, upstream steps, the Airflow task that started the flow) and when
it ends (the same, what it read and wrote, and its error). This module turns them into records, in a
recorder process that outlives the steps (``python -m nyc_taxi.metaflow_adapter.recorder``, see
``nyc_taxi.lineage.write.spool``), or in the step itself when no recorder is alive.

OpenLineage: the flow run is the parent job (FLOW), each step a child job (STEP) with START and
COMPLETE/FAIL, its upstream steps' runs in a JobDependencies facet; when an Airflow task started the
flow (``OPENLINEAGE_PARENT_ID``), the flow run's parent is that task run and its root the DAG run.
DataHub: DataFlow, DataJobs, a DataProcessInstance per step run and one per flow run (whose parent
is the Airflow task's run), the model as an ML model.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass

from nyc_taxi.core.jobs import PIPELINES, Job, Pipeline
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.lineage.write.report import StepReport, report_from_dict
from nyc_taxi.lineage.write.spool import Spool, recorder_main

log = logging.getLogger(__name__)
TOOL, MODULE = "metaflow", "nyc_taxi.metaflow_adapter.recorder"


def spool(settings: Settings | None = None) -> Spool:
    return Spool(TOOL, MODULE, settings)


@dataclass(frozen=True)
class StepContext:
    """What a step's lineage needs to know of its run, as plain data (written by the step, in its entries)."""

    flow_name: str
    run_id: str
    step: str
    task_id: str
    started_ms: int
    upstream: list[str]
    is_end: bool
    first_of_run: bool  # this step starts the flow run (with `resume`, that is not `start`)
    variant: dict[str, str]  # the parameter that picks the model variant -> its value
    parameters: dict[str, str]
    nominal_time: str | None
    origin_run_id: str | None
    # the Airflow task that started the flow, if one did (OpenLineage parent/root, DataHub parent run)
    openlineage_parent_id: str | None
    openlineage_root_parent_id: str | None
    parent_airflow_task: str | None
    # a flow the registry does not declare is described by its graph: (description, code, [(step, doc)])
    undeclared: tuple[str, str, list] | None = None

    @property
    def pathspec(self) -> str:
        return f"{self.flow_name}/{self.run_id}/{self.step}/{self.task_id}"

    def pipeline(self) -> Pipeline:
        if self.flow_name in PIPELINES:
            return PIPELINES[self.flow_name]
        description, code, steps = self.undeclared
        return Pipeline(self.flow_name, "metaflow", description, code, jobs=tuple(Job(s, doc) for s, doc in steps))


def ends_run(entry: dict) -> bool:
    return entry["kind"] == "finished" and (entry["error"] is not None or entry["context"]["is_end"])


def ship(entries: list[dict], settings: Settings | None = None) -> None:
    """After the end of a step (not its start): ship what is pending, within the time budget. A warning
    names the step, so the run's last step can repeat it in the run's own output."""
    from nyc_taxi.lineage.write.delivery import ship_at_end_of

    ended = [e for e in entries if e["kind"] == "finished"]
    if ended:
        ship_at_end_of(StepContext(**ended[-1]["context"]).pathspec, settings)


def record(entry: dict, settings: Settings | None = None) -> None:
    """One spooled entry into the outbox."""
    began = time.perf_counter()
    context = StepContext(**entry["context"])
    run = _StepRecords(context, settings or get_settings())
    if entry["kind"] == "started":
        run.started()
    else:
        run.finished(report_from_dict(entry["report"]), entry["error"], entry["ended_ms"])
    log.info("lineage of %s %s recorded in %.2f s", context.pathspec, entry["kind"], time.perf_counter() - began)


def record_leftovers(settings: Settings | None = None) -> int:
    """Record the entries no recorder is alive to record (one was killed): what readers of the local
    lineage and `bash run lineage-replay` do first. Returns how many there were."""
    leftover = spool(settings)
    if not leftover.pending() or leftover.recorder_alive():
        return 0
    return len(leftover.record_pending(lambda e: record(e, leftover.settings), lambda entries: None))


class _StepRecords:
    """The records of one run of one step."""

    def __init__(self, context: StepContext, settings: Settings):
        from nyc_taxi.lineage.write.openlineage import RunContext, RunRef, run_uuid

        self.context, self.settings = context, settings
        self.pipeline = context.pipeline()
        self.job = getattr(self.pipeline, context.step)
        flow, run_id = context.flow_name, context.run_id
        parameters = {f"param.{name}": value for name, value in context.parameters.items()}
        origin = {"metaflow.origin_run_id": context.origin_run_id} if context.origin_run_id else {}
        namespace = settings.openlineage_namespace
        airflow_parent = RunRef.parse(context.openlineage_parent_id)
        airflow_root = RunRef.parse(context.openlineage_root_parent_id) or airflow_parent
        self.flow_run = RunContext(
            job_name=flow,
            run_id=run_uuid("metaflow", flow, run_id),
            job_type="FLOW",
            integration="METAFLOW",
            code_path=self.pipeline.code,
            parent=airflow_parent,
            root=airflow_root,
            tags={**parameters, "metaflow.run": f"{flow}/{run_id}", **origin},
            nominal_time=context.nominal_time,
        )
        flow_ref = RunRef(namespace, flow, self.flow_run.run_id)
        self.step_run = RunContext(
            job_name=self.job.qualified_name,
            run_id=run_uuid("metaflow", flow, run_id, context.step),
            job_type="STEP",
            integration="METAFLOW",
            code_path=self.pipeline.code,
            parent=flow_ref,
            root=airflow_root or flow_ref,
            upstream=[
                RunRef(namespace, f"{flow}.{u}", run_uuid("metaflow", flow, run_id, u)) for u in context.upstream
            ],
            tags={**parameters, "metaflow.pathspec": context.pathspec, **origin},
            nominal_time=context.nominal_time,
        )

    def job_version(self, report: StepReport) -> str:
        """Changes when the step's inputs, outputs, variant or code change (lineage evolution)."""
        from nyc_taxi.lineage.write.openlineage import git_revision

        parts = [
            self.job.name,
            git_revision()[1],
            *sorted(u.name for u in report.inputs),
            "->",
            *sorted(u.name for u in report.outputs),
            *sorted(f"{k}={v}" for k, v in self.context.variant.items()),
        ]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]

    def _flow_instance(self, with_properties: bool = True):
        from nyc_taxi.lineage.write.datahub import airflow_task_instance_urn, flow_run_instance

        context, parent = self.context, None
        if with_properties and context.parent_airflow_task:
            dag_id, task_id, run_id = context.parent_airflow_task.split("/", 2)
            parent = airflow_task_instance_urn(dag_id, task_id, run_id, self.settings)
        properties = {"metaflow_run_id": context.run_id, **context.variant} if with_properties else {}
        return flow_run_instance(
            self.pipeline, f"{context.flow_name}/{context.run_id}", properties, parent, self.settings
        )

    def _datahub_run(self, report: StepReport):
        from nyc_taxi.lineage.write.datahub import StepRun

        context = self.context
        return StepRun(
            self.pipeline,
            self.job,
            f"{context.flow_name}/{context.run_id}/{self.job.name}/{context.task_id}",
            context.started_ms,
            self.job_version(report),
            upstream=context.upstream,
            properties={"metaflow_run_id": context.run_id, "metaflow_pathspec": context.pathspec, **context.variant},
            parent_instance=str(self._flow_instance(with_properties=False).urn),
        )

    def _record(self, events: list, records: list) -> None:
        from nyc_taxi.lineage.write.destinations import openlineage_disabled
        from nyc_taxi.lineage.write.outbox import Outbox

        outbox = Outbox(self.settings, TOOL)
        if not openlineage_disabled():  # OPENLINEAGE_DISABLED: no event, as Airflow's provider makes none
            outbox.add_events(events)
        outbox.add_records(records)

    def started(self) -> None:
        from nyc_taxi.lineage.write.openlineage import run_event

        events, records = [], []
        if self.context.first_of_run:
            events.append(run_event("START", self.flow_run, settings=self.settings, at_ms=self.context.started_ms))
            instance = self._flow_instance()
            records += [
                *instance.generate_mcp(created_ts_millis=self.context.started_ms, materialize_iolets=False),
                *instance.start_event_mcp(self.context.started_ms),
            ]
        events.append(run_event("START", self.step_run, settings=self.settings, at_ms=self.context.started_ms))
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

    def finished(self, report: StepReport, error: str | None, ended_ms: int) -> None:
        from datahub.api.entities.dataprocess.dataprocess_instance import InstanceRunResult

        from nyc_taxi.lineage.write import datahub
        from nyc_taxi.lineage.write.openlineage import run_event

        state = "FAIL" if error else "COMPLETE"
        self.step_run.job_version = self.job_version(report)
        run = self._datahub_run(report)
        events = [run_event(state, self.step_run, report, error, self.settings, at_ms=ended_ms)]
        records = [
            *self._job_records(run, report, failed=error is not None),
            *datahub.write_records(
                report, f"metaflow:{self.job.qualified_name}", self.settings, ended_ms, self.step_run.run_id
            ),
            *datahub.model_records(run, report, self.settings, run_id=self.step_run.run_id, ended_ms=ended_ms),
            *datahub.run_records(
                run, report, error is None, self.settings, ended_ms=ended_ms, run_id=self.step_run.run_id
            ),
        ]
        if error is not None or self.context.is_end:
            events.append(run_event(state, self.flow_run, error=error, settings=self.settings, at_ms=ended_ms))
            result = InstanceRunResult.FAILURE if error else InstanceRunResult.SUCCESS
            records += self._flow_instance().end_event_mcp(ended_ms, result=result, result_type="metaflow")
        self._record(events, records)


if __name__ == "__main__":
    recorder_main(TOOL, MODULE, record, ship, ends_run)
