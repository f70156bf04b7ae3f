"""A step's run as DataHub records, built with DataHub's SDK (``datahub.api.entities``, ``datahub.specific``).

The flow is a DataFlow (orchestrator ``metaflow``), each step a DataJob; each run of a step a
DataProcessInstance whose parent is the flow run's instance; a trained model an MLModel whose training
job is the step and its run, one per version, in an ML model group of the model's name. An output's row
count is an Operation on the dataset.

What people edit in DataHub is left alone: no ownership, tags or status are written (the SDK's builders
would write them empty, or undo a soft delete). A step's datasets, column lineage and upstream steps are added to its DataJob by a
patch, not written whole: the splits of a ``foreach`` each add theirs, and a failed run adds nothing. A
dataset a step no longer reads stays among its inputs until removed in DataHub.
"""

from __future__ import annotations

from metaflow_lineage.context import StepRun
from metaflow_lineage.datasets import Dataset, Model, StepLineage

ORCHESTRATOR = "metaflow"


# aspects the SDK's DataFlow and DataJob write that people set in DataHub's UI (owners, tags, a soft
# delete: written empty or "not removed" they would undo it); and the DataJob's lineage, which a patch
# adds to instead
NOT_WRITTEN = {"ownership", "globalTags", "status", "dataJobInputOutput"}


def dataset_urn(dataset: Dataset, env: str) -> str:
    from datahub.emitter.mce_builder import make_dataset_urn

    return make_dataset_urn(dataset.datahub_platform, dataset.datahub_dataset_name, env)


def _kept(records) -> list:
    return [r for r in records if r.aspectName not in NOT_WRITTEN]


def _typed(instance, step: StepRun):
    """A run started by a scheduler (it passed its run in) is a scheduled run; any other, an ad hoc one."""
    from datahub.metadata.schema_classes import DataProcessTypeClass

    instance.type = DataProcessTypeClass.BATCH_SCHEDULED if step.parent else DataProcessTypeClass.BATCH_AD_HOC
    return instance


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
    from datahub.metadata.urns import DatasetUrn

    return DataJob(
        id=step.step,
        flow_urn=_flow(step, env).urn,
        description=step.description or None,
        inlets=[DatasetUrn.from_string(dataset_urn(d, env)) for d in lineage.inputs],
        outlets=[DatasetUrn.from_string(dataset_urn(d, env)) for d in lineage.outputs],
    )


def _job_lineage(step: StepRun, job, lineage: StepLineage, env: str) -> list:
    """What this run read and wrote, its columns and its upstream steps, added to the DataJob's."""
    from datahub.metadata.urns import DataJobUrn
    from datahub.specific.datajob import DataJobPatchBuilder

    patch = DataJobPatchBuilder(str(job.urn))
    for dataset in lineage.inputs:
        patch.add_input_dataset(dataset_urn(dataset, env))
    for dataset in lineage.outputs:
        patch.add_output_dataset(dataset_urn(dataset, env))
    for upstream in step.upstream:
        patch.add_input_datajob(str(DataJobUrn.create_from_ids(str(job.flow_urn), upstream)))
    for fine in _fine_grained(lineage.outputs, env):
        patch.add_fine_grained_lineage(fine)
    return list(patch.build())


def _flow_instance(step: StepRun, env: str):
    from datahub.api.entities.dataprocess.dataprocess_instance import DataProcessInstance

    instance = _typed(
        DataProcessInstance.from_dataflow(_flow(step, env), f"{step.namespace}/{step.flow}/{step.run_id}"), step
    )
    instance.properties.update({**step.parameters, "metaflow_run_id": step.run_id})  # a parameter never hides it
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


def _model(step: StepRun, model: Model, trained_by: list[str], env: str, at_ms: int):
    """A model version: an ML model of its own (each version keeps its training run), in the model's group."""
    from datahub.emitter.mce_builder import make_ml_model_group_urn, make_ml_model_urn
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.metadata.schema_classes import MLModelPropertiesClass, TimeStampClass, VersionTagClass

    return MetadataChangeProposalWrapper(
        entityUrn=make_ml_model_urn(model.platform, f"{model.name}@{model.version}", env),
        aspect=MLModelPropertiesClass(
            name=model.name,
            version=VersionTagClass(versionTag=model.version),
            groups=[make_ml_model_group_urn(model.platform, model.name, env)],
            trainingJobs=trained_by,  # the step and its run
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
        job, f"{step.namespace}/{step.pathspec}/{step.attempt}", clone_inlets=True, clone_outlets=True
    )
    _typed(run, step).parent_instance = _flow_instance(step, env).urn  # the flow run's instance
    run.properties.update({**step.parameters, "metaflow_pathspec": step.pathspec, "attempt": str(step.attempt)})
    result = InstanceRunResult.FAILURE if failed else InstanceRunResult.SUCCESS
    records = _kept([*flow.generate_mcp(), *job.generate_mcp(materialize_iolets=False)])
    records += run.generate_mcp(created_ts_millis=step.started_ms, materialize_iolets=False)
    records += run.start_event_mcp(step.started_ms, attempt=step.attempt + 1)
    records += run.end_event_mcp(at_ms, result=result, result_type=ORCHESTRATOR, attempt=step.attempt + 1)
    if not failed:
        records += _job_lineage(step, job, lineage, env)
        trained_by = [str(job.urn), str(run.urn)]
        records += [_model(step, model, trained_by, env, at_ms) for model in lineage.models]
        records += _operations(lineage, env, at_ms)
    return records
