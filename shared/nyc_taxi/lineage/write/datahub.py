"""DataHub: a step's report as DataHub records (MCPs), built with DataHub's own SDK.

For every step (both tools): the schema of each table written and an Operation carrying the version
written (the Iceberg snapshot id). For integrations that have no DataHub plugin (Metaflow): the
DataFlow, the DataJob (inputs, outputs, fine-grained column lineage, upstream jobs, job version),
a DataProcessInstance per run (start, end, result, the inputs and outputs that run really used,
their versions, its parent run) and the model as an ML model.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from nyc_taxi.core import jobs as declared
from nyc_taxi.core.datasets import MODELS, Model, Table
from nyc_taxi.core.jobs import Job, Pipeline
from nyc_taxi.core.naming import datahub_flow_urn, datahub_job_urn, iceberg_identifier, identity
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.lineage.write.datahub_quality import field_urn, quality_records
from nyc_taxi.lineage.write.report import DatasetUse, StepReport

_NATIVE_TO_DATAHUB = {
    "INT": "NumberTypeClass",
    "BIGINT": "NumberTypeClass",
    "DOUBLE": "NumberTypeClass",
    "STRING": "StringTypeClass",
    "DATE": "DateTypeClass",
    "TIMESTAMP": "TimeTypeClass",
    "TIMESTAMP_NTZ": "TimeTypeClass",
}


def _now_ms() -> int:
    return int(time.time() * 1000)


def schema_metadata(table: Table, settings: Settings | None = None):
    """The registry's schema of a table as DataHub's SchemaMetadata aspect."""
    from datahub.emitter.mce_builder import make_data_platform_urn
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.metadata import schema_classes as dhs

    settings = settings or get_settings()
    fields = [
        dhs.SchemaFieldClass(
            fieldPath=c.name,
            nativeDataType=c.type,
            description=c.doc,
            nullable=c.nullable,
            type=dhs.SchemaFieldDataTypeClass(type=getattr(dhs, _NATIVE_TO_DATAHUB[c.type])()),
            isPartOfKey=c.name in table.primary_key,
        )
        for c in table.columns
    ]
    aspect = dhs.SchemaMetadataClass(
        schemaName=iceberg_identifier(table, settings),
        platform=make_data_platform_urn("iceberg"),
        version=0,
        hash="",
        platformSchema=dhs.OtherSchemaClass(rawSchema=""),
        fields=fields,
        primaryKeys=list(table.primary_key) or None,
    )
    return MetadataChangeProposalWrapper(entityUrn=identity(table, settings).datahub_urn, aspect=aspect)


def write_records(
    report: StepReport,
    actor: str,
    settings: Settings | None = None,
    at_ms: int | None = None,
    run_id: str | None = None,
) -> list:
    """The schema of every table written, an Operation carrying the version this run wrote (at ``at_ms``:
    now), the checks this run evaluated with their results and the profile of every snapshot it wrote
    (``quality_records``; ``run_id``: the run they are results of)."""
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.metadata import schema_classes as dhs

    settings = settings or get_settings()
    now = at_ms or _now_ms()
    records = quality_records(report, actor.split(":", 1)[0], run_id or actor, settings, now)
    for use in report.outputs:
        if not isinstance(use.dataset, Table):
            continue
        records.append(schema_metadata(use.dataset, settings))
        properties = {"actor": actor}
        if use.version is not None:
            properties["snapshot_id"] = str(use.version)
        if use.committed is not None:
            properties["committed"] = str(use.committed).lower()
        if use.changes is not None:
            properties |= {f"rows_{kind}": str(getattr(use.changes, kind)) for kind in ("added", "changed", "removed")}
        if use.source_version:
            properties["source_version"] = use.source_version
        if use.replaced_version:
            properties["replaced_source_version"] = use.replaced_version
        records.append(
            MetadataChangeProposalWrapper(
                entityUrn=identity(use.dataset, settings).datahub_urn,
                aspect=dhs.OperationClass(
                    timestampMillis=now,
                    lastUpdatedTimestamp=now,
                    operationType=use.operation,
                    numAffectedRows=use.changes.total if use.changes is not None else use.row_count,
                    customProperties=properties,
                    sourceType=dhs.OperationSourceTypeClass.DATA_PROCESS,
                ),
            )
        )
    return records


def fine_grained_lineages(report: StepReport, settings: Settings | None = None) -> list:
    """The report's column lineage as DataHub's fine-grained lineage of a DataJob (field to field)."""
    from datahub.metadata import schema_classes as dhs

    settings = settings or get_settings()
    lineages = []
    for use in report.outputs:
        for column, sources in sorted(use.columns.items()):
            kinds = sorted({s.transformation for s in sources})
            lineages.append(
                dhs.FineGrainedLineageClass(
                    upstreamType=dhs.FineGrainedLineageUpstreamTypeClass.FIELD_SET,
                    upstreams=sorted({field_urn(s.dataset, s.column, settings) for s in sources}),
                    downstreamType=dhs.FineGrainedLineageDownstreamTypeClass.FIELD,
                    downstreams=[field_urn(use.dataset, column, settings)],
                    transformOperation=",".join(kinds),
                )
            )
    return lineages


def _dataset_urns(uses: list[DatasetUse], settings: Settings):
    from datahub.metadata.urns import DatasetUrn

    return [
        DatasetUrn.from_string(identity(u.dataset, settings).datahub_urn)
        for u in uses
        if not isinstance(u.dataset, Model)
    ]


def _versions(prefix: str, uses: list[DatasetUse]) -> dict[str, str]:
    """The version of every dataset the run used, and the range of rows it read or wrote where not all."""
    versions = {f"{prefix}.{u.name}": str(u.version) for u in uses if u.version is not None}
    ranges = {
        f"{prefix}.{u.name}.range": f"{u.range.start} <= {u.range.column} < {u.range.end}" for u in uses if u.range
    }
    return versions | ranges


@dataclass
class StepRun:
    """One run of a step of a pipeline that has no DataHub plugin of its own (a Metaflow step)."""

    pipeline: Pipeline
    job: Job
    run_id: str  # the DataProcessInstance id: unique per run of this job
    started_ms: int
    job_version: str
    upstream: list[str] = field(default_factory=list)  # the jobs of the same pipeline that ran right before
    properties: dict[str, str] = field(default_factory=dict)
    parent_instance: str | None = None  # a DataProcessInstance URN (the flow run)


def job_records(run: StepRun, report: StepReport, settings: Settings | None = None) -> list:
    """The DataFlow and the DataJob as this run saw them (inputs, outputs, column lineage, version)."""
    from datahub.api.entities.datajob import DataFlow, DataJob
    from datahub.metadata.urns import DataFlowUrn, DataJobUrn

    settings = settings or get_settings()
    flow = DataFlow(
        orchestrator=run.pipeline.orchestrator,
        id=run.pipeline.name,
        env=settings.datahub_env,
        platform_instance=settings.datahub_platform_instance,
        description=run.pipeline.description,
    )
    job = DataJob(
        id=run.job.name,
        flow_urn=DataFlowUrn.from_string(datahub_flow_urn(run.pipeline, settings)),
        platform_instance=settings.datahub_platform_instance,
        description=run.job.description,
        properties={"version": run.job_version, **run.properties},
    )
    job.inlets, job.outlets = _dataset_urns(report.inputs, settings), _dataset_urns(report.outputs, settings)
    job.fine_grained_lineages = fine_grained_lineages(report, settings)
    job.upstream_urns = [DataJobUrn.from_string(datahub_job_urn(run.pipeline, name, settings)) for name in run.upstream]
    return [*flow.generate_mcp(), *job.generate_mcp()]


def job_io_records(
    pipeline: Pipeline, job: Job, report: StepReport, upstream: list[str], settings: Settings | None = None
) -> list:
    """The DataJob's input/output aspect as a run saw it: datasets, upstream jobs and fine-grained
    column lineage (for a job whose integration writes the rest of the DataJob itself)."""
    from datahub.api.entities.datajob import DataJob
    from datahub.metadata.urns import DataFlowUrn, DataJobUrn

    settings = settings or get_settings()
    data_job = DataJob(
        id=job.name,
        flow_urn=DataFlowUrn.from_string(datahub_flow_urn(pipeline, settings)),
        platform_instance=settings.datahub_platform_instance,
        inlets=_dataset_urns(report.inputs, settings),
        outlets=_dataset_urns(report.outputs, settings),
        fine_grained_lineages=fine_grained_lineages(report, settings),
        upstream_urns=[DataJobUrn.from_string(datahub_job_urn(pipeline, name, settings)) for name in upstream],
    )
    return [mcp for mcp in data_job.generate_mcp() if mcp.aspectName == "dataJobInputOutput"]


# ---- what a job does is what its last good run showed ------------------------------------------------


def _kept_io_path(job: Job, settings: Settings):
    return settings.lineage_dir / "cache" / "job-io" / f"{job.qualified_name}.json"


def keep_job_io(job: Job, records: list, settings: Settings | None = None) -> None:
    """Remember the DataJob input/output aspect a good run recorded (datasets, column lineage)."""
    import json

    path = _kept_io_path(job, settings or get_settings())
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = [r.to_obj() for r in records if r.aspectName == "dataJobInputOutput"]
    path.with_suffix(".tmp").write_text(json.dumps(kept))
    path.with_suffix(".tmp").replace(path)


def kept_job_io(job: Job, settings: Settings | None = None) -> list:
    """The input/output aspect of the job's last good run, to record again after a failed run: DataHub
    keeps one DataJob per job, and a run that failed before it knew its columns must not erase them."""
    import json

    from datahub.emitter.mcp import MetadataChangeProposalWrapper

    path = _kept_io_path(job, settings or get_settings())
    if not path.exists():
        return []
    return [MetadataChangeProposalWrapper.from_obj(obj) for obj in json.loads(path.read_text())]


MODEL_CHECK = "check:"  # the name of a model check's result among its training metrics


def model_check_value(result, run_id: str, tool: str, at_ms: int) -> str:
    """A model check's result as JSON: its status, counts, summary and the run that evaluated it."""
    counts = {k: getattr(result, k) for k in ("status", "severity", "failing", "rows", "expected", "version")}
    return json.dumps(counts | {"run": run_id, "tool": tool, "at_ms": at_ms, "summary": result.summary()})


def model_check_metric(result, run_id: str, tool: str, at_ms: int):
    """A check of the model's, as one of its training metrics (DataHub's assertions assert on datasets only)."""
    from datahub.metadata import schema_classes as dhs

    return dhs.MLMetricClass(
        name=f"{MODEL_CHECK}{result.check}",
        description=result.summary(),
        value=model_check_value(result, run_id, tool, at_ms),
        createdAt=at_ms,
    )


def refused_model_checks(
    report: StepReport | None, settings: Settings, run_id: str, tool: str, at_ms: int
) -> dict[str, str]:
    """The checks of a model its checks refused, as properties of the run that refused it (evaluated when
    it ended, ``at_ms``): no version of the model is written to carry them as training metrics
    (``check:<model urn>:<check>``)."""
    return {
        f"{MODEL_CHECK}{identity(use.dataset, settings).datahub_urn}:{r.check}": model_check_value(
            r, run_id, tool, at_ms
        )
        for use in (report.outputs if report else [])
        if isinstance(use.dataset, Model) and not use.committed
        for r in use.checks
        if r.here
    }


def model_records(
    run: StepRun,
    report: StepReport,
    settings: Settings | None = None,
    run_id: str = "",
    tool: str = "metaflow",
    ended_ms: int | None = None,
) -> list:
    """A model written by this run: an ML model, trained by this job, used by the jobs declared to read it, its
    checks' results among its training metrics (``run_id``: the run they are results of, evaluated when it
    ended, ``ended_ms``, else now: a check's history is ordered by its runs, not by when their records were
    made). A model its checks refused is none (no version of it is written). A model this run measured
    (``report.model_metrics``: its backtest scores) gets its featured measures (``mlModelMetrics``) and the
    datasets they were measured on, the run's inputs (``mlModelEvaluationData``)."""
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.metadata import schema_classes as dhs

    settings = settings or get_settings()
    records = []
    for use in report.outputs:
        if isinstance(use.dataset, Model) and use.committed:
            users = [
                datahub_job_urn(p, j, settings)
                for p in declared.PIPELINES.values()
                for j in p.jobs
                if use.dataset in j.reads
            ]
            records.append(
                MetadataChangeProposalWrapper(
                    entityUrn=identity(use.dataset, settings).datahub_urn,
                    aspect=dhs.MLModelPropertiesClass(
                        name=use.dataset.name,
                        description=use.dataset.description,
                        version=dhs.VersionTagClass(versionTag=str(use.version)),
                        trainingJobs=[datahub_job_urn(run.pipeline, run.job, settings)],
                        downstreamJobs=users,
                        trainingMetrics=[
                            model_check_metric(r, run_id or run.run_id, tool, ended_ms or _now_ms())
                            for r in use.checks
                            if r.here
                        ]
                        or None,
                        # what the fit says of itself (its wet factor, a fall back to seasonal naive, the
                        # weather it forecasts with): the run's summary, as text
                        customProperties={
                            **run.properties,
                            **{k: v if isinstance(v, str) else json.dumps(v) for k, v in report.summary.items()},
                        },
                    ),
                )
            )
    for name, measures in report.model_metrics.items():
        # its own aspects, not mlModelProperties' metric lists: that aspect is written whole by each training run
        # (its checks are its training metrics), and a later step's write would replace it
        urn = identity(MODELS[name], settings).datahub_urn
        evaluated_on = [use.dataset for use in report.inputs if isinstance(use.dataset, Table)]  # forecasts, actuals
        records += [
            MetadataChangeProposalWrapper(entityUrn=urn, aspect=dhs.MetricsClass(performanceMeasures=measures)),
            MetadataChangeProposalWrapper(
                entityUrn=urn,
                aspect=dhs.EvaluationDataClass(
                    evaluationData=[
                        dhs.BaseDataClass(dataset=identity(t, settings).datahub_urn, motivation=t.description)
                        for t in dict.fromkeys(evaluated_on)
                    ]
                ),
            ),
        ]
    return records


def process_instance(
    run: StepRun,
    report: StepReport | None,
    settings: Settings | None = None,
    run_id: str = "",
    tool: str = "metaflow",
    ended_ms: int | None = None,
):
    """A step run as a DataProcessInstance: its job, properties, inputs and outputs (``run_id``, ``tool``: of
    the checks it evaluated, as model_records)."""
    from datahub.api.entities.datajob import DataJob
    from datahub.api.entities.dataprocess.dataprocess_instance import DataProcessInstance
    from datahub.metadata.urns import DataFlowUrn, DataProcessInstanceUrn

    settings = settings or get_settings()
    job = DataJob(
        id=run.job.name,
        flow_urn=DataFlowUrn.from_string(datahub_flow_urn(run.pipeline, settings)),
        platform_instance=settings.datahub_platform_instance,
    )
    instance = DataProcessInstance.from_datajob(job, id=run.run_id)
    instance.properties.update(
        {
            "job_version": run.job_version,
            **run.properties,
            **_versions("input", report.inputs if report else []),
            **_versions("output", report.outputs if report else []),
            **refused_model_checks(report, settings, run_id or run.run_id, tool, ended_ms or _now_ms()),
        }
    )
    if report is not None:
        instance.inlets, instance.outlets = (
            _dataset_urns(report.inputs, settings),
            _dataset_urns(report.outputs, settings),
        )
    if run.parent_instance:
        instance.parent_instance = DataProcessInstanceUrn.from_string(run.parent_instance)
    return instance


def run_records(
    run: StepRun,
    report: StepReport | None,
    succeeded: bool,
    settings: Settings | None = None,
    ended_ms: int | None = None,
    run_id: str = "",
) -> list:
    """A finished step run: its DataProcessInstance (properties, inputs, outputs, start and end: ``ended_ms``, now)."""
    from datahub.api.entities.dataprocess.dataprocess_instance import InstanceRunResult

    ended_ms = ended_ms or _now_ms()
    instance = process_instance(run, report, settings, run_id, ended_ms=ended_ms)
    result = InstanceRunResult.SUCCESS if succeeded else InstanceRunResult.FAILURE
    return [
        *instance.generate_mcp(created_ts_millis=run.started_ms, materialize_iolets=False),
        *instance.start_event_mcp(run.started_ms),
        *instance.end_event_mcp(ended_ms, result=result, result_type=run.pipeline.orchestrator),
    ]


def flow_run_instance(
    pipeline: Pipeline,
    run_id: str,
    properties: dict[str, str],
    parent_instance: str | None,
    settings: Settings | None = None,
):
    """The DataProcessInstance of a whole flow run, whose parent may be the Airflow task run that started it."""
    from datahub.api.entities.datajob import DataFlow
    from datahub.api.entities.dataprocess.dataprocess_instance import DataProcessInstance
    from datahub.metadata.urns import DataProcessInstanceUrn

    settings = settings or get_settings()
    flow = DataFlow(
        orchestrator=pipeline.orchestrator,
        id=pipeline.name,
        env=settings.datahub_env,
        platform_instance=settings.datahub_platform_instance,
    )
    instance = DataProcessInstance.from_dataflow(flow, id=run_id)
    instance.properties.update(properties)
    if parent_instance:
        instance.parent_instance = DataProcessInstanceUrn.from_string(parent_instance)
    return instance


def airflow_task_instance_urn(dag_id: str, task_id: str, run_id: str, settings: Settings | None = None) -> str:
    """The URN DataHub's Airflow plugin gives a task run (its DataProcessInstance), built the plugin's way."""
    from datahub.api.entities.datajob import DataJob
    from datahub.api.entities.dataprocess.dataprocess_instance import DataProcessInstance
    from datahub.metadata.urns import DataFlowUrn

    settings = settings or get_settings()
    flow = DataFlowUrn.from_string(datahub_flow_urn(declared.PIPELINES[dag_id], settings))
    job = DataJob(id=task_id, flow_urn=flow, platform_instance=settings.datahub_platform_instance)
    return str(DataProcessInstance.from_datajob(job, id=f"{dag_id}_{task_id}_{run_id}").urn)
