"""What a step read and wrote, named by the caller: datasets, their versions, row counts and columns.

A dataset carries both identities a lineage graph needs, so that the same table is one node whoever
writes or reads it: OpenLineage's (``namespace``, ``name``, as OpenLineage's naming spec gives them,
e.g. ``postgres://db:5432`` and ``shop.public.orders``) and DataHub's (a platform and a name, from the
namespace's scheme unless given). The naming rules stay with the caller: a project declares its
datasets once and hands them to its steps.

A step says what it read and wrote with ``record(read=..., wrote=..., model=...)``, or by assigning to
an artifact a value whose ``lineage`` attribute is a ``StepLineage`` (a data function's result).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# OpenLineage's scheme of an object store -> DataHub's platform (DataHub names an object by bucket and path)
OBJECT_STORES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gcs"}


@dataclass(frozen=True)
class Dataset:
    namespace: str
    name: str
    platform: str | None = (
        None  # DataHub's platform; by default from the namespace's scheme ("postgres", "s3", "gcs", "file")
    )
    datahub_name: str | None = None  # DataHub's name, when it differs from OpenLineage's (and from bucket/path)
    version: str | None = None  # the version read or written (a snapshot id, a file's checksum)
    rows: int | None = None  # the rows read or written
    fields: tuple[tuple[str, str], ...] = ()  # the schema: (column, type)
    # output column -> the input columns it is made from: ((input dataset, column), ...)
    column_lineage: tuple[tuple[str, tuple[tuple[Dataset, str], ...]], ...] = ()

    def at(
        self,
        *,
        version: str | None = None,
        rows: int | None = None,
        fields: Mapping[str, str] | None = None,
        columns_from: Mapping[str, Iterable[tuple[Dataset, str]]] | None = None,
    ) -> Dataset:
        """This dataset as one run used it: a version, a row count, its columns and where they come from."""
        changes: dict = {}
        if version is not None:
            changes["version"] = str(version)
        if rows is not None:
            changes["rows"] = int(rows)
        if fields is not None:
            changes["fields"] = tuple(fields.items())
        if columns_from is not None:
            changes["column_lineage"] = tuple(
                (column, tuple((source.identity(), name) for source, name in sources))
                for column, sources in columns_from.items()
            )
        return dataclasses.replace(self, **changes)

    def identity(self) -> Dataset:
        """The dataset itself, whichever version of it."""
        return Dataset(self.namespace, self.name, self.platform, self.datahub_name)

    @property
    def scheme(self) -> str:
        return self.namespace.split("://")[0].split(":")[0]

    @property
    def datahub_platform(self) -> str:
        return self.platform or OBJECT_STORES.get(self.scheme, self.scheme)

    @property
    def datahub_dataset_name(self) -> str:
        """DataHub's name: an object store's starts with its bucket (OpenLineage's is the path in it)."""
        if self.datahub_name:
            return self.datahub_name
        if self.scheme in OBJECT_STORES:
            bucket = self.namespace.split("://", 1)[1].strip("/")
            return f"{bucket}/{self.name.lstrip('/')}"
        return self.name


@dataclass(frozen=True)
class Model:
    """A model a step trained: in DataHub an ML model per version (``name@version``), in the ML model
    group ``name``."""

    name: str
    version: str
    platform: str = "metaflow"
    properties: tuple[tuple[str, str], ...] = ()


@dataclass
class StepLineage:
    """What one step read and wrote."""

    inputs: list[Dataset] = field(default_factory=list)
    outputs: list[Dataset] = field(default_factory=list)
    models: list[Model] = field(default_factory=list)
    # the step that recorded it: an artifact is read again by later steps, and is theirs to pass on, not to record
    recorded_by: str | None = None

    def __add__(self, other: StepLineage) -> StepLineage:
        return StepLineage(
            [*self.inputs, *other.inputs], [*self.outputs, *other.outputs], [*self.models, *other.models]
        )


_recorded: list[StepLineage] = []  # this task's records (each Metaflow task is a process of its own)


def record(read: Iterable[Dataset] = (), wrote: Iterable[Dataset] = (), model: Model | None = None) -> None:
    """Say, during a step, what it read and wrote (and the model it trained)."""
    _recorded.append(StepLineage(list(read), list(wrote), [model] if model else []))


def collect(flow, pathspec: str) -> StepLineage:
    """Everything this step recorded: with ``record`` and in the ``lineage`` of artifacts it set; then
    forgets it."""
    total = StepLineage()
    for value in list(vars(flow).values()):
        found = getattr(value, "lineage", None)
        if isinstance(found, StepLineage) and found.recorded_by in (None, pathspec):
            found.recorded_by = pathspec
            total = total + found
    for recorded in _recorded:
        total = total + recorded
    _recorded.clear()
    return total


def forget() -> None:
    _recorded.clear()
