"""A dataset's page: its identity, where it sits in the graph, its columns and their lineage, its versions,
the checks judged on each and its profiles."""

from __future__ import annotations

from nyc_taxi.core import datasets as d
from nyc_taxi.core.datasets import PublishedFiles, Table
from nyc_taxi.core.quality import declared_rule
from nyc_taxi.lineage.read.graph import Node
from nyc_taxi.lineage.read.quality import SYMBOLS
from nyc_taxi.lineage.read.runs import JobRun
from nyc_taxi.lineage.read.site.collect import DatasetFacts
from nyc_taxi.lineage.read.site.markup import (
    badge,
    card_path,
    check_anchor,
    code,
    column_anchor,
    dataset_path,
    esc,
    link,
    millis,
    moment,
    pairs,
    section,
    short,
    table,
    version_anchor,
)
from nyc_taxi.lineage.read.site.parts import (
    Page,
    job_and_run,
    node_path,
    origins,
    run_link,
    tool_badge,
    trace_version,
    version_ref,
)
from nyc_taxi.lineage.read.site.plot import forecast_chart, versions_chart


class DatasetPage:
    """The dataset page of ``Pages`` (its facts, graph and pictures)."""

    def dataset_page(self, facts: DatasetFacts) -> Page:
        node, root = facts.node, "../"
        declared = facts.declared
        head = f"<h1>{esc(node.name)} {tool_badge(node)}</h1>"
        if declared is None:
            head += '<p class="warning">Not in the registry: a name only the records know.</p>'
        else:
            head += f'<p class="lead">{esc(declared.description)}</p>'
        parts = [head, self._stale_section(self.data.stale.of_dataset(node.name), root)]
        parts += [self._identity(facts), self._last_write(node)]
        parts.append(section("Upstream and downstream", self._around(node.name, root), "around"))
        if node.name in self.data.current_traces:
            current = self.data.current_traces[node.name]
            trace = trace_version(current, root, verb="")
            verdict = f'<p class="verdict">Its checks: {esc(current["checks_verdict"])}</p>'
            parts.append(
                section("Where the current version comes from", f'{verdict}<div class="trace">{trace}</div>', "trace")
            )
        if self.data.forecast and self.data.forecast.dataset == node.name:
            parts.append(section("Forecast vs actual", self._forecast(facts, root), "forecast"))
        if node.name == d.YELLOW_RIDES_FORECAST_SCORES.name:
            parts.append(
                section(
                    "Backtests",
                    f"<p>The models compared on these scores, origin by origin: {link(root + 'backtests.html', 'Backtests')}</p>",
                    "backtests",
                )
            )
        parts.append(section("Columns", self._columns(facts, root), "columns"))
        if facts.columns:
            parts.append(section("Column lineage", self._column_lineage(facts), "column-lineage"))
        parts.append(section("Versions", self._dataset_versions(facts, root), "versions"))
        if getattr(declared, "checks", ()) or (facts.quality and facts.quality.checks):
            parts.append(section("Quality", self._quality(facts, root), "quality"))
        if facts.quality and facts.quality.profiles:
            parts.append(section("Stats", self._stats(facts), "stats"))
        return Page(dataset_path(node.name), node.name, "".join(parts), "dataset")

    def _identity(self, facts: DatasetFacts) -> str:
        found = facts.identity
        rows = [("DataHub URN", code(facts.node.urn))]
        if found:
            rows += [
                ("OpenLineage namespace", code(found.ol_namespace)),
                ("OpenLineage name", code(found.ol_name)),
                *((f"OpenLineage symlink ({s.type})", code(f"{s.namespace} {s.name}")) for s in found.ol_symlinks),
                ("Airflow Asset URI", code(found.asset_uri) if found.asset_uri else ""),
                ("Iceberg identifier", code(facts.iceberg_identifier) if facts.iceberg_identifier else ""),
                ("location", code(found.location) if found.location else ""),
            ]
        if isinstance(facts.declared, Table) and facts.declared.primary_key:
            rows.append(("primary key", code(", ".join(facts.declared.primary_key))))
        if isinstance(facts.declared, PublishedFiles):
            rows.append(("publisher", esc(facts.declared.publisher)))
        return section("Identity in every system", pairs(rows), "identity")

    def _last_write(self, node: Node) -> str:
        fresh = node.freshness
        if not fresh:
            return ""
        text = f"{millis(fresh.at)} by {code(fresh.actor or '?')}"
        if fresh.snapshot_id:
            text += f", snapshot {link('#' + version_anchor(fresh.snapshot_id), fresh.snapshot_id)}"
        if fresh.rows is not None:
            text += f", {fresh.rows:,} rows"
        return f'<p class="fresh">Last write: {text}</p>'

    def _around(self, name: str, root: str) -> str:
        """The mini-map and the immediate parents and children, each with how it is linked; for a DAG
        or flow, what its jobs read and write."""
        node = self.node_by_name.get(name)
        if node is None and f"mini:{name}" not in self.svgs:
            return '<p class="empty">no lineage recorded yet</p>'
        lists = []
        for direction in ("upstream", "downstream"):
            found = self._neighbours(node, direction) if node else self._pipeline_neighbours(name, direction)
            items = [
                f"<li>{esc(verb)} {link(root + node_path(other), other.name)} {tool_badge(other)}</li>"
                for verb, other in found
            ]
            lists.append(
                f'<div class="{direction}"><h3>{direction}</h3><ul>{"".join(items) or "<li>nothing</li>"}</ul></div>'
            )
        whole = link(f"{root}index.html#node={name}", "show it in the whole graph") if node else ""
        return (
            f'<div class="minimap">{self.svgs.get("mini:" + name, "")}</div>'
            f'<div class="around">{"".join(lists)}</div><p>{whole}</p>'
        )

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

    def _forecast(self, facts: DatasetFacts, root: str) -> str:
        forecast = self.data.forecast
        card = self._card_of_current_version(facts)
        note = (
            f"<p>The Metaflow evaluation card of the flow run that wrote this version (MAE, WAPE, the busiest zones): "
            f"{link(root + card_path(card.run_id), 'open the card')} · {run_link(card, root)}</p>"
            if card
            else "<p>No evaluation card found for the run that wrote this version.</p>"
        )
        return forecast_chart(forecast) + note

    def _card_of_current_version(self, facts: DatasetFacts) -> JobRun | None:
        """The card of a step run in the same flow run as the writer of the current version."""
        current = next((v for v in reversed(facts.versions) if v.current), None)
        writer = current.writer if current else None
        if writer is None or writer.parent is None:
            return None
        siblings = [r for r in self.data.runs if r.parent == writer.parent and r.run_id in self.data.cards]
        return siblings[-1] if siblings else None

    def _columns(self, facts: DatasetFacts, root: str) -> str:
        declared = getattr(facts.declared, "columns", ()) or ()
        names = [c.name for c in declared] + [n for n in facts.schema if n not in {c.name for c in declared}]
        by_name = {c.name: c for c in declared}
        rows = []
        for name in names:
            column, field = by_name.get(name), facts.schema.get(name, {})
            lineage = ""
            if name in facts.columns:
                lineage = link(f"#{column_anchor(name)}", "from " + origins(facts.columns[name]), cls="column-link")
            rows.append(
                [
                    f"<b>{esc(name)}</b>" + (" " + badge("key", "key") if field.get("isPartOfKey") else ""),
                    code(column.type) if column else "",
                    code(field.get("nativeDataType", "")) if field else '<span class="empty">–</span>',
                    esc(column.doc if column else field.get("description", "")),
                    lineage,
                ]
            )
        return table(["column", "type (registry)", "type (DataHub schema)", "meaning", "column lineage"], rows)

    def _column_lineage(self, facts: DatasetFacts) -> str:
        blocks = []
        for column, step in facts.columns.items():
            blocks.append(
                f'<details id="{column_anchor(column)}" class="column"><summary><b>{esc(column)}</b> ← '
                f"{esc(origins(step))}</summary>"
                f'<div class="graph small">{self.svgs.get(f"column:{facts.node.name}.{column}", "")}</div></details>'
            )
        return (
            "<p>Where each column comes from, back to the published files' columns; alike columns of one dataset "
            "share a box (day1…day31). Edges are coloured by the tool of the job that computed them.</p>"
            + "".join(blocks)
        )

    def _dataset_versions(self, facts: DatasetFacts, root: str) -> str:
        rows, ids = [], []
        for version in reversed(facts.versions):
            writer = version.writer
            records = ", ".join(f"{k} {int(v):,}" for k, v in version.records.items())
            rows.append(
                [
                    short(version.version, 40) + (" " + badge("current", "current") if version.current else ""),
                    moment(version.at),
                    esc(version.operation),
                    esc(records),
                    job_and_run(writer, root) if writer else '<span class="empty">published: no run of ours</span>',
                    "<br>".join(code(location) for location in version.locations),
                ]
            )
            ids.append(version_anchor(version.version))
        return table(["version", "at", "operation", "records", "written by", "files"], rows, "versions", ids)

    def _quality(self, facts: DatasetFacts, root: str) -> str:
        """Every check declared on the dataset with its last result and its history, newest first (what
        DataHub's Quality tab shows: its assertions and their run events, from DataHub Lite)."""
        found = facts.quality
        histories = {h.check: h for h in (found.checks if found else [])}
        declared = [c.name for c in getattr(facts.declared, "checks", ())]
        rows, blocks = [], []
        for name in [*declared, *(n for n in histories if n not in declared)]:
            history = histories.get(name)
            check = next((c for c in getattr(facts.declared, "checks", ()) if c.name == name), None)
            last = history.last if history else None
            marks = "".join(
                f'<span class="mark q-{e.status}" title="{esc(e.status)} on {esc(e.version or "rows not committed")}">'
                f"{esc(SYMBOLS[e.status])}</span>"
                for e in reversed((history.evaluations if history else [])[:20])
            )
            rows.append(
                [
                    f'<a href="#{esc(check_anchor(name))}"><b>{esc(name)}</b></a>',
                    badge(
                        check.severity if check else history.severity,
                        "severity-" + (check.severity if check else history.severity),
                    ),
                    esc(check.doc if check else history.doc) + ("" if check else " <i>(no longer declared)</i>"),
                    (badge(last.status, "q-" + last.status) + " " + esc(last.counts()))
                    if last
                    else '<span class="empty">not evaluated yet</span>',
                    version_ref(facts.node.name, last.version, root) if last else "",
                    f'<span class="marks">{marks}</span>',
                ]
            )
            if history and history.evaluations:
                blocks.append(self._check_history(facts, history, check, root))
        intro = (
            "<p>The checks declared with this dataset (<code>shared/nyc_taxi/core/datasets.py</code>), each "
            "evaluated on every version written, by the step that writes it. An <b>error</b> check that fails "
            "stops its run before the version is published; a <b>warn</b> check records the rows and the run "
            "goes on. The marks are the last results, oldest left.</p>"
        )
        return (
            intro
            + table(["check", "severity", "what it asserts", "last result", "on version", "history"], rows, "checks")
            + "".join(blocks)
        )

    def _check_history(self, facts: DatasetFacts, history, check, root: str) -> str:
        rows = []
        for evaluation in history.evaluations:
            run = self.data.runs.by_id.get(evaluation.run_id)
            rows.append(
                [
                    millis(evaluation.at_ms),
                    version_ref(facts.node.name, evaluation.version, root),
                    job_and_run(run, root) if run else code(evaluation.run_id),
                    badge(evaluation.status, "q-" + evaluation.status),
                    esc(evaluation.counts()),
                    "<br>".join(
                        esc(", ".join(f"{k}={v}" for k, v in example.items())) for example in evaluation.examples
                    ),
                ]
            )
        rule = code(declared_rule(check) if check else history.rule)
        return (
            f'<details id="{esc(check_anchor(history.check))}" class="check"><summary><b>{esc(history.check)}</b> '
            f"— {len(history.evaluations)} results {rule}</summary>"
            + table(["at", "version", "run", "result", "rows", "failing rows (examples)"], rows)
            + "</details>"
        )

    def _stats(self, facts: DatasetFacts) -> str:
        """The profile of every snapshot written (Iceberg's manifests, as DataHub's Stats tab shows a
        profile): rows and nulls over versions as small charts, the latest profile per column."""
        points = facts.quality.profiles
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
            else '<p class="empty">no column has a null in any version</p>'
        )
        latest = points[-1]
        columns = [
            [
                f"<b>{esc(name)}</b>",
                f"{f.get('nullCount'):,}" if f.get("nullCount") is not None else "",
                f"{f['nullProportion']:.2%}" if f.get("nullProportion") is not None else "",
                esc(f.get("min") or ""),
                esc(f.get("max") or ""),
                f"{f['uniqueCount']:,}" if f.get("uniqueCount") is not None else "",
            ]
            for name, f in latest.fields.items()
        ]
        history = [
            [
                short(p.version, 24),
                millis(p.at_ms),
                f"{p.rows:,}" if p.rows is not None else "",
                str(p.columns or ""),
                f"{p.size_bytes:,}" if p.size_bytes is not None else "",
            ]
            for p in reversed(points)
        ]
        return (
            "<p>The profile of every snapshot written, from Iceberg's manifests (rows, size, and per column its "
            "nulls, minimum and maximum; strings get no bounds: the manifests cut them to 16 characters); "
            "distinct values are counted for the columns of few values, in the pass that writes a load.</p>"
            f'<div class="charts">{rows_chart}{nulls_chart}</div>'
            f"<h3>Columns at version {short(latest.version)} ({millis(latest.at_ms)})</h3>"
            + table(["column", "nulls", "null share", "min", "max", "distinct"], columns, "profile")
            + "<h3>Versions profiled</h3>"
            + table(["version", "committed", "rows", "columns", "bytes"], history, "profiles")
        )
