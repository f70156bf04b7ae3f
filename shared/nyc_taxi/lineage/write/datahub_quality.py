"""DataHub: what a run adds to its datasets' Quality and Stats tabs, built with DataHub's own SDK: each check it
evaluated as an assertion with its result, and a profile of every version it wrote."""

from __future__ import annotations

from nyc_taxi.core.datasets import Model
from nyc_taxi.core.naming import identity
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.lineage.write.report import StepReport

CHECKS_DECLARED_IN = "shared/nyc_taxi/core/datasets.py"


def assertion_urn(dataset, check: str, settings: Settings | None = None) -> str:
    """One URN per (dataset, check), whatever its rule becomes: its history survives a rebuild (as DataHub's
    Great Expectations action and dbt source key theirs, by a GUID of what names the check)."""
    from datahub.emitter.mce_builder import datahub_guid, make_assertion_urn

    urn = identity(dataset, settings or get_settings()).datahub_urn
    return make_assertion_urn(datahub_guid({"platform": "nyc-taxi", "dataset": urn, "check": check}))


def _assertion_info(dataset, result, settings: Settings):
    """The check as DataHub's assertion: CUSTOM, from an EXTERNAL source, on its dataset (and columns)."""
    from datahub.metadata import schema_classes as dhs

    from nyc_taxi.core.quality import declared_rule

    declared = next((c for c in dataset.checks if c.name == result.check), None)
    urn = identity(dataset, settings).datahub_urn
    fields = [field_urn(dataset, c, settings) for c in result.columns]
    return dhs.AssertionInfoClass(
        type=dhs.AssertionTypeClass.CUSTOM,
        description=f"{result.check}: {declared.doc}" if declared else result.check,
        source=dhs.AssertionSourceClass(type=dhs.AssertionSourceTypeClass.EXTERNAL),
        customAssertion=dhs.CustomAssertionInfoClass(
            type="nyc-taxi check",
            entity=urn,
            field=fields[0] if fields else None,
            fields=fields or None,
            scope=dhs.DatasetAssertionScopeClass.DATASET_COLUMN
            if fields
            else dhs.DatasetAssertionScopeClass.DATASET_ROWS,
            nativeType=result.kind,
            logic=declared_rule(declared) if declared else result.rule,
            nativeParameters={"severity": result.severity, "tolerance": str(result.tolerance)},
        ),
        customProperties={"check": result.check, "severity": result.severity, "declared_in": CHECKS_DECLARED_IN},
    )


def _assertion_result(result):
    from datahub.metadata import schema_classes as dhs

    native = {
        "status": result.status,
        "severity": result.severity,
        "failing": str(result.failing),
        "rows": str(result.rows),
        "rule": result.rule,  # as evaluated, the batch's values filled in (which month's files, say)
    }
    if result.expected is not None:
        native["expected"] = str(result.expected)
    if result.examples:
        import json

        native["examples"] = json.dumps(list(result.examples), default=str)
    # As DataHub's dbt source maps a test: a warning is a SUCCESS (its failing rows kept in the counts and
    # the native results), only what stops the run a FAILURE, so a Quality tab is red when a version was refused
    return dhs.AssertionResultClass(
        type=dhs.AssertionResultTypeClass.FAILURE if result.stops else dhs.AssertionResultTypeClass.SUCCESS,
        severity=dhs.AssertionResultSeverityClass.HIGH if result.stops else None,
        rowCount=result.rows,
        unexpectedCount=result.failing,
        actualAggValue=float(result.rows if result.kind == "row_count" else result.failing),
        nativeResults=native,
    )


def _field_profile(field):
    from datahub.metadata import schema_classes as dhs

    return dhs.DatasetFieldProfileClass(
        fieldPath=field.name,
        nullCount=field.nulls,
        nullProportion=field.null_share,
        uniqueCount=field.distinct,
        min=field.min,
        max=field.max,
    )


def quality_records(report: StepReport, tool: str, run_id: str, settings: Settings, at_ms: int) -> list:
    """What a run adds to its datasets' Quality and Stats: each check it evaluated (an ``assertionInfo`` and
    the tool as its platform) with its result (an ``assertionRunEvent``: this run's id, the dataset, the
    version checked), and the ``datasetProfile`` of every snapshot it wrote (keyed by the snapshot id)."""
    from datahub.emitter.mce_builder import make_data_platform_urn
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.metadata import schema_classes as dhs

    records = []
    for use in [*report.inputs, *report.outputs]:
        if isinstance(use.dataset, Model):  # an assertion asserts on a dataset: the model's are its metrics
            continue
        dataset_urn = identity(use.dataset, settings).datahub_urn
        for result in (r for r in use.checks if r.here):
            urn = assertion_urn(use.dataset, result.check, settings)
            records += [
                MetadataChangeProposalWrapper(entityUrn=urn, aspect=_assertion_info(use.dataset, result, settings)),
                MetadataChangeProposalWrapper(
                    entityUrn=urn, aspect=dhs.DataPlatformInstanceClass(platform=make_data_platform_urn(tool))
                ),
                MetadataChangeProposalWrapper(
                    entityUrn=urn,
                    aspect=dhs.AssertionRunEventClass(
                        timestampMillis=at_ms,
                        runId=run_id,
                        asserteeUrn=dataset_urn,
                        assertionUrn=urn,
                        status=dhs.AssertionRunStatusClass.COMPLETE,
                        result=_assertion_result(result),
                        batchSpec=dhs.BatchSpecClass(
                            nativeBatchId=result.version or "not committed",
                            customProperties={"dataset": use.dataset.name, "version": result.version or ""},
                        ),
                        runtimeContext={"tool": tool, "run": run_id},
                    ),
                ),
            ]
    for use in report.outputs:
        if use.profile is not None:
            profile = use.profile
            records.append(
                MetadataChangeProposalWrapper(
                    entityUrn=identity(use.dataset, settings).datahub_urn,
                    aspect=dhs.DatasetProfileClass(
                        timestampMillis=profile.at_ms,
                        messageId=f"{profile.dataset}@{profile.version}",
                        partitionSpec=dhs.PartitionSpecClass(
                            partition="FULL_TABLE_SNAPSHOT", type=dhs.PartitionTypeClass.FULL_TABLE
                        ),
                        rowCount=profile.rows,
                        columnCount=profile.columns,
                        sizeInBytes=profile.size_bytes,
                        fieldProfiles=[_field_profile(f) for f in profile.fields],
                    ),
                )
            )
    return records


def field_urn(dataset, column: str, settings: Settings) -> str:
    """A column of a dataset, as DataHub names it (its schema field)."""
    from datahub.emitter.mce_builder import make_schema_field_urn

    return make_schema_field_urn(identity(dataset, settings).datahub_urn, column)
