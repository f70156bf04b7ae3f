"""Column lineage, read from DataHub Lite: every DataJob's fine-grained lineage (field to field), as
both tools recorded it, followed upstream from one column back to the published file's columns.

    bash run lineage yellow_rides_hourly_forecast.predicted_ride_count
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nyc_taxi.core.naming import identity
from nyc_taxi.core.registry import by_urn, get
from nyc_taxi.core.settings import Settings, get_settings


@dataclass
class ColumnStep:
    dataset: str
    column: str
    via: str | None = None  # the job that computed it from the upstream columns
    transformation: str | None = None
    upstream: list[ColumnStep] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "dataset": self.dataset,
            "column": self.column,
            "job": self.via,
            "transformation": self.transformation,
            "upstream": [u.as_dict() for u in self.upstream],
        }

    def origins(self) -> set[tuple[str, str]]:
        """The columns this one comes from in the end: the ones with nothing further upstream."""
        if not self.upstream:
            return {(self.dataset, self.column)}
        return set().union(*(u.origins() for u in self.upstream))


def field_lineage_in(lite) -> dict[str, list[tuple[str, str, str]]]:
    """downstream field URN -> [(upstream field URN, DataJob URN, transformation)], from Lite's DataJobs."""
    from datahub.metadata.urns import Urn

    found: dict[str, list[tuple[str, str, str]]] = {}
    for urn in lite.list_ids():
        if Urn.from_string(urn).entity_type != "dataJob":
            continue
        io = (lite.get(urn, aspects=["dataJobInputOutput"]) or {}).get("dataJobInputOutput", {})
        for lineage in io.get("fineGrainedLineages") or []:
            for downstream in lineage.get("downstreams") or []:
                for upstream in lineage.get("upstreams") or []:
                    entry = (upstream, urn, lineage.get("transformOperation") or "")
                    if entry not in found.setdefault(downstream, []):
                        found[downstream].append(entry)
    return found


def field_lineage(settings: Settings | None = None) -> dict[str, list[tuple[str, str, str]]]:
    """Every field-to-field edge in DataHub Lite (after loading new records): read once, ask many times."""
    from nyc_taxi.lineage.read.store import LineageStore

    store = LineageStore(settings or get_settings())
    store.load()
    with store.open() as lite:
        return field_lineage_in(lite)


def upstream_of(
    qualified: str, settings: Settings | None = None, lineage: dict[str, list[tuple[str, str, str]]] | None = None
) -> ColumnStep:
    """``<dataset>.<column>`` and where it comes from, recursively (``lineage``: from ``field_lineage``)."""
    from datahub.emitter.mce_builder import make_schema_field_urn
    from datahub.metadata.urns import DataJobUrn, SchemaFieldUrn

    settings = settings or get_settings()
    name, _, column = qualified.rpartition(".")
    dataset = get(name)
    declared = {c.name.lower(): c.name for c in dataset.columns}
    if column.lower() not in declared:
        raise KeyError(f"{name} has no column {column!r}; its columns: {', '.join(c.name for c in dataset.columns)}")
    lineage = field_lineage(settings) if lineage is None else lineage

    def step(field_urn: str, via: str | None, kind: str | None, seen: frozenset) -> ColumnStep:
        parsed = SchemaFieldUrn.from_string(field_urn)
        known = by_urn(str(parsed.parent), settings)
        node = ColumnStep(known.name if known else str(parsed.parent), parsed.field_path, via, kind)
        for upstream, job, transformation in lineage.get(field_urn, []):
            if upstream not in seen:
                job_urn = DataJobUrn.from_string(job)
                node.upstream.append(
                    step(
                        upstream,
                        f"{job_urn.get_data_flow_urn().flow_id}.{job_urn.job_id}",
                        transformation,
                        seen | {upstream},
                    )
                )
        return node

    start = make_schema_field_urn(identity(dataset, settings).datahub_urn, declared[column.lower()])
    return step(start, None, None, frozenset({start}))


def _shape(node: ColumnStep) -> tuple:
    """What a column's lineage looks like without the column names: datasets, jobs, transformations."""
    return (node.dataset, node.via, node.transformation, tuple(sorted(_shape(u) for u in node.upstream)))


def _alike(nodes: list[ColumnStep]) -> list[list[ColumnStep]]:
    """Sibling columns whose lineage has the same shape, together (day1 … day31 of a NOAA file)."""
    groups: dict[tuple, list[ColumnStep]] = {}
    for node in nodes:
        groups.setdefault(_shape(node), []).append(node)
    return [groups[shape] for shape in sorted(groups)]


def _columns(nodes: list[ColumnStep]) -> str:
    """``name`` for one column; ``{day1…day31, month}`` for several, numbered runs folded."""
    names = sorted(
        {n.column for n in nodes},
        key=lambda c: (re.sub(r"\d+$", "", c), int(re.sub(r"^\D*", "", c) or 0) if re.search(r"\d+$", c) else 0, c),
    )
    if len(names) == 1:
        return names[0]
    parts, run = [], []
    for name in [*names, ""]:
        match = re.fullmatch(r"(\D+)(\d+)", name)
        if run and match and match[1] == run[-1][0] and int(match[2]) == run[-1][1] + 1:
            run.append((match[1], int(match[2])))
            continue
        if run:
            parts.append(
                f"{run[0][0]}{run[0][1]}…{run[-1][0]}{run[-1][1]}"
                if len(run) > 2
                else ", ".join(f"{p}{n}" for p, n in run)
            )
            run = []
        if match:
            run = [(match[1], int(match[2]))]
        elif name:
            parts.append(name)
    return "{" + ", ".join(parts) + "}"


def render(root: ColumnStep) -> str:
    """The column's upstream as a tree; columns whose lineage has the same shape share a line."""
    lines = [f"{root.dataset}.{root.column}"]

    def branch(group: list[ColumnStep], prefix: str) -> None:
        # the members have the same shape: their upstreams line up group by group
        upstream_groups = [_alike(member.upstream) for member in group]
        for i in range(len(upstream_groups[0])):
            members = [m for groups in upstream_groups for m in groups[i]]
            first, last = members[0], i == len(upstream_groups[0]) - 1
            lines.append(
                f"{prefix}{'└── ' if last else '├── '}{first.dataset}.{_columns(members)}"
                f"  ({(first.transformation or 'IDENTITY').lower()}, by {first.via})"
            )
            branch(members, prefix + ("    " if last else "│   "))

    branch([root], "")
    if len(lines) == 1:
        lines.append("└── (no column lineage recorded)")
    return "\n".join(lines)
