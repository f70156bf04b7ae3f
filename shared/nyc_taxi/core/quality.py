"""Data-quality checks: the declarations (``core/datasets.py``) compiled to SQL aggregates, the counts
judged against each check's severity, and the error that stops a run before what failed is published.

A step checks what it writes in the pass that already runs where it can: the stage's write measures its
rows with Spark's ``observe``; the flow's steps count the rows they are about to commit in one
aggregation. Every result names the version it was computed on (an Iceberg snapshot id, a landed file's
SHA-256, a model's pathspec), so its history reads version by version.

A result's status: ``pass`` (no row failed), ``warn`` (rows failed a warn check, or no more of them
than an error check tolerates) or ``fail`` (an error check's failing rows exceed its tolerance: the run
stops).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from nyc_taxi.core.datasets import Check


@dataclass(frozen=True)
class CheckResult:
    """One check evaluated on one version of a dataset."""

    dataset: str
    check: str
    kind: str
    severity: str  # as declared: warn | error
    status: str  # pass | warn | fail
    failing: int  # rows that fail (row_count: rows missing or extra)
    rows: int  # rows evaluated
    version: str | None  # what was checked: a snapshot id, landed files' versions, a model version
    rule: str  # as evaluated (placeholders filled)
    columns: tuple[str, ...] = ()
    expected: int | None = None  # row_count: the rows expected
    tolerance: float = 0.0
    examples: tuple[dict, ...] = ()  # a few failing rows, when the check stopped the run
    here: bool = True  # evaluated by the run that reports it (False: recorded by the run that wrote the version)

    @property
    def passed(self) -> bool:
        return self.failing == 0

    @property
    def stops(self) -> bool:
        return self.status == "fail"

    def summary(self) -> str:
        """``pickup_in_month (error): 200,000 of 200,000 rows fail, more than the 1 % allowed``"""
        if self.kind == "row_count":
            found = f"{self.rows:,} rows where {self.expected:,} are expected" if self.expected is not None else ""
            text = f"{self.check} ({self.severity}): {found}"
        else:
            share = f" ({self.failing / self.rows:.1%})" if self.rows else ""
            text = f"{self.check} ({self.severity}): {self.failing:,} of {self.rows:,} rows fail{share}"
        if self.stops and self.tolerance:
            text += f", more than the {self.tolerance:.0%} allowed"
        return text

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> CheckResult:
        return cls(
            **{
                **data,
                "columns": tuple(data.get("columns", ())),
                "examples": tuple(data.get("examples", ())),
            }
        )


# ---- compiling ----------------------------------------------------------------------------------------


def fill(text: str, values: dict[str, object] | None) -> str:
    """``text`` with its ``${name}`` placeholders filled; a missing value fails loudly, naming it.
    ``values`` None: the rule as declared, its placeholders left as they are."""
    if values is None:
        return text
    try:
        return string.Template(text).substitute({k: str(v) for k, v in values.items()})
    except KeyError as missing:
        raise KeyError(f"the check rule {text!r} needs a value for {missing.args[0]}") from None


def declared_rule(check: Check) -> str:
    """The check's rule as SQL, as declared (its ``${…}`` placeholders are each batch's own values)."""
    return rule_text(check, None)


def row_condition(check: Check, values: dict[str, object] | None) -> str | None:
    """The SQL condition every good row satisfies (None: the check is about the rows together)."""
    if check.kind == "expect":
        return fill(check.rule, values)
    if check.kind == "not_null":
        return f"{check.columns[0]} IS NOT NULL"
    if check.kind == "accepted":
        return f"{check.columns[0]} IN ({fill(check.rule, values)})"
    return None


def rule_text(check: Check, values: dict[str, object] | None) -> str:
    """What the check asserts, as SQL (what OpenLineage's ``content`` carries, and people read)."""
    if (condition := row_condition(check, values)) is not None:
        return condition
    where = f" WHERE {fill(check.where, values)}" if check.where else ""
    if check.kind == "unique":
        return f"count(*) = count(DISTINCT {', '.join(check.columns)}){where}"
    return f"count(*) = {fill(check.rule, values)}{where}"


def batch_of(rule: str) -> str:
    """The batch a count's rule as evaluated judged (rule_text's form): its filled WHERE, e.g. a raw table's
    month files; "" for a rule over the whole version."""
    return rule.rpartition(" WHERE ")[2] if rule.startswith("count(*) = ") and " WHERE " in rule else ""


def failing_condition(check: Check, values: dict[str, object]) -> str | None:
    """The SQL condition a failing row meets: its condition is FALSE (NULL passes, as in a CHECK constraint)."""
    condition = row_condition(check, values)
    return f"NOT ({condition})" if condition is not None else None


def compile_check(check: Check, values: dict[str, object]) -> dict[str, str]:
    """The check as aggregate SQL expressions: its failing rows (``<name>``), the rows it evaluated
    (``<name>:rows``) and, for a row count, the rows expected (``<name>:expected``)."""
    where = fill(check.where, values) if check.where else "TRUE"
    if check.kind == "unique":
        key = ", ".join(check.columns)
        return {
            check.name: f"count_if({where}) - count(DISTINCT CASE WHEN {where} THEN struct({key}) END)",
            f"{check.name}:rows": f"count_if({where})",
        }
    if check.kind == "row_count":
        expected = f"coalesce({fill(check.rule, values)}, 0)"
        return {
            check.name: f"abs(count_if({where}) - {expected})",
            f"{check.name}:rows": f"count_if({where})",
            f"{check.name}:expected": expected,
        }
    return {check.name: f"count_if({failing_condition(check, values)})", f"{check.name}:rows": "count(*)"}


def observable(check: Check) -> bool:
    """Whether Spark can count the check while a write passes over the rows (``observe`` takes no
    DISTINCT aggregate)."""
    return check.kind != "unique" and "DISTINCT" not in check.rule.upper()


def aggregates(checks: Iterable[Check], values: dict[str, object]) -> dict[str, str]:
    return {name: sql for check in checks for name, sql in compile_check(check, values).items()}


# ---- judging --------------------------------------------------------------------------------------------


def status_of(check: Check, failing: int, rows: int) -> str:
    if failing == 0:
        return "pass"
    if check.severity == "warn":
        return "warn"
    tolerated = check.kind != "row_count" and rows > 0 and failing / rows <= check.tolerance
    return "warn" if tolerated else "fail"


def judge(
    dataset: str, checks: Iterable[Check], counts: dict, version: str | None, values: dict[str, object]
) -> list[CheckResult]:
    """The results of ``checks`` from the counts their aggregates measured on ``version``."""
    results = []
    for check in checks:
        failing, rows = int(counts[check.name] or 0), int(counts[f"{check.name}:rows"] or 0)
        expected = counts.get(f"{check.name}:expected")
        results.append(
            CheckResult(
                dataset=dataset,
                check=check.name,
                kind=check.kind,
                severity=check.severity,
                status=status_of(check, failing, rows),
                failing=failing,
                rows=rows,
                version=version,
                rule=rule_text(check, values),
                columns=check.columns,
                expected=int(expected) if expected is not None else None,
                tolerance=check.tolerance,
            )
        )
    return results


def stopping(results: Iterable[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.stops]


def with_examples(results: list[CheckResult], examples: dict[str, list[dict]]) -> list[CheckResult]:
    """The results, those named in ``examples`` with their example rows."""
    from dataclasses import replace

    return [replace(r, examples=tuple(examples[r.check])) if r.check in examples else r for r in results]


def refuse(
    results: list[CheckResult],
    *,
    subject: str,
    consequence: str,
    keep: str,
    examples: Callable[[Check], list[dict]],
    checks: Iterable[Check],
    report: Callable[[list[CheckResult]], object],
) -> None:
    """Raise ChecksFailed when an error check of ``results`` failed: one message naming each such check,
    its failing rows of all and a few of them (``examples(check)``), and ``report(results)``, the lineage of
    the refusal. Nothing when every error check passed."""
    failed = {r.check for r in stopping(results)}
    if not failed:
        return
    shown = with_examples(results, {c.name: examples(c) for c in checks if c.name in failed})
    raise ChecksFailed(refusal(subject, shown, consequence, keep), shown, report(shown))


class ChecksFailed(Exception):
    """An error check failed: the run stops before what it checked is published. ``report``: what the run
    read and checked (the lineage of the refusal); a bad input, like a file that is not what the source
    publishes: a retry would fail the same way."""

    def __init__(self, message: str, results: list[CheckResult], report=None):
        super().__init__(message)
        self.results, self.report = results, report


def refusal(subject: str, results: list[CheckResult], consequence: str, keep: str) -> str:
    """The one message a refused version gets: what failed, how many rows of how many, a few rows, what
    was not changed and what to do."""
    lines = [f"{subject} fails its checks, so {consequence}:"]
    for result in stopping(results):
        lines.append(f"  {result.summary()}")
        lines.append(f"    rule: {result.rule}")
        for example in result.examples:
            lines.append("    e.g. " + ", ".join(f"{k}={_shown(v)}" for k, v in example.items()))
    lines.append(keep)
    return "\n".join(lines)


def _shown(value) -> str:
    import datetime as dt

    text = value.isoformat(sep=" ") if isinstance(value, dt.datetime) else str(value)  # a date: 2024-03-01
    return text if len(text) <= 60 else text[:57] + "…"


# ---- counting ---------------------------------------------------------------------------------------------


def count_frame(frame, measures: dict[str, str]) -> dict:
    """``measures`` (name: aggregate SQL) over a Spark DataFrame, in one aggregation."""
    from pyspark.sql.functions import expr

    row = frame.agg(*(expr(sql).alias(name) for name, sql in measures.items())).first()
    return row.asDict()


def failing_examples(frame, check: Check, values: dict[str, object], shown: tuple[str, ...], limit: int = 3) -> list:
    """A few rows of a Spark DataFrame that fail ``check``: ``shown`` columns and the check's own."""
    condition = failing_condition(check, values)
    if condition is None:
        return []
    columns = list(dict.fromkeys([*shown, *check.columns]))
    return [row.asDict() for row in frame.where(condition).select(*columns).limit(limit).collect()]


CONSTANT = re.compile(r"[\d\s.+\-*/()]+")  # a rule that is a number: the same for every row and every file


def from_the_manifests(check: Check, values: dict[str, object]) -> bool:
    """Whether Iceberg's manifests may settle ``check`` without reading a row: a column's nulls (each data
    file's null count), or a row count whose rule is a number (the files' record counts; with a condition,
    only on columns whose bounds the files name). Whether they do is the files' to say: a file without the
    column's metrics, or one whose bounds are not one value, leaves the check to the rows."""
    if check.kind == "not_null":
        return not check.where
    if check.kind == "row_count":
        return bool(CONSTANT.fullmatch(fill(check.rule, values))) and (not check.where or bool(check.columns))
    return False


def counted_in_the_pass(check: Check, values: dict[str, object]) -> bool:
    """Whether a write counts the check while it passes over the rows: what Spark can observe, unless the
    written snapshot's manifests are to settle it (``from_the_manifests``, without a condition, whose bounds
    only the files could settle). A file without the column's metrics then costs one more pass, not a wrong
    count (``count_snapshot``)."""
    return observable(check) and not (from_the_manifests(check, values) and not check.where)


def count_snapshot(iceberg, snapshot_id: int, rows, checks: Iterable[Check], values: dict[str, object]) -> dict:
    """``checks`` on a table's snapshot: from Iceberg's manifests where they settle it, no data read (a
    column's nulls: each data file's null count; a row count whose rule is a number: the files' record
    counts, and when it has a condition, only if every file holds one value of the columns it names, their
    exact lower and upper bounds equal; never when the snapshot has delete files); every other check from
    ``rows`` (the snapshot's rows, a Spark DataFrame, or a function giving them when a check needs them):
    those without a condition in one query, each with one in a query of its own, limited to the rows it
    names (the scan is pruned)."""
    checks = list(checks)
    counts: dict = {}
    snapshot = iceberg.snapshot_by_id(snapshot_id)
    # a summary that does not say how many delete files it has may have some: the rows are counted then
    deletes = snapshot.summary.get("total-delete-files") if snapshot and snapshot.summary else None
    manifests = [c for c in checks if from_the_manifests(c, values)]
    files = _data_files(iceberg, snapshot_id) if deletes == "0" and manifests else None
    unsettled = []
    for check in checks:
        found = None
        if files is not None and check in manifests:
            found = (_row_count_from_manifests if check.kind == "row_count" else _nulls_from_manifests)(
                files, check, values
            )
        if found is None:
            unsettled.append(check)
        else:
            counts |= found
    if unsettled:
        frame = rows() if callable(rows) else rows
        whole = [c for c in unsettled if not c.where]
        if whole:
            counts |= count_frame(frame, aggregates(whole, values))
        for check in unsettled:
            if check.where:
                counts |= count_frame(frame.where(fill(check.where, values)), compile_check(check, values))
    return counts


def _data_files(iceberg, snapshot_id: int) -> list[dict]:
    return iceberg.inspect.data_files(snapshot_id).select(["record_count", "readable_metrics"]).to_pylist()


def _nulls_from_manifests(files: list[dict], check: Check, values: dict[str, object]) -> dict | None:
    """A column's nulls from the data files' null counts (Iceberg's writers keep one per column unless its
    metrics mode is none); None when a file has none."""
    nulls = [(file["readable_metrics"].get(check.columns[0]) or {}).get("null_value_count") for file in files]
    if any(n is None for n in nulls):
        return None
    return {check.name: sum(nulls), f"{check.name}:rows": sum(file["record_count"] for file in files)}


def _row_count_from_manifests(files: list[dict], check: Check, values: dict[str, object]) -> dict | None:
    """A row count from the data files' record counts and exact bounds (DuckDB evaluates the declared
    condition, if any, on each file's one value of its columns); None when a file's bounds do not settle it."""
    import duckdb
    import pyarrow as pa

    values_of: dict[str, list] = {column: [] for column in check.columns if check.where}
    for file in files:
        for column in values_of:
            bounds = file["readable_metrics"].get(column) or {}
            low, high = bounds.get("lower_bound"), bounds.get("upper_bound")
            if low is None or low != high:
                return None
            values_of[column].append(low)
    per_file = pa.table({**values_of, "_records": pa.array([f["record_count"] for f in files], pa.int64())})
    where = fill(check.where, values) if check.where else "TRUE"
    connection = duckdb.connect()
    try:
        connection.register("files", per_file)
        rows, expected = connection.execute(
            f"SELECT coalesce(sum(_records) FILTER (WHERE {where}), 0), ({fill(check.rule, values)}) FROM files"
        ).fetchone()
    except duckdb.Error:  # a condition in Spark's SQL that DuckDB does not read: Spark counts it
        return None
    finally:
        connection.close()
    rows, expected = int(rows), int(expected or 0)
    return {check.name: abs(rows - expected), f"{check.name}:rows": rows, f"{check.name}:expected": expected}


def failing_arrow_examples(table, check: Check, values: dict[str, object], limit: int = 3) -> list[dict]:
    """A few rows of an Arrow table that fail ``check`` (DuckDB's SQL)."""
    import duckdb

    condition = failing_condition(check, values)
    if condition is None:
        return []
    connection = duckdb.connect()
    try:
        connection.register("rows", table)
        return connection.sql(f"SELECT * FROM rows WHERE {condition} LIMIT {limit}").to_arrow_table().to_pylist()
    finally:
        connection.close()


def count_arrow(table, measures: dict[str, str], name: str = "rows") -> dict:
    """``measures`` over an Arrow table (a model fitted in Python), with DuckDB's SQL: no JVM."""
    import duckdb

    connection = duckdb.connect()
    try:
        connection.register(name, table)
        select = ", ".join(f'{sql} AS "{measure}"' for measure, sql in measures.items())
        row = connection.execute(f"SELECT {select} FROM {name}").fetchone()
        return dict(zip(measures, row, strict=True))
    finally:
        connection.close()
