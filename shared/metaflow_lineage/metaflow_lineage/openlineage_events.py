"""A step's run as OpenLineage run events, built with the OpenLineage client's typed classes.

The flow run is a job of type FLOW; each step a job of type STEP whose run's parent is the flow run.
The flow run's parent is the run that started it, when one did (``OPENLINEAGE_PARENT_ID``). Facets:
jobType, sourceCodeLocation (the flow's file) and documentation for jobs; parent, nominalTime, tags
(parameters, pathspec, attempt, the run resumed), jobDependencies (the upstream steps) and errorMessage
for runs; schema, version, columnLineage and input/output statistics for datasets.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from metaflow_lineage.context import RunRef, StepRun
from metaflow_lineage.datasets import Dataset, StepLineage

PRODUCER = "https://github.com/nyc-taxi-lineage/airflow-metaflow-lineage/tree/main/shared/metaflow_lineage"


def _time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()


def _dataset_facets(dataset: Dataset) -> dict:
    from openlineage.client.facet_v2 import column_lineage_dataset, dataset_version_dataset, schema_dataset

    facets: dict = {}
    if dataset.fields:
        fields = [schema_dataset.SchemaDatasetFacetFields(name, kind) for name, kind in dataset.fields]
        facets["schema"] = schema_dataset.SchemaDatasetFacet(fields=fields)
    if dataset.version is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=dataset.version)
    if dataset.column_lineage:
        facets["columnLineage"] = column_lineage_dataset.ColumnLineageDatasetFacet(
            fields={
                column: column_lineage_dataset.Fields(
                    inputFields=[
                        column_lineage_dataset.InputField(source.namespace, source.name, name)
                        for source, name in sources
                    ]
                )
                for column, sources in dataset.column_lineage
            }
        )
    return facets


def _used(dataset: Dataset, *, written: bool):
    """A dataset as an input or an output, with the rows read or written in its statistics facet."""
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import input_statistics_input_dataset, output_statistics_output_dataset

    if written:
        kind, statistics = OutputDataset, output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet
        name, facets_argument = "outputStatistics", "outputFacets"
    else:
        kind, statistics = InputDataset, input_statistics_input_dataset.InputStatisticsInputDatasetFacet
        name, facets_argument = "inputStatistics", "inputFacets"
    rows = {name: statistics(rowCount=dataset.rows)} if dataset.rows is not None else {}
    return kind(dataset.namespace, dataset.name, facets=_dataset_facets(dataset), **{facets_argument: rows})


def _parent(parent: RunRef, root: RunRef | None):
    from openlineage.client.facet_v2 import parent_run

    root_facet = parent_run.Root(parent_run.RootRun(root.run_id), parent_run.RootJob(root.namespace, root.job))
    return parent_run.ParentRunFacet(
        run=parent_run.Run(parent.run_id), job=parent_run.Job(parent.namespace, parent.job), root=root_facet
    )


def _job(namespace: str, name: str, job_type: str, description: str, code_file: str | None):
    from openlineage.client.event_v2 import Job
    from openlineage.client.facet_v2 import documentation_job, job_type_job, source_code_location_job

    facets: dict = {"jobType": job_type_job.JobTypeJobFacet("BATCH", "METAFLOW", job_type)}
    if description:
        facets["documentation"] = documentation_job.DocumentationJobFacet(description)
    if code_file:
        location = Path(code_file).resolve()
        facets["sourceCodeLocation"] = source_code_location_job.SourceCodeLocationJobFacet(
            "file", location.as_uri(), path=str(location)
        )
    return Job(namespace, name, facets=facets)


def _tags(pairs: dict[str, str]):
    from openlineage.client.facet_v2 import tags_run

    return tags_run.TagsRunFacet([tags_run.TagsRunFacetFields(key, value, "METAFLOW") for key, value in pairs.items()])


def _run_facets(step: StepRun, tags: dict[str, str], error: str | None) -> dict:
    from openlineage.client.facet_v2 import error_message_run, nominal_time_run

    facets: dict = {"tags": _tags(tags)}
    if step.nominal_time:
        facets["nominalTime"] = nominal_time_run.NominalTimeRunFacet(step.nominal_time)
    if error:
        facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(error, "python")
    return facets


def _run_tags(step: StepRun, **more: str) -> dict[str, str]:
    origin = {"metaflow.origin_run_id": step.origin_run_id} if step.origin_run_id else {}
    return {**{f"param.{k}": v for k, v in step.parameters.items()}, **origin, **more}


def flow_event(step: StepRun, state: str, at_ms: int, error: str | None = None):
    """The flow run's START (from the first step that runs) or its COMPLETE/FAIL (from the last)."""
    facets = _run_facets(step, _run_tags(step, **{"metaflow.run": f"{step.flow}/{step.run_id}"}), error)
    if step.parent:
        facets["parent"] = _parent(step.parent, step.root)
    job = _job(step.namespace, step.flow, "FLOW", step.flow_description, step.code_file)
    return _event(state, at_ms, step.flow_run_uuid, facets, job, StepLineage())


def _event(state: str, at_ms: int, run_id: str, facets: dict, job, lineage: StepLineage):
    from openlineage.client.event_v2 import Run, RunEvent, RunState

    return RunEvent(
        eventTime=_time(at_ms),
        producer=PRODUCER,
        eventType=RunState[state],
        run=Run(run_id, facets=facets),
        job=job,
        inputs=[_used(d, written=False) for d in lineage.inputs],
        outputs=[_used(d, written=True) for d in lineage.outputs],
    )


def step_event(step: StepRun, state: str, at_ms: int, lineage: StepLineage | None = None, error: str | None = None):
    """A step run's START, COMPLETE or FAIL; the end carries what it read and wrote."""
    from openlineage.client.facet_v2 import job_dependencies_run

    tags = _run_tags(step, **{"metaflow.pathspec": step.pathspec, "metaflow.attempt": str(step.attempt)})
    facets = _run_facets(step, tags, error)
    facets["parent"] = _parent(step.flow_run, step.root or step.flow_run)
    if step.upstream:
        facets["jobDependencies"] = job_dependencies_run.JobDependenciesRunFacet(
            upstream=[
                job_dependencies_run.JobDependency(
                    job_dependencies_run.JobIdentifier(step.namespace, f"{step.flow}.{u}")
                )
                for u in step.upstream
            ]
        )
    job = _job(step.namespace, step.job_name, "STEP", step.description, step.code_file)
    return _event(state, at_ms, step.step_run_uuid, facets, job, lineage or StepLineage())


def as_dict(event) -> dict:
    from openlineage.client.serde import Serde

    return Serde.to_dict(event)
