"""Look datasets and jobs up: by the name a user types, by URN.

The declarations are in ``datasets`` and ``jobs``; the naming rules in ``naming``.
"""

from __future__ import annotations

from nyc_taxi.core.datasets import DATASETS, Dataset
from nyc_taxi.core.jobs import JOBS, PIPELINES, Job, Pipeline
from nyc_taxi.core.naming import identity
from nyc_taxi.core.settings import Settings


def get(name: str) -> Dataset:
    """A dataset by its registry name; unknown names fail loudly with the known ones."""
    try:
        return DATASETS[name]
    except KeyError:
        raise KeyError(f"unknown dataset {name!r}; the registry knows: {', '.join(sorted(DATASETS))}") from None


def by_urn(urn: str, settings: Settings | None = None) -> Dataset | None:
    """The dataset whose DataHub URN under the active profile is ``urn``."""
    return next((d for d in DATASETS.values() if identity(d, settings).datahub_urn == urn), None)


def job(qualified_name: str) -> Job:
    """A job by ``<dag>.<task>`` / ``<Flow>.<step>``."""
    try:
        return JOBS[qualified_name]
    except KeyError:
        raise KeyError(f"unknown job {qualified_name!r}; the registry knows: {', '.join(sorted(JOBS))}") from None


def pipeline(name: str) -> Pipeline:
    try:
        return PIPELINES[name]
    except KeyError:
        raise KeyError(f"unknown DAG or flow {name!r}; the registry knows: {', '.join(sorted(PIPELINES))}") from None
