"""A dataset's page (``templates/pages/dataset.html``): its identity, where it sits in the graph, its columns
and their lineage, its versions, the checks judged on each and its profiles; and where a dataset, job, DAG or
flow sits in the graph, which the job pages show too."""

from __future__ import annotations

from markupsafe import Markup

from nyc_taxi.core import datasets as d
from nyc_taxi.core.datasets import PublishedFiles, Table
from nyc_taxi.core.quality import declared_rule
from nyc_taxi.lineage.read.graph import Node
from nyc_taxi.lineage.read.quality import SYMBOLS
from nyc_taxi.lineage.read.runs import JobRun
from nyc_taxi.lineage.read.site.collect import DatasetFacts
from nyc_taxi.lineage.read.site.markup import dataset_path, version_anchor
from nyc_taxi.lineage.read.site.parts import Page, origins
from nyc_taxi.lineage.read.site.plot import forecast_chart, versions_chart


class DatasetPage:
    """The dataset page of ``Pages`` (its facts, graph and pictures)."""

    def dataset_page(self, facts: DatasetFacts) -> Page:
        node, declared = facts.node, facts.declared
        shown = {
            "node": node,
            "declared": declared,
            "stale": self._stale(self.data.stale.of_dataset(node.name)),
            "identity": facts.identity,
            "iceberg_identifier": facts.iceberg_identifier,
            "primary_key": declared.primary_key if isinstance(declared, Table) else None,
            "publisher": declared.publisher if isinstance(declared, PublishedFiles) else None,
            "around": self.around(node.name),
            "current_trace": self.data.current_traces.get(node.name),
            "forecast": self._forecast(facts),
            "scores_backtests": node.name == d.YELLOW_RIDES_FORECAST_SCORES.name,
            "columns": self._columns(facts),
            "column_lineage": [
                {"name": column, "origins": origins(step), "picture": self.svgs.get(f"column:{node.name}.{column}", "")}
                for column, step in facts.columns.items()
            ],
            "versions": list(reversed(facts.versions)),
            "version_ids": [version_anchor(v.version) for v in reversed(facts.versions)],
            "quality": self._quality(facts),
            "profile": self._profile(facts),
        }
        return Page(dataset_path(node.name), node.name, "dataset", "pages/dataset.html", shown)

    def around(self, name: str) -> dict | None:
        """The mini-map and the immediate parents and children, each with how it is linked; for a DAG
        or flow, what its jobs read and write (None: no lineage recorded)."""
        node = self.node_by_name.get(name)
        if node is None and f"mini:{name}" not in self.svgs:
            return None
        directions = [
            (direction, self._neighbours(node, direction) if node else self._pipeline_neighbours(name, direction))
            for direction in ("upstream", "downstream")
        ]
        return {
            "name": name,
            "in_graph": node is not None,
            "minimap": self.svgs.get("mini:" + name, ""),
            "directions": directions,
        }

    def _neighbours(self, node: Node, direction: str) -> list[tuple[str, Node]]:
        return [(kind.verb(direction), self.graph.nodes[u]) for u, kind in self.graph.neighbours(node.urn, direction)]

    def _pipeline_neighbours(self, pipeline: str, direction: str) -> list[tuple[str, Node]]:
        """What a DAG's or flow's jobs read from outside it (upstream), and what they write (downstream)."""
        inside = {u for u, n in self.graph.nodes.items() if n.kind == "job" and n.pipeline == pipeline}
        made_inside = {e.target for e in self.graph.edges if e.source in inside}
        found = {}
        for urn in sorted(inside, key=lambda u: self.graph.nodes[u].name):
            for other, kind in self.graph.neighbours(urn, direction):
                if other not in inside and not (direction == "upstream" and other in made_inside):
                    found.setdefault(other, (kind.verb(direction), self.graph.nodes[other]))
        return list(found.values())

    def _forecast(self, facts: DatasetFacts) -> dict | None:
        forecast = self.data.forecast
        if not forecast or forecast.dataset != facts.node.name:
            return None
        # drawn by ``plot``, which escapes its texts
        return {"chart": Markup(forecast_chart(forecast)), "card": self._card_of_current_version(facts)}

    def _card_of_current_version(self, facts: DatasetFacts) -> JobRun | None:
        """The card of a step run in the same flow run as the writer of the current version."""
        current = next((v for v in reversed(facts.versions) if v.current), None)
        writer = current.writer if current else None
        if writer is None or writer.parent is None:
            return None
        siblings = [r for r in self.data.runs if r.parent == writer.parent and r.run_id in self.data.cards]
        return siblings[-1] if siblings else None

    @staticmethod
    def _columns(facts: DatasetFacts) -> list[dict]:
        """The registry's columns, then those only DataHub's schema has, each with where it comes from."""
        declared = getattr(facts.declared, "columns", ()) or ()
        names = [c.name for c in declared] + [n for n in facts.schema if n not in {c.name for c in declared}]
        by_name = {c.name: c for c in declared}
        rows = []
        for name in names:
            column, field = by_name.get(name), facts.schema.get(name, {})
            rows.append(
                {
                    "name": name,
                    "key": bool(field.get("isPartOfKey")),
                    "registry_type": column.type if column else None,
                    "schema_type": field.get("nativeDataType", "") if field else None,
                    "meaning": column.doc if column else field.get("description", ""),
                    "origins": origins(facts.columns[name]) if name in facts.columns else None,
                }
            )
        return rows

    def _quality(self, facts: DatasetFacts) -> dict | None:
        """Every check declared on the dataset with its last result and its history, newest first (what
        DataHub's Quality tab shows: its assertions and their run events, from DataHub Lite); then the
        checks no longer declared that have a history."""
        found = facts.quality
        declared_checks = getattr(facts.declared, "checks", ())
        if not (declared_checks or (found and found.checks)):
            return None
        histories = {h.check: h for h in (found.checks if found else [])}
        declared = [c.name for c in declared_checks]
        checks, shown_histories = [], []
        for name in [*declared, *(n for n in histories if n not in declared)]:
            history = histories.get(name)
            check = next((c for c in declared_checks if c.name == name), None)
            evaluations = history.evaluations if history else []
            checks.append(
                {
                    "name": name,
                    "severity": check.severity if check else history.severity,
                    "doc": check.doc if check else history.doc,
                    "declared": check is not None,
                    "last": history.last if history else None,
                    "marks": list(reversed(evaluations[:20])),
                }
            )
            if evaluations:
                rows = [{"evaluation": e, "run": self.data.runs.by_id.get(e.run_id)} for e in evaluations]
                rule = declared_rule(check) if check else history.rule
                shown_histories.append({"check": history.check, "rule": rule, "rows": rows})
        return {"checks": checks, "histories": shown_histories, "symbols": SYMBOLS}

    @staticmethod
    def _profile(facts: DatasetFacts) -> dict | None:
        """The profile of every snapshot written (Iceberg's manifests, as DataHub's Stats tab shows a
        profile): rows and nulls over versions as small charts, the latest profile per column."""
        points = facts.quality.profiles if facts.quality else []
        if not points:
            return None
        versions = [p.version for p in points]
        rows_chart = versions_chart(
            f"{facts.node.name}: rows per version", versions, {"rows": [p.rows for p in points]}, "rows"
        )
        nullable = sorted(
            {name for p in points for name, f in p.fields.items() if f.get("nullCount")},
            key=lambda name: -max(p.fields.get(name, {}).get("nullCount") or 0 for p in points),
        )[:5]
        nulls_chart = (
            versions_chart(
                f"{facts.node.name}: nulls per version",
                versions,
                {name: [p.fields.get(name, {}).get("nullCount") for p in points] for name in nullable},
                "nulls",
            )
            if nullable
            else None
        )
        return {
            # drawn by ``plot``, which escapes its texts
            "rows_chart": Markup(rows_chart),
            "nulls_chart": Markup(nulls_chart) if nulls_chart else None,
            "latest": points[-1],
            "points": points,
        }
