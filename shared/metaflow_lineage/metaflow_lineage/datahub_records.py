"""A step's run as DataHub records, built with DataHub's SDK (``datahub.api.entities``).

The flow is a DataFlow (orchestrator ``metaflow``), each step a DataJob with the datasets it read and
wrote, its column-level lineage and its upstream steps; each run of a step a DataProcessInstance whose
parent is the flow run's instance; a trained model an MLModel whose training job is the step. An
output's row count is an Operation on the dataset.
"""

from __future__ import annotations

from metaflow_lineage.context import StepRun
from metaflow_lineage.datasets import Dataset, Model, StepLineage

ORCHESTRATOR = "metaflow"


def dataset_urn(dataset: Dataset, env: str) -> str:
    from datahub.emitter.mce_builder import make_dataset_urn

    return make_dataset_urn(dataset.datahub_platform, dataset.datahub_name or dataset.name, env)


def _flow(step: StepRun, env: str):
    from datahub.api.entities.datajob import DataFlow

    return DataFlow(
        id=step.flow,
        orchestrator=ORCHESTRATOR,
        env=env,
        description=step.flow_description or None,
    )


def _fine_grained(outputs: list[Dataset], env: str) -> list:
    from datahub.emitter.mce_builder import make_schema_field_urn
    from datahub.metadata.schema_classes import (
        FineGrainedLineageClass,
        FineGrainedLineageDownstreamTypeClass,
        FineGrainedLineageUpstreamTypeClass,
    )

    return [
        FineGrainedLineageClass(
            upstreamType=FineGrainedLineageUpstreamTypeClass.FIELD_SET,
            upstreams=[make_schema_field_urn(dataset_urn(source, env), name) for source, name in sources],
            downstreamType=FineGrainedLineageDownstreamTypeClass.FIELD,
            downstreams=[make_schema_field_urn(dataset_urn(output, env), column)],
        )
        for output in outputs
        for column, sources in output.column_lineage
    ]


def _job(step: StepRun, lineage: StepLineage, env: str):
    from datahub.api.entities.datajob import DataJob
    from datahub.metadata.urns import DataJobUrn, DatasetUrn

    flow = _flow(step, env)
    return DataJob(
        id=step.step,
        flow_urn=flow.urn,
        description=step.description or None,
        inlets=[DatasetUrn.from_string(dataset_urn(d, env)) for d in lineage.inputs],
        outlets=[DatasetUrn.from_string(dataset_urn(d, env)) for d in lineage.outputs],
        fine_grained_lineages=_fine_grained(lineage.outputs, env),
        upstream_urns=[DataJobUrn.create_from_ids(str(flow.urn), u) for u in step.upstream],
    )


def _flow_instance(step: StepRun, env: str):
    from datahub.api.entities.dataprocess.dataprocess_instance import DataProcessInstance

    instance = DataProcessInstance.from_dataflow(_flow(step, env), f"{step.flow}/{step.run_id}")
    instance.properties.update({"metaflow_run_id": step.run_id, **step.parameters})
    if step.origin_run_id:
        instance.properties["metaflow_origin_run_id"] = step.origin_run_id
    return instance


def flow_started(step: StepRun, env: str) -> list:
    instance = _flow_instance(step, env)
    return [
        *instance.generate_mcp(created_ts_millis=step.started_ms, materialize_iolets=False),
        *instance.start_event_mcp(step.started_ms),
    ]


def flow_ended(step: StepRun, env: str, at_ms: int, failed: bool) -> list:
    from datahub.api.entities.dataprocess.dataprocess_instance import InstanceRunResult

    result = InstanceRunResult.FAILURE if failed else InstanceRunResult.SUCCESS
    return list(_flow_instance(step, env).end_event_mcp(at_ms, result=result, result_type=ORCHESTRATOR))


def _model(step: StepRun, model: Model, job_urn: str, env: str, at_ms: int):
    from datahub.emitter.mce_builder import make_ml_model_urn
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.metadata.schema_classes import MLModelPropertiesClass, TimeStampClass, VersionTagClass

    return MetadataChangeProposalWrapper(
        entityUrn=make_ml_model_urn(model.platform, model.name, env),
        aspect=MLModelPropertiesClass(
            name=model.name,
            version=VersionTagClass(versionTag=model.version),
            trainingJobs=[job_urn],
            created=TimeStampClass(time=at_ms),
            customProperties={"metaflow_pathspec": step.pathspec, **dict(model.properties)},
        ),
    )


def _operations(lineage: StepLineage, env: str, at_ms: int) -> list:
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.metadata.schema_classes import OperationClass, OperationTypeClass

    return [
        MetadataChangeProposalWrapper(
            entityUrn=dataset_urn(output, env),
            aspect=OperationClass(
                timestampMillis=at_ms,
                lastUpdatedTimestamp=at_ms,
                operationType=OperationTypeClass.UPDATE,
                numAffectedRows=output.rows,
            ),
        )
        for output in lineage.outputs
        if output.rows is not None
    ]


def step_ended(step: StepRun, lineage: StepLineage, env: str, at_ms: int, failed: bool) -> list:
    """The flow and the step (with what this run read and wrote), this run of it, its models, its outputs'
    row counts."""
    from datahub.api.entities.dataprocess.dataprocess_instance import DataProcessInstance, InstanceRunResult

    flow, job = _flow(step, env), _job(step, lineage, env)
    run = DataProcessInstance.from_datajob(
        job, f"{step.pathspec}/{step.attempt}", clone_inlets=True, clone_outlets=True
    )
    run.parent_instance = _flow_instance(step, env).urn  # the flow run's instance
    run.properties.update({"metaflow_pathspec": step.pathspec, "attempt": str(step.attempt), **step.parameters})
    result = InstanceRunResult.FAILURE if failed else InstanceRunResult.SUCCESS
    records = [*flow.generate_mcp(), *job.generate_mcp(materialize_iolets=False)]
    records += run.generate_mcp(created_ts_millis=step.started_ms, materialize_iolets=False)
    records += run.start_event_mcp(step.started_ms, attempt=step.attempt + 1)
    records += run.end_event_mcp(at_ms, result=result, result_type=ORCHESTRATOR, attempt=step.attempt + 1)
    if not failed:
        records += [_model(step, model, str(job.urn), env, at_ms) for model in lineage.models]
        records += _operations(lineage, env, at_ms)
    return records
