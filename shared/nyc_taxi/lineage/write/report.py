"""What one run of a step read and wrote: the neutral contract between the data work and lineage.

A data function (an ingestion step, a forecasting step) returns a ``StepReport``, or a result that
carries one as ``.report``. The orchestrator's adapter turns it into OpenLineage events and DataHub
records (``openlineage.py``, ``datahub.py`` beside this file). Nothing here imports a lineage SDK.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from nyc_taxi.core.datasets import Dataset
from nyc_taxi.core.profiles import Profile
from nyc_taxi.core.quality import CheckResult
from nyc_taxi.core.upserts import RowChanges

# OpenLineage's column-lineage transformation subtypes we use (type DIRECT unless ``indirect``).
Transformation = Literal["IDENTITY", "TRANSFORMATION", "AGGREGATION", "FILTER", "GROUP_BY", "CONDITIONAL", "JOIN"]


@dataclass(frozen=True)
class ColumnSource:
    """One input column an output column is computed from, and how."""

    dataset: Dataset
    column: str
    transformation: Transformation = "IDENTITY"
    indirect: bool = False  # it selects or groups the rows (a filter, a key), it is not the value
    description: str = ""


ColumnLineage = dict[str, tuple[ColumnSource, ...]]  # output column -> what it is computed from


@dataclass(frozen=True)
class Range:
    """The rows of a table a run read (or wrote): ``start <= column < end``, values as ISO text. What a later
    commit must touch to change what the run read (staleness), and what reproducing the run reads again."""

    column: str
    start: str
    end: str

    @classmethod
    def of(cls, column: str, start, end) -> Range:
        return cls(column, start.isoformat(), end.isoformat())


@dataclass
class DatasetUse:
    """A dataset as one run saw it: the version it read or wrote and what was measured."""

    dataset: Dataset
    version: str | None = None  # Iceberg snapshot id, file version (name@etag/sha256), model version
    row_count: int | None = None
    size_bytes: int | None = None
    locations: tuple[str, ...] = ()  # the files of the dataset this run read or wrote (file datasets)
    checks: list[CheckResult] = field(default_factory=list)  # its declared checks' results on this version
    profile: Profile | None = None  # outputs: the profile of the snapshot written
    operation: str = "UPDATE"  # outputs: INSERT | UPDATE | CREATE (DataHub's operation types)
    committed: bool | None = None  # outputs: did this run commit a new version (False: nothing changed)
    columns: ColumnLineage = field(default_factory=dict)  # outputs: column lineage
    # outputs: what the commit did to the table's rows, and which version of the source batch its rows
    # now hold and which they replaced (a republished file)
    changes: RowChanges | None = None
    source_version: str | None = None
    replaced_version: str | None = None
    range: Range | None = None  # the rows read (inputs) or written (outputs), when not the whole table

    @property
    def name(self) -> str:
        return self.dataset.name


@dataclass
class StepReport:
    inputs: list[DatasetUse] = field(default_factory=list)
    outputs: list[DatasetUse] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    recorded_by: str | None = None  # the run whose lineage already holds this report
    # a model's figures this run measured, as a person reads them (model name -> lines): its backtest scores
    model_metrics: dict[str, list[str]] = field(default_factory=dict)

    def __add__(self, other: StepReport) -> StepReport:
        return StepReport(
            self.inputs + other.inputs,
            self.outputs + other.outputs,
            {**self.summary, **other.summary},
            model_metrics={**self.model_metrics, **other.model_metrics},
        )


def describe_error(error: BaseException | str) -> str:
    """``<type>: <message>``: how lineage states an error (one already described stays as it is)."""
    return error if isinstance(error, str) else f"{type(error).__name__}: {error}"


def report_of(value: Any) -> StepReport | None:
    """The report a data function's result carries: itself, or its ``report`` attribute."""
    if isinstance(value, StepReport):
        return value
    report = getattr(value, "report", None)
    return report if isinstance(report, StepReport) else None


# ---- as plain data (JSON), for a report handed to another process -------------------------------


def report_to_dict(report: StepReport) -> dict:
    """The report as plain data; datasets by their registry name."""

    def use(u: DatasetUse) -> dict:
        return {
            "dataset": u.dataset.name,
            "version": u.version,
            "row_count": u.row_count,
            "size_bytes": u.size_bytes,
            "locations": list(u.locations),
            "checks": [c.as_dict() for c in u.checks],
            "profile": u.profile.as_dict() if u.profile else None,
            "operation": u.operation,
            "committed": u.committed,
            "columns": {
                column: [[s.dataset.name, s.column, s.transformation, s.indirect, s.description] for s in sources]
                for column, sources in u.columns.items()
            },
            "changes": [u.changes.added, u.changes.changed, u.changes.removed] if u.changes else None,
            "source_version": u.source_version,
            "replaced_version": u.replaced_version,
            "range": [u.range.column, u.range.start, u.range.end] if u.range else None,
        }

    return {
        "inputs": [use(u) for u in report.inputs],
        "outputs": [use(u) for u in report.outputs],
        "summary": report.summary,
        "recorded_by": report.recorded_by,
        "model_metrics": report.model_metrics,
    }


def report_from_dict(data: dict) -> StepReport:
    """The report ``report_to_dict`` made, with the registry's datasets."""
    from nyc_taxi.core.registry import get

    def use(u: dict) -> DatasetUse:
        return DatasetUse(
            get(u["dataset"]),
            version=u["version"],
            row_count=u["row_count"],
            size_bytes=u["size_bytes"],
            locations=tuple(u["locations"]),
            checks=[CheckResult.from_dict(c) for c in u["checks"]],
            profile=Profile.from_dict(u["profile"]) if u.get("profile") else None,
            operation=u["operation"],
            committed=u["committed"],
            columns={
                column: tuple(ColumnSource(get(s[0]), *s[1:]) for s in sources)
                for column, sources in u["columns"].items()
            },
            changes=RowChanges(*u["changes"]) if u.get("changes") else None,
            source_version=u.get("source_version"),
            replaced_version=u.get("replaced_version"),
            range=Range(*u["range"]) if u.get("range") else None,
        )

    return StepReport(
        [use(u) for u in data["inputs"]],
        [use(u) for u in data["outputs"]],
        data["summary"],
        data["recorded_by"],
        data.get("model_metrics") or {},
    )
