"""What the pages are made of on the Python side: a page (its template and the facts it shows), and the facts
several pages arrange alike: a column's origins, what is stale."""

from __future__ import annotations

from dataclasses import dataclass, field

from nyc_taxi.lineage.read.columns import ColumnStep
from nyc_taxi.lineage.read.runs import JobRun, Runs
from nyc_taxi.lineage.read.site.drawing import fold
from nyc_taxi.lineage.read.stale import StaleItem


@dataclass
class Page:
    path: str  # from the site's root
    title: str
    kind: str  # graph | evolution | catalog | stale | backtests | dataset | job | run
    template: str  # under templates/
    facts: dict = field(default_factory=dict)  # what the template shows

    @property
    def root(self) -> str:
        """The way back to the site's root from this page ("" or "../")."""
        return "../" * self.path.count("/")


def origins(step: ColumnStep) -> str:
    """Where a column comes from in the end, by dataset: ``noaa…published.{day1…day31, month}``."""
    by_dataset: dict[str, list[str]] = {}
    for dataset, column in sorted(step.origins()):
        by_dataset.setdefault(dataset, []).append(column)
    return ", ".join(
        f"{dataset}.{columns[0]}" if len(columns) == 1 else f"{dataset}.{{{fold(columns)}}}"
        for dataset, columns in by_dataset.items()
    )


@dataclass
class StaleEntry:
    """A stale item as a page names it: by its run's page when the run is recorded, else its dataset's."""

    item: StaleItem
    run: JobRun | None
    outputs: list[str]  # the datasets the run wrote, by name


def stale_entries(items, runs: Runs) -> list[StaleEntry]:
    return [StaleEntry(i, runs.by_id.get(i.run_id) if i.run_id else None, sorted(i.outputs)) for i in items]
