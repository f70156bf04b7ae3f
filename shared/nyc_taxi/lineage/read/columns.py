"""Column lineage, read from DataHub Lite: every DataJob's fine-grained lineage (field to field), as
both tools recorded it, followed upstream from one column back to the published file's columns.

    bash run lineage yellow_rides_hourly_forecast.predicted_ride_count
"""

from __future__ import annotations

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


def _field_lineage(lite) -> dict[str, list[tuple[str, str, str]]]:
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


def upstream_of(qualified: str, settings: Settings | None = None) -> ColumnStep:
    """``<dataset>.<column>`` and where it comes from, recursively."""
    from datahub.emitter.mce_builder import make_schema_field_urn
    from datahub.metadata.urns import DataJobUrn, SchemaFieldUrn

    from nyc_taxi.lineage.read.store import LineageStore

    settings = settings or get_settings()
    name, _, column = qualified.rpartition(".")
    dataset = get(name)
    declared = {c.name.lower(): c.name for c in dataset.columns}
    if column.lower() not in declared:
        raise KeyError(f"{name} has no column {column!r}; its columns: {', '.join(c.name for c in dataset.columns)}")
    store = LineageStore(settings)
    store.load()
    with store.open() as lite:
        lineage = _field_lineage(lite)

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


def render(root: ColumnStep) -> str:
    lines = [f"{root.dataset}.{root.column}"]

    def branch(node: ColumnStep, prefix: str) -> None:
        for i, up in enumerate(node.upstream):
            last = i == len(node.upstream) - 1
            lines.append(
                f"{prefix}{'└── ' if last else '├── '}{up.dataset}.{up.column}"
                f"  ({(up.transformation or 'IDENTITY').lower()}, by {up.via})"
            )
            branch(up, prefix + ("    " if last else "│   "))

    branch(root, "")
    if len(lines) == 1:
        lines.append("└── (no column lineage recorded)")
    return "\n".join(lines)
