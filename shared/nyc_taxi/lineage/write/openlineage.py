"""OpenLineage: a step's report as typed datasets with facets, and run events for integrations that
build their own (the Metaflow adapter). Identities come from the registry's naming rules.

Facets used from the OpenLineage spec: schema, symlinks, version (the Iceberg snapshot id, the file
version, the model version), columnLineage; input/output statistics; data-quality metrics (on an
output, the profile of the snapshot written) and assertions (on an input, where the spec puts them: the
checks of the version read); subset (which files of a file dataset the run read or wrote, which range of a table's rows:
``start <= column < end`` as two comparisons joined by AND); for runs parent,
jobDependencies, nominalTime, errorMessage, tags; for jobs jobType, sourceCodeLocation, tags. One facet
of the project's own, where the spec has none (schema in ``lineage/facets/``): ``rowChanges``, the rows a
commit added, changed and removed, and the source version it replaced.
"""

from __future__ import annotations

import datetime as dt
import functools
import subprocess
import uuid
from dataclasses import dataclass, field
from typing import Any

from nyc_taxi.core.datasets import Column
from nyc_taxi.core.naming import identity
from nyc_taxi.core.settings import REPO_ROOT, Settings, get_settings
from nyc_taxi.lineage.write.report import DatasetUse, Range, StepReport, describe_error

PRODUCER = "https://github.com/nyc-taxi-lineage/airflow-metaflow-lineage"
OWN_FACETS = f"{PRODUCER}/blob/main/shared/nyc_taxi/lineage/facets"


@functools.cache
def _row_changes_facet():
    """The ``rowChanges`` output facet's class (the client's attrs facet types are imported lazily)."""
    import attr
    from openlineage.client.facet_v2 import OutputDatasetFacet

    @attr.define
    class RowChangesOutputDatasetFacet(OutputDatasetFacet):
        added: int = attr.field()
        changed: int = attr.field()
        removed: int = attr.field()
        sourceVersion: str | None = attr.field(default=None)  # noqa: N815
        replacedSourceVersion: str | None = attr.field(default=None)  # noqa: N815

        @staticmethod
        def _get_schema() -> str:
            return f"{OWN_FACETS}/RowChangesOutputDatasetFacet.json#/$defs/RowChangesOutputDatasetFacet"

    return RowChangesOutputDatasetFacet


def run_uuid(*parts: str) -> str:
    """A stable OpenLineage run id for a run named by ``parts`` (the same from every process)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "nyc-taxi:" + "/".join(parts)))


@functools.cache
def git_revision() -> tuple[str, str]:
    """(repository URL, commit) of the code that runs: the code version in both tools' lineage."""

    def git(*args):
        return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True).stdout.strip()

    return git("remote", "get-url", "origin") or REPO_ROOT.as_uri(), git("rev-parse", "HEAD") or "unknown"


def source_code_location(path: str):
    """The source-code-location job facet for a file of this repository at the running commit."""
    from openlineage.client.facet_v2 import source_code_location_job

    repo, commit = git_revision()
    return source_code_location_job.SourceCodeLocationJobFacet(
        type="git", url=repo, repoUrl=repo, path=path, version=commit
    )


# ---- datasets -------------------------------------------------------------------------------


def _schema(columns: tuple[Column, ...]):
    from openlineage.client.facet_v2 import schema_dataset

    return schema_dataset.SchemaDatasetFacet(
        fields=[schema_dataset.SchemaDatasetFacetFields(name=c.name, type=c.type, description=c.doc) for c in columns]
    )


def _column_lineage(use: DatasetUse, settings: Settings):
    from openlineage.client.facet_v2 import column_lineage_dataset as cl

    fields = {}
    for column, sources in sorted(use.columns.items()):
        inputs = []
        for source in sources:
            ident = identity(source.dataset, settings)
            inputs.append(
                cl.InputField(
                    namespace=ident.ol_namespace,
                    name=ident.ol_name,
                    field=source.column,
                    transformations=[
                        cl.Transformation(
                            type="INDIRECT" if source.indirect else "DIRECT",
                            subtype=source.transformation,
                            description=source.description,
                            masking=False,
                        )
                    ],
                )
            )
        fields[column] = cl.Fields(inputFields=inputs)
    return cl.ColumnLineageDatasetFacet(fields=fields)


def _dataset_facets(use: DatasetUse, settings: Settings) -> dict[str, Any]:
    from openlineage.client.facet_v2 import dataset_version_dataset

    facets: dict[str, Any] = dict(identity(use.dataset, settings).openlineage_dataset().facets)
    if use.dataset.columns:
        facets["schema"] = _schema(use.dataset.columns)
    if use.version is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(use.version))
    return facets


def _range_condition(range_: Range):
    """``start <= column < end`` as the subset facet's conditions: two comparisons joined by AND."""
    from openlineage.client.facet_v2 import base_subset_dataset as subset

    def compare(comparison: str, value: str):
        return subset.CompareSubsetCondition(
            left=subset.FieldBaseCompareExpression(field=range_.column),
            right=subset.LiteralCompareExpression(value=value),
            comparison=comparison,
        )

    return subset.BinarySubsetCondition(
        left=compare("GREATER_EQUAL_THAN", range_.start), right=compare("LESS_THAN", range_.end), operator="AND"
    )


def _assertion(result):
    """A check's result as the spec's assertion: its kind, name, column, severity, and success (no row
    failed, whatever the severity); what it expected and found, and its rule as SQL."""
    from openlineage.client.facet_v2 import data_quality_assertions_dataset

    expected = str(result.expected) if result.kind == "row_count" else "0 failing rows"
    actual = f"{result.rows} rows" if result.kind == "row_count" else f"{result.failing} of {result.rows} rows fail"
    return data_quality_assertions_dataset.Assertion(
        assertion=result.kind,
        name=result.check,
        success=result.passed,
        column=result.columns[0] if len(result.columns) == 1 else None,
        severity=result.severity,
        expected=expected,
        actual=actual,
        content=result.rule,
        contentType="sql",
        params={"status": result.status, "version": result.version, "tolerance": result.tolerance},
    )


@functools.cache
def _metrics_facet():
    """The spec's ``DataQualityMetricsDatasetFacet`` (a dataset facet, so an output may carry it).
    openlineage-python 1.54 names its schema 1-0-1, which the spec never published (its
    ``spec/facets`` holds 1-0-0, with the same fields): the facet names the published one."""
    from openlineage.client.facet_v2 import data_quality_metrics_dataset

    class DataQualityMetricsDatasetFacet(data_quality_metrics_dataset.DataQualityMetricsDatasetFacet):
        @staticmethod
        def _get_schema() -> str:
            return "https://openlineage.io/spec/facets/1-0-0/DataQualityMetricsDatasetFacet.json#/$defs/DataQualityMetricsDatasetFacet"

    return DataQualityMetricsDatasetFacet


def _number(text: str | None) -> float | None:
    return float(text) if text is not None else None


def _profile_metrics(profile):
    """A snapshot's profile as the spec's data-quality metrics: rows, bytes, files, and per column its
    nulls, distinct values and (numbers only, as the spec wants) minimum and maximum."""
    from openlineage.client.facet_v2 import data_quality_metrics_dataset as metrics

    return _metrics_facet()(
        rowCount=profile.rows,
        bytes=profile.size_bytes,
        fileCount=profile.files,
        columnMetrics={
            f.name: metrics.ColumnMetrics(
                nullCount=f.nulls,
                distinctCount=f.distinct,
                min=_number(f.min) if f.numeric else None,
                max=_number(f.max) if f.numeric else None,
            )
            for f in profile.fields
        },
    )


def input_dataset(use: DatasetUse, settings: Settings | None = None):
    from openlineage.client.event_v2 import InputDataset
    from openlineage.client.facet_v2 import (
        base_subset_dataset,
        data_quality_assertions_dataset,
        data_quality_metrics_input_dataset,
        input_statistics_input_dataset,
    )

    settings = settings or get_settings()
    ident = identity(use.dataset, settings)
    facets: dict[str, Any] = {}
    if use.row_count is not None:
        facets["dataQualityMetrics"] = data_quality_metrics_input_dataset.DataQualityMetricsInputDatasetFacet(
            rowCount=use.row_count, columnMetrics={}
        )
    if use.row_count is not None or use.size_bytes is not None:
        facets["inputStatistics"] = input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
            rowCount=use.row_count, size=use.size_bytes, fileCount=len(use.locations) or None
        )
    if use.checks:
        facets["dataQualityAssertions"] = data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(
            assertions=[_assertion(c) for c in use.checks]
        )
    if use.locations:
        facets["subset"] = base_subset_dataset.InputSubsetInputDatasetFacet(
            inputCondition=base_subset_dataset.LocationSubsetCondition(locations=list(use.locations))
        )
    elif use.range:
        facets["subset"] = base_subset_dataset.InputSubsetInputDatasetFacet(inputCondition=_range_condition(use.range))
    return InputDataset(
        namespace=ident.ol_namespace, name=ident.ol_name, facets=_dataset_facets(use, settings), inputFacets=facets
    )


def output_dataset(use: DatasetUse, settings: Settings | None = None):
    from openlineage.client.event_v2 import OutputDataset
    from openlineage.client.facet_v2 import base_subset_dataset, output_statistics_output_dataset

    settings = settings or get_settings()
    ident = identity(use.dataset, settings)
    facets = _dataset_facets(use, settings)
    if use.columns:
        facets["columnLineage"] = _column_lineage(use, settings)
    if use.profile is not None:
        facets["dataQualityMetrics"] = _profile_metrics(use.profile)
    output_facets: dict[str, Any] = {}
    if use.row_count is not None or use.size_bytes is not None:
        output_facets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=use.row_count, size=use.size_bytes, fileCount=len(use.locations) or None
        )
    if use.changes is not None:
        output_facets["rowChanges"] = _row_changes_facet()(
            added=use.changes.added,
            changed=use.changes.changed,
            removed=use.changes.removed,
            sourceVersion=use.source_version,
            replacedSourceVersion=use.replaced_version,
        )
    if use.locations:
        output_facets["subset"] = base_subset_dataset.OutputSubsetOutputDatasetFacet(
            outputCondition=base_subset_dataset.LocationSubsetCondition(locations=list(use.locations))
        )
    elif use.range:
        output_facets["subset"] = base_subset_dataset.OutputSubsetOutputDatasetFacet(
            outputCondition=_range_condition(use.range)
        )
    return OutputDataset(namespace=ident.ol_namespace, name=ident.ol_name, facets=facets, outputFacets=output_facets)


# ---- runs (for integrations that emit their own events) -------------------------------------------


@dataclass(frozen=True)
class RunRef:
    """Another run this one belongs to or follows: a parent, a root, an upstream step."""

    namespace: str
    job_name: str
    run_id: str

    @classmethod
    def parse(cls, text: str | None) -> RunRef | None:
        """``<namespace>/<job name>/<run id>``, as OpenLineage integrations pass a parent (dbt-ol, Airflow's macros)."""
        if not text or text.count("/") < 2:
            return None
        namespace, rest = text.split("/", 1)
        job_name, run_id = rest.rsplit("/", 1)
        return cls(namespace, job_name, run_id)


@dataclass
class RunContext:
    """What a run event says about its run, beyond the datasets."""

    job_name: str
    run_id: str
    job_type: str  # FLOW | STEP | DAG | TASK
    integration: str  # METAFLOW | AIRFLOW
    code_path: str
    parent: RunRef | None = None
    root: RunRef | None = None
    upstream: list[RunRef] = field(default_factory=list)  # runs of the steps that ran right before
    tags: dict[str, str] = field(default_factory=dict)  # run tags: parameters, pathspecs
    job_version: str | None = None
    nominal_time: str | None = None


def run_event(
    state: str,
    run: RunContext,
    report: StepReport | None = None,
    error: BaseException | str | None = None,
    settings: Settings | None = None,
    at_ms: int | None = None,
):
    """One run event; ``error``: the exception, or its description; ``at_ms``: when it happened (now)."""
    from openlineage.client.event_v2 import Job as OLJob
    from openlineage.client.event_v2 import Run, RunEvent, RunState
    from openlineage.client.facet_v2 import (
        error_message_run,
        job_dependencies_run,
        job_type_job,
        nominal_time_run,
        parent_run,
        tags_job,
        tags_run,
    )

    settings = settings or get_settings()
    source = run.integration
    run_facets: dict[str, Any] = {
        "tags": tags_run.TagsRunFacet(
            tags=[tags_run.TagsRunFacetFields(key=k, value=v, source=source) for k, v in sorted(run.tags.items())]
        )
    }
    if run.nominal_time:
        run_facets["nominalTime"] = nominal_time_run.NominalTimeRunFacet(nominalStartTime=run.nominal_time)
    if run.parent:
        root = run.root or run.parent
        run_facets["parent"] = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=run.parent.run_id),
            job=parent_run.Job(namespace=run.parent.namespace, name=run.parent.job_name),
            root=parent_run.Root(
                run=parent_run.RootRun(runId=root.run_id),
                job=parent_run.RootJob(namespace=root.namespace, name=root.job_name),
            ),
        )
    if run.job_type == "STEP":
        run_facets["jobDependencies"] = job_dependencies_run.JobDependenciesRunFacet(
            upstream=[
                job_dependencies_run.JobDependency(
                    job=job_dependencies_run.JobIdentifier(namespace=u.namespace, name=u.job_name),
                    run=job_dependencies_run.RunIdentifier(runId=u.run_id),
                    dependency_type="DIRECT_INVOCATION",
                    sequence_trigger_rule="FINISH_TO_START",
                )
                for u in run.upstream
            ]
        )
    if error is not None:
        run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=describe_error(error), programmingLanguage="python"
        )
    job_facets: dict[str, Any] = {
        "jobType": job_type_job.JobTypeJobFacet(
            processingType="BATCH", integration=run.integration, jobType=run.job_type
        ),
        "sourceCodeLocation": source_code_location(run.code_path),
    }
    if run.job_version:
        job_facets["tags"] = tags_job.TagsJobFacet(
            tags=[tags_job.TagsJobFacetFields(key="version", value=run.job_version, source=source)]
        )
    return RunEvent(
        eventType=getattr(RunState, state),
        eventTime=(dt.datetime.fromtimestamp(at_ms / 1000, dt.UTC) if at_ms else dt.datetime.now(dt.UTC)).isoformat(),
        producer=PRODUCER,
        run=Run(runId=run.run_id, facets=run_facets),
        job=OLJob(namespace=settings.openlineage_namespace, name=run.job_name, facets=job_facets),
        inputs=[input_dataset(u, settings) for u in (report.inputs if report else [])],
        outputs=[output_dataset(u, settings) for u in (report.outputs if report else [])],
    )
