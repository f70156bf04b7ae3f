"""Column lineage derived from the SQL files, with DataHub's SQL parser (``datahub.sql_parsing``),
given the registry's schemas: never retyped.

A step's SQL is a chain of statements: each SELECT makes a view the next statement reads (the
changed rows, the hourly counts), the last one writes the step's output. Every statement is parsed
with the schemas of what it reads, and the chain is followed back to the datasets the step read.
What the parser reports is checked against the registry: an upstream column the dataset does not
declare (Spark's ``_metadata`` file name and row position) is dropped, and names are matched
case-insensitively to the declared ones (Spark's identifiers are; the TLC's ``VendorID`` is read
as ``vendorid``).

Parsing costs seconds (the parser's import alone is most of it), while the SQL files and schemas
rarely change: results are kept in ``<state>/lineage/cache/``, keyed by everything they depend on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, field

from nyc_taxi.core.datasets import Dataset
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.core.sql import SqlFolder
from nyc_taxi.lineage.write.report import ColumnLineage, ColumnSource

log = logging.getLogger(__name__)
PLATFORM = "spark"  # the dialect the SQL files are written in
AGGREGATES = re.compile(r"\b(count|sum|avg|min|max|collect_list|collect_set)\s*\(", re.IGNORECASE)


@dataclass(frozen=True)
class Statement:
    """One SQL file of a chain: what its placeholders name (a source, a view an earlier statement made,
    or ``target``: the step's output), and the view it makes (a SELECT) or nothing (it writes the target)."""

    sql: SqlFolder
    name: str
    reads: dict[str, str] = field(default_factory=dict)  # placeholder -> view or source name
    makes: str | None = None
    values: dict[str, object] = field(default_factory=dict)  # other placeholders (literals)

    def text(self) -> str:
        return self.sql.render(self.name, **self.reads, **self.values)


def _urn(name: str) -> str:
    """How the parser names a view or source of the chain (not a dataset of the registry)."""
    from datahub.emitter.mce_builder import make_dataset_urn

    return make_dataset_urn(PLATFORM, name)


def _parse(statements: list[Statement], sources: dict[str, tuple[str, ...]]) -> dict[str, dict[str, list]]:
    """For each view and the target: column -> [(read view or source, column, transformation)]."""
    from datahub.metadata.urns import DatasetUrn
    from datahub.sql_parsing.schema_resolver import SchemaResolver
    from datahub.sql_parsing.sqlglot_lineage import sqlglot_lineage

    resolver = SchemaResolver(platform=PLATFORM, env="PROD")
    for name, columns in sources.items():
        resolver.add_raw_schema_info(_urn(name), {c.lower(): "string" for c in columns})
    parsed: dict[str, dict[str, list]] = {}
    for statement in statements:
        text = statement.text()
        writes = statement.makes or "target"
        if statement.makes:
            text = f"INSERT INTO {statement.makes} {text}"
        result = sqlglot_lineage(text, schema_resolver=resolver, default_db=None)
        if result.debug_info and result.debug_info.error:
            raise ValueError(f"{statement.name}.sql: DataHub's SQL parser failed: {result.debug_info.error}")
        columns = {}
        for column in result.column_lineage or []:
            logic = column.logic.column_logic if column.logic else ""
            kind = (
                "IDENTITY"
                if column.logic and column.logic.is_direct_copy
                else "AGGREGATION"
                if AGGREGATES.search(logic)
                else "TRANSFORMATION"
            )
            columns[column.downstream.column.lower()] = [
                (DatasetUrn.from_string(u.table).name, u.column.lower(), kind) for u in column.upstreams
            ]
        parsed[writes] = columns
        resolver.add_raw_schema_info(_urn(writes), {c: "string" for c in columns})
    return parsed


def _resolve(parsed: dict, view: str, column: str, seen: frozenset = frozenset()) -> list[tuple[str, str, str]]:
    """Follow a column through the views back to the sources; the strongest transformation wins."""
    found = []
    for source, upstream, kind in parsed.get(view, {}).get(column, []):
        if source in parsed and source != "target" and (source, upstream) not in seen:
            for origin, origin_column, origin_kind in _resolve(parsed, source, upstream, seen | {(source, upstream)}):
                strongest = (
                    "AGGREGATION"
                    if "AGGREGATION" in (kind, origin_kind)
                    else ("TRANSFORMATION" if "TRANSFORMATION" in (kind, origin_kind) else "IDENTITY")
                )
                found.append((origin, origin_column, strongest))
        elif source not in parsed or source == "target":
            found.append((source, upstream, kind))
    return found


def _cache_key(statements: list[Statement], sources: dict[str, Dataset], output: Dataset) -> str:
    import importlib.metadata

    parts = [
        importlib.metadata.version("acryl-datahub"),
        importlib.metadata.version("sqlglot"),
        output.name,
        *[f"{s.name}:{s.makes}:{s.text()}" for s in statements],
        *[f"{name}={d.name}:{','.join(c.name for c in d.columns)}" for name, d in sorted(sources.items())],
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def column_lineage(
    output: Dataset, statements: list[Statement], sources: dict[str, Dataset], settings: Settings | None = None
) -> ColumnLineage:
    """The column lineage of ``output`` written by ``statements`` reading ``sources`` (view name ->
    registry dataset), as the registry names the columns."""
    from nyc_taxi.lineage.write.outbox import replace_file

    settings = settings or get_settings()
    cache = settings.lineage_dir / "cache" / f"columns-{_cache_key(statements, sources, output)}.json"
    if cache.exists():
        derived = json.loads(cache.read_text())
    else:
        schemas = {name: tuple(c.name for c in d.columns) for name, d in sources.items()}
        parsed = _parse(statements, {**schemas, "target": tuple(c.name for c in output.columns)})
        derived = {column: _resolve(parsed, "target", column) for column in parsed.get("target", {})}
        cache.parent.mkdir(parents=True, exist_ok=True)
        replace_file(cache, json.dumps(derived, indent=1, sort_keys=True))
    declared_outputs = {c.name.lower(): c.name for c in output.columns}
    lineage: ColumnLineage = {}
    for column, upstreams in derived.items():
        kept = []
        for source, upstream, kind in upstreams:
            if source not in sources:  # the output itself (a MERGE's match condition): no upstream of a column
                continue
            dataset = sources[source]
            declared = {c.name.lower(): c.name for c in dataset.columns}
            if upstream in declared:  # not Spark's _metadata columns: they are no column of the dataset
                kept.append(ColumnSource(dataset, declared[upstream], kind))
        if kept and column in declared_outputs:
            lineage[declared_outputs[column]] = tuple(sorted(set(kept), key=lambda s: (s.dataset.name, s.column)))
    return lineage
