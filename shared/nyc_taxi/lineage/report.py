"""What one step of a pipeline read and wrote, and how both lineage systems are told about it.

A step (an Airflow task or a Metaflow step) returns a ``StepReport``; the orchestrator's own
integration turns it into typed OpenLineage datasets with facets and into DataHub aspects. The
identities always come from the registry.
"""

from __future__ import annotations

import functools
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

import datahub.emitter.mce_builder as dh
from datahub.emitter.mcp import MetadataChangeProposalWrapper
from datahub.metadata import schema_classes as dhs
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import (
    data_quality_assertions_dataset,
    data_quality_metrics_input_dataset,
    dataset_version_dataset,
    datasource_dataset,
    output_statistics_output_dataset,
    schema_dataset,
    source_code_location_job,
)

from nyc_taxi.registry import Column, Model, SourceFiles, Table
from nyc_taxi.settings import REPO_ROOT, Settings, get_settings

Dataset = Table | SourceFiles | Model


@dataclass(frozen=True)
class Check:
    """A data-quality count: rows that a consumer should know about (kept, not dropped)."""

    name: str
    rows: int
    column: str | None = None

    @property
    def passed(self) -> bool:
        return self.rows == 0


@dataclass
class DatasetUse:
    """A dataset as one step run saw it: the version read or written and what was measured."""

    dataset: Dataset
    snapshot_id: int | None = None
    row_count: int | None = None
    null_counts: dict[str, int] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    source_url: str | None = None
    operation: str = dhs.OperationTypeClass.UPDATE
    used_by: tuple[str, ...] = ()  # steps of the same flow that read this output (a model's consumers)


@dataclass
class StepReport:
    inputs: list[DatasetUse] = field(default_factory=list)
    outputs: list[DatasetUse] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


# ---- OpenLineage ------------------------------------------------------------------------------

def _schema_facet(columns: tuple[Column, ...]) -> schema_dataset.SchemaDatasetFacet:
    return schema_dataset.SchemaDatasetFacet(fields=[
        schema_dataset.SchemaDatasetFacetFields(name=c.name, type=c.type, description=c.doc) for c in columns])


def _dataset_facets(use: DatasetUse, settings: Settings) -> dict[str, Any]:
    facets: dict[str, Any] = dict(use.dataset.identity(settings).openlineage_dataset().facets)
    columns = getattr(use.dataset, "columns", ())
    if columns:
        facets["schema"] = _schema_facet(columns)
    if use.snapshot_id is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(use.snapshot_id))
    if use.source_url:
        facets["dataSource"] = datasource_dataset.DatasourceDatasetFacet(name=use.dataset.name, uri=use.source_url)
    return facets


def openlineage_input(use: DatasetUse, settings: Settings | None = None) -> InputDataset:
    settings = settings or get_settings()
    ident = use.dataset.identity(settings)
    input_facets = {}
    if use.row_count is not None:
        input_facets["dataQualityMetrics"] = data_quality_metrics_input_dataset.DataQualityMetricsInputDatasetFacet(
            rowCount=use.row_count,
            columnMetrics={c: data_quality_metrics_input_dataset.ColumnMetrics(nullCount=n) for c, n in use.null_counts.items()})
    if use.checks:
        input_facets["dataQualityAssertions"] = data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(
            assertions=[data_quality_assertions_dataset.Assertion(
                assertion=f"{c.name} ({c.rows} rows, kept)", success=c.passed, column=c.column, severity="warn")
                for c in use.checks])
    return InputDataset(namespace=ident.ol_namespace, name=ident.ol_name, facets=_dataset_facets(use, settings),
                        inputFacets=input_facets)


def openlineage_output(use: DatasetUse, settings: Settings | None = None) -> OutputDataset:
    settings = settings or get_settings()
    ident = use.dataset.identity(settings)
    output_facets = {}
    if use.row_count is not None:
        output_facets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=use.row_count)
    return OutputDataset(namespace=ident.ol_namespace, name=ident.ol_name, facets=_dataset_facets(use, settings),
                         outputFacets=output_facets)


# ---- DataHub ----------------------------------------------------------------------------------

_NATIVE_TO_DATAHUB = {
    "INT": dhs.NumberTypeClass, "BIGINT": dhs.NumberTypeClass, "DOUBLE": dhs.NumberTypeClass,
    "STRING": dhs.StringTypeClass, "DATE": dhs.DateTypeClass,
    "TIMESTAMP": dhs.TimeTypeClass, "TIMESTAMP_NTZ": dhs.TimeTypeClass,
}


def schema_metadata(table: Table, settings: Settings | None = None) -> MetadataChangeProposalWrapper:
    """The registry's schema of a table as DataHub's SchemaMetadata aspect."""
    settings = settings or get_settings()
    ident = table.identity(settings)
    fields = [dhs.SchemaFieldClass(fieldPath=c.name, nativeDataType=c.type, description=c.doc, nullable=c.nullable,
                                   type=dhs.SchemaFieldDataTypeClass(type=_NATIVE_TO_DATAHUB[c.type]()),
                                   isPartOfKey=c.name in table.primary_key)
              for c in table.columns]
    aspect = dhs.SchemaMetadataClass(schemaName=table.identifier(settings), platform=dh.make_data_platform_urn("iceberg"),
                                     version=0, hash="", platformSchema=dhs.OtherSchemaClass(rawSchema=""), fields=fields,
                                     primaryKeys=list(table.primary_key) or None)
    return MetadataChangeProposalWrapper(entityUrn=ident.datahub_urn, aspect=aspect)


def datahub_records(report: StepReport, actor: str, settings: Settings | None = None) -> list[MetadataChangeProposalWrapper]:
    """DataHub aspects for what a step wrote: the schema, and an Operation carrying the Iceberg snapshot id."""
    settings = settings or get_settings()
    now = int(time.time() * 1000)
    records = []
    for use in report.outputs:
        if not isinstance(use.dataset, Table):
            continue
        records.append(schema_metadata(use.dataset, settings))
        properties = {"actor": actor}
        if use.snapshot_id is not None:
            properties["snapshot_id"] = str(use.snapshot_id)
        records.append(MetadataChangeProposalWrapper(
            entityUrn=use.dataset.identity(settings).datahub_urn,
            aspect=dhs.OperationClass(timestampMillis=now, lastUpdatedTimestamp=now, operationType=use.operation,
                                      numAffectedRows=use.row_count, customProperties=properties,
                                      sourceType=dhs.OperationSourceTypeClass.DATA_PROCESS)))
    return records


@functools.cache
def git_revision() -> tuple[str, str]:
    """(repository URL, commit) of the code that runs: the code version in both tools' lineage."""
    def git(*args):
        return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True).stdout.strip()

    return git("remote", "get-url", "origin") or REPO_ROOT.as_uri(), git("rev-parse", "HEAD") or "unknown"


def source_code_location(path: str) -> source_code_location_job.SourceCodeLocationJobFacet:
    """OpenLineage's source-code-location job facet for a file of this repository at the running commit."""
    repo, commit = git_revision()
    return source_code_location_job.SourceCodeLocationJobFacet(type="git", url=repo, repoUrl=repo, path=path,
                                                                 version=commit)


def current_versions(datasets, settings: Settings | None = None) -> list[DatasetUse]:
    """The datasets with the snapshot id the catalog holds now (what a failed run saw as input)."""
    from nyc_taxi.catalog import load_catalog

    settings = settings or get_settings()
    catalog = None
    uses = []
    for dataset in datasets:
        snapshot = None
        if isinstance(dataset, Table):
            try:
                catalog = catalog or load_catalog(settings)
                current = catalog.load_table(dataset.identifier(settings)).current_snapshot()
                snapshot = current.snapshot_id if current else None
            except Exception:  # no table yet, or the catalog is down: the run's own error says why
                snapshot = None
        uses.append(DatasetUse(dataset, snapshot_id=snapshot))
    return uses
