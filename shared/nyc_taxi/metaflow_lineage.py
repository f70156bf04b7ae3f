"""Lineage for Metaflow flows: one decorator per step emits OpenLineage events and DataHub records.

    @step
    @lineage
    def compute_actuals(self):
        self.lineage_report = forecast.compute_actuals(...)   # what the step read and wrote

OpenLineage: the flow run is the parent job (FLOW); each step is a child job (STEP) with
START/COMPLETE/FAIL, registry datasets with schema and version (Iceberg snapshot id), the job-type,
source-code-location (git commit) and nominal-time facets, and the step's upstream steps in a
JobDependencies run facet, so step order is visible where no dataset sits between two steps.
DataHub: a DataFlow for the flow, a DataJob per step (inputs, outputs, upstream DataJobs), a
DataProcessInstance per step run (start, end, result), and the model as an ML model.
Emission never fails the flow: errors are logged, and the local files always get the records.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import logging
import os
import time
import uuid
from zoneinfo import ZoneInfo

from nyc_taxi.lineage.destinations import metaflow_datahub_file, metaflow_openlineage_file, openlineage_transport
from nyc_taxi.lineage.report import (StepReport, datahub_records, git_revision, openlineage_input, openlineage_output,
                                     source_code_location)
from nyc_taxi.registry import Model
from nyc_taxi.settings import Settings, get_settings

log = logging.getLogger(__name__)
PRODUCER = "https://github.com/nyc-taxi-lineage/airflow-metaflow-lineage/metaflow"
NEW_YORK = ZoneInfo("America/New_York")


def run_uuid(*parts: str) -> str:
    """A stable OpenLineage run id for a Metaflow run or step run (the same from every process)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "metaflow:" + "/".join(parts)))


class _Recorder:
    def __init__(self, flow, step: str):
        from metaflow import current

        self.settings: Settings = get_settings()
        self.flow, self.step = current.flow_name, step
        self.run_id, self.task_id = current.run_id, current.task_id
        self.origin_run_id = getattr(current, "origin_run_id", None)
        self.upstream = [] if step == "start" else list(flow._graph[step].in_funcs)
        self.is_end = step == "end"
        as_of = getattr(flow, "as_of_datetime", None)
        self.nominal = None
        if as_of:
            local = dt.datetime.fromisoformat(str(as_of)).replace(tzinfo=NEW_YORK)
            self.nominal = local.astimezone(dt.timezone.utc).isoformat()
        self.variant = {k: str(getattr(flow, k)) for k in ("model",) if hasattr(flow, k)}
        self.parameters = {name: str(getattr(flow, name)) for name, _ in flow._get_parameters()}
        self.started_ms = int(time.time() * 1000)
        self._ol = None

    # ---- OpenLineage ------------------------------------------------------------------------
    def _client(self):
        if self._ol is None:
            from openlineage.client import OpenLineageClient

            path = metaflow_openlineage_file(self.settings)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._ol = OpenLineageClient(config={"transport": openlineage_transport(self.settings, path)})
        return self._ol

    def _emit_ol(self, event) -> None:
        try:
            self._client().emit(event)
        except Exception as error:  # a lineage backend must never stop the flow
            log.warning("OpenLineage event for %s.%s not sent: %s", self.flow, self.step, error)

    def _event(self, state, job_name: str, run_id: str, job_type: str, report: StepReport | None, error=None,
               with_parent: bool = True):
        from openlineage.client.event_v2 import Job, Run, RunEvent
        from openlineage.client.facet_v2 import (error_message_run, job_dependencies_run, job_type_job,
                                                 nominal_time_run, parent_run, tags_job,
                                                 tags_run)

        ns = self.settings.openlineage_namespace
        run_facets = {"tags": tags_run.TagsRunFacet(tags=[
            *(tags_run.TagsRunFacetFields(key=f"param.{name}", value=value, source="METAFLOW")
              for name, value in sorted(self.parameters.items())),
            tags_run.TagsRunFacetFields(key="metaflow.pathspec", value=f"{self.flow}/{self.run_id}/{self.step}/{self.task_id}", source="METAFLOW"),
            *([tags_run.TagsRunFacetFields(key="metaflow.origin_run_id", value=str(self.origin_run_id), source="METAFLOW")]
              if self.origin_run_id else [])])}
        if self.nominal:
            run_facets["nominalTime"] = nominal_time_run.NominalTimeRunFacet(nominalStartTime=self.nominal)
        if with_parent:
            flow_run = run_uuid(self.flow, self.run_id)
            run_facets["parent"] = parent_run.ParentRunFacet(
                run=parent_run.Run(runId=flow_run), job=parent_run.Job(namespace=ns, name=self.flow),
                root=parent_run.Root(run=parent_run.RootRun(runId=flow_run), job=parent_run.RootJob(namespace=ns, name=self.flow)))
            run_facets["jobDependencies"] = job_dependencies_run.JobDependenciesRunFacet(upstream=[
                job_dependencies_run.JobDependency(
                    job=job_dependencies_run.JobIdentifier(namespace=ns, name=f"{self.flow}.{u}"),
                    run=job_dependencies_run.RunIdentifier(runId=run_uuid(self.flow, self.run_id, u)),
                    dependency_type="DIRECT_INVOCATION", sequence_trigger_rule="FINISH_TO_START")
                for u in self.upstream])
        if error is not None:
            run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=f"{type(error).__name__}: {error}", programmingLanguage="python")
        job_facets = {
            "jobType": job_type_job.JobTypeJobFacet(processingType="BATCH", integration="METAFLOW", jobType=job_type),
            "sourceCodeLocation": source_code_location("metaflow/train_model_flow.py"),
        }
        if report is not None and job_type == "STEP":
            job_facets["tags"] = tags_job.TagsJobFacet(tags=[tags_job.TagsJobFacetFields(
                key="version", value=self.job_version(report), source="METAFLOW")])
        return RunEvent(
            eventType=state, eventTime=dt.datetime.now(dt.timezone.utc).isoformat(), producer=PRODUCER,
            run=Run(runId=run_id, facets=run_facets), job=Job(namespace=ns, name=job_name, facets=job_facets),
            inputs=[openlineage_input(u, self.settings) for u in (report.inputs if report else [])],
            outputs=[openlineage_output(u, self.settings) for u in (report.outputs if report else [])])

    def job_version(self, report: StepReport) -> str:
        """Changes when the step's inputs, outputs, variant or code change (lineage evolution)."""
        _, commit = git_revision()
        parts = [self.step, commit, *sorted(u.dataset.name for u in report.inputs),
                 "->", *sorted(u.dataset.name for u in report.outputs), *sorted(f"{k}={v}" for k, v in self.variant.items())]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]

    def _step_event(self, state, report=None, error=None):
        self._emit_ol(self._event(state, f"{self.flow}.{self.step}", run_uuid(self.flow, self.run_id, self.step),
                                  "STEP", report, error))

    def _flow_event(self, state, error=None):
        self._emit_ol(self._event(state, self.flow, run_uuid(self.flow, self.run_id), "FLOW", None, error, with_parent=False))

    def _flow_started_once(self) -> None:
        """The first step this run executes starts the flow run (with `resume`, that is not `start`)."""
        marker = self.settings.lineage_dir / "metaflow" / "runs" / f"{self.flow}-{self.run_id}.started"
        marker.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        from openlineage.client.event_v2 import RunState

        self._flow_event(RunState.START)

    # ---- DataHub ----------------------------------------------------------------------------
    def _datahub_emitters(self):
        from datahub.emitter.synchronized_file_emitter import SynchronizedFileEmitter

        path = metaflow_datahub_file(self.settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        emitters = [SynchronizedFileEmitter(filename=str(path))]
        if self.settings.datahub_gms_url:
            from datahub.emitter.rest_emitter import DatahubRestEmitter

            token = self.settings.datahub_token.get_secret_value() if self.settings.datahub_token else None
            emitters.append(DatahubRestEmitter(self.settings.datahub_gms_url, token=token, retry_max_times=1))
        return emitters

    def _datajob(self, report: StepReport):
        from datahub.api.entities.datajob import DataFlow, DataJob
        from datahub.metadata.urns import DatasetUrn

        flow = DataFlow(orchestrator="metaflow", id=self.flow, env=self.settings.datahub_env,
                        platform_instance=self.settings.datahub_platform_instance)
        job = DataJob(id=self.step, flow_urn=flow.urn, platform_instance=self.settings.datahub_platform_instance,
                      properties={"version": self.job_version(report), **self.variant})
        dataset_urns = lambda uses: [DatasetUrn.from_string(u.dataset.identity(self.settings).datahub_urn)
                                     for u in uses if not isinstance(u.dataset, Model)]
        job.inlets, job.outlets = dataset_urns(report.inputs), dataset_urns(report.outputs)
        job.upstream_urns = [DataJob(id=u, flow_urn=flow.urn).urn for u in self.upstream]
        return flow, job

    def _emit_datahub(self, report: StepReport, result) -> None:
        from datahub.api.entities.dataprocess.dataprocess_instance import DataProcessInstance

        flow, job = self._datajob(report)
        instance = DataProcessInstance.from_datajob(job, id=f"{self.flow}/{self.run_id}/{self.step}/{self.task_id}")
        instance.properties.update({"metaflow_run_id": str(self.run_id), **(
            {"origin_run_id": str(self.origin_run_id)} if self.origin_run_id else {})})
        for emitter in self._datahub_emitters():
            try:
                flow.emit(emitter)
                job.emit(emitter)
                instance.emit_process_start(emitter, self.started_ms, emit_template=False, materialize_iolets=False)
                instance.emit_process_end(emitter, int(time.time() * 1000), result=result, result_type="metaflow")
                for record in datahub_records(report, actor=f"metaflow:{self.flow}.{self.step}", settings=self.settings):
                    emitter.emit(record)
                for record in self._model_records(report, job):
                    emitter.emit(record)
                emitter.flush()
            except Exception as error:
                log.warning("DataHub records for %s.%s not sent to %s: %s", self.flow, self.step, type(emitter).__name__, error)

    def _model_records(self, report: StepReport, job):
        """The model an ML model entity, trained by this step and used by the steps that read it."""
        from datahub.emitter.mcp import MetadataChangeProposalWrapper
        from datahub.metadata import schema_classes as dhs
        from datahub.metadata.urns import DataJobUrn

        for use in report.outputs:
            if isinstance(use.dataset, Model):
                flow_urn = job.flow_urn
                consumers = [str(DataJobUrn.create_from_ids(data_flow_urn=str(flow_urn), job_id=c)) for c in use.used_by]
                yield MetadataChangeProposalWrapper(
                    entityUrn=use.dataset.identity(self.settings).datahub_urn,
                    aspect=dhs.MLModelPropertiesClass(
                        name=use.dataset.name, description=use.dataset.description,
                        version=dhs.VersionTagClass(versionTag=str(use.snapshot_id)),
                        trainingJobs=[str(job.urn)], downstreamJobs=consumers,
                        customProperties={"metaflow_run_id": str(self.run_id), **self.variant}))

    # ---- the step's life --------------------------------------------------------------------
    def start(self) -> None:
        from openlineage.client.event_v2 import RunState

        self._flow_started_once()
        self._step_event(RunState.START)

    def complete(self, report: StepReport) -> None:
        from datahub.api.entities.dataprocess.dataprocess_instance import InstanceRunResult
        from openlineage.client.event_v2 import RunState

        self._step_event(RunState.COMPLETE, report)
        self._emit_datahub(report, InstanceRunResult.SUCCESS)
        if self.is_end:
            self._flow_event(RunState.COMPLETE)

    def fail(self, error: BaseException) -> None:
        from datahub.api.entities.dataprocess.dataprocess_instance import InstanceRunResult
        from openlineage.client.event_v2 import RunState

        self._step_event(RunState.FAIL, None, error)
        self._emit_datahub(StepReport(), InstanceRunResult.FAILURE)
        self._flow_event(RunState.FAIL, error)


def lineage(step_function):
    """Report a Metaflow step's run to OpenLineage and DataHub. Put it under ``@step``.

    The step sets ``self.lineage_report`` (a StepReport) to say what it read and wrote; it is kept
    as an artifact of the step, so each run's inputs and outputs can be looked up later.
    """

    @functools.wraps(step_function)
    def step_with_lineage(self):
        recorder = _Recorder(self, step_function.__name__)
        recorder.start()
        self.lineage_report = StepReport()  # not the previous step's
        try:
            step_function(self)
        except BaseException as error:
            recorder.fail(error)
            raise
        recorder.complete(self.lineage_report)

    return step_with_lineage
