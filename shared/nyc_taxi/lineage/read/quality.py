"""Data quality read back from DataHub Lite, version by version: every check of a dataset with each of its
results (the run, the version it checked, the rows that failed), and the profile of every snapshot.

Both tools write them as DataHub writes its own (``lineage/write/datahub.py``: an ``assertionInfo`` per
check, an ``assertionRunEvent`` per evaluation, a ``datasetProfile`` per snapshot), and DataHub Lite
keeps every version of every aspect: version 0 is the latest, versions 1…N the history. Lite's public
``get`` answers only the latest (or the latest before a time), so the history is read from Lite's own
table, ``metadata_aspect_v2`` (the one place this project reads Lite's storage; guarded by
``tests/test_quality.py``).

``bash run lineage --quality DATASET`` prints it; the site's Quality and Stats sections and ``--trace``
read the same.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from nyc_taxi.core import registry
from nyc_taxi.core.datasets import DATASETS, Check
from nyc_taxi.core.quality import declared_rule
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.lineage.read.graph import when
from nyc_taxi.lineage.write.datahub import MODEL_CHECK

# a model's checks are among its training metrics (an assertion asserts on a dataset): each version of its
# properties carries the results of the run that trained it
ASPECTS = ("assertionInfo", "assertionRunEvent", "datasetProfile", "mlModelProperties", "dataProcessInstanceProperties")
SYMBOLS = {"pass": "✓", "warn": "!", "fail": "✗"}


@dataclass
class Evaluation:
    """One result of one check: on which version, in which run, what failed."""

    dataset: str
    check: str
    severity: str
    status: str  # pass | warn | fail
    failing: int
    rows: int
    version: str | None  # None: the rows it checked were not committed (refused)
    run_id: str
    tool: str
    at_ms: int
    expected: int | None = None
    examples: list[dict] = field(default_factory=list)
    rule: str = ""  # as evaluated: the batch's values filled in (a raw table's check names its month's files)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def counts(self) -> str:
        if self.expected is not None:
            return f"{self.rows:,} rows, {self.expected:,} expected"
        return f"{self.failing:,} of {self.rows:,} rows fail" if self.failing else f"0 of {self.rows:,} fail"


@dataclass
class CheckHistory:
    dataset: str
    check: str
    severity: str
    doc: str
    rule: str
    declared: bool  # still declared in the registry (a check that was removed keeps its history)
    evaluations: list[Evaluation] = field(default_factory=list)  # newest first

    @property
    def last(self) -> Evaluation | None:
        return self.evaluations[0] if self.evaluations else None


@dataclass
class ProfilePoint:
    """A snapshot's profile: rows, columns, size, and per column nulls, min, max, distinct values."""

    dataset: str
    version: str
    at_ms: int
    rows: int | None
    columns: int | None
    size_bytes: int | None
    fields: dict[str, dict] = field(default_factory=dict)


@dataclass
class DatasetQuality:
    dataset: str
    checks: list[CheckHistory] = field(default_factory=list)  # in the order the registry declares them
    profiles: list[ProfilePoint] = field(default_factory=list)  # oldest first

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Quality:
    """Every dataset's checks and profiles, and every checked version's results."""

    datasets: dict[str, DatasetQuality]

    def of(self, dataset: str) -> DatasetQuality:
        return self.datasets.get(dataset) or DatasetQuality(dataset)

    def of_version(self, dataset: str, version: str | None) -> list[Evaluation]:
        """The results of the checks evaluated on ``version`` of ``dataset``, the latest of each check."""
        latest: dict[str, Evaluation] = {}
        for history in self.of(dataset).checks:
            for evaluation in history.evaluations:  # newest first
                if evaluation.version == version and history.check not in latest:
                    latest[history.check] = evaluation
        return list(latest.values())


def _rows(settings: Settings) -> list[tuple[str, str, dict]]:
    """Every version of the quality aspects in DataHub Lite, loaded first from the record files."""
    from nyc_taxi.lineage.read.store import LineageStore

    store = LineageStore(settings)
    store.load()
    if not store.database.exists():
        return []
    placeholders = ", ".join("?" for _ in ASPECTS)
    with sqlite3.connect(f"file:{store.database}?mode=ro", uri=True) as connection:
        rows = connection.execute(
            "SELECT urn, aspect_name, metadata FROM metadata_aspect_v2 "
            f"WHERE version > 0 AND aspect_name IN ({placeholders})",
            ASPECTS,
        ).fetchall()
    return [(urn, aspect, json.loads(metadata)) for urn, aspect, metadata in rows]


def _declared(dataset: str, check: str) -> Check | None:
    found = DATASETS.get(dataset)
    return next((c for c in getattr(found, "checks", ()) if c.name == check), None)


def read(settings: Settings | None = None) -> Quality:
    """Every check, result and profile DataHub Lite holds, by dataset (registry names)."""
    settings = settings or get_settings()
    infos: dict[str, dict] = {}
    events: dict[str, list[dict]] = defaultdict(list)
    profiles: dict[str, list[dict]] = defaultdict(list)
    # a model's check results (check, result): among its training metrics, and those of a model its checks
    # refused among the properties of the run that refused it (lineage/write/datahub.py)
    models: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    for urn, aspect, value in _rows(settings):
        if aspect == "assertionInfo":
            infos[urn] = value
        elif aspect == "assertionRunEvent":
            events[urn].append(value)
        elif aspect == "mlModelProperties":
            for metric in value.get("trainingMetrics") or []:
                if metric["name"].startswith(MODEL_CHECK):
                    models[urn].append((metric["name"][len(MODEL_CHECK) :], json.loads(metric["value"])))
        elif aspect == "dataProcessInstanceProperties":
            for key, result in (value.get("customProperties") or {}).items():
                if key.startswith(MODEL_CHECK):
                    model, _, check = key[len(MODEL_CHECK) :].rpartition(":")
                    models[model].append((check, json.loads(result)))
        else:
            profiles[urn].append(value)
    datasets: dict[str, DatasetQuality] = {}

    def dataset_of(urn: str) -> str:
        known = registry.by_urn(urn, settings)
        return known.name if known else urn

    for urn, info in infos.items():
        custom = info.get("customAssertion") or {}
        name = dataset_of(custom.get("entity", ""))
        check = (info.get("customProperties") or {}).get("check", urn)
        declared = _declared(name, check)
        history = CheckHistory(
            dataset=name,
            check=check,
            severity=(info.get("customProperties") or {}).get("severity", ""),
            doc=declared.doc if declared else info.get("description", ""),
            rule=custom.get("logic", ""),
            declared=declared is not None,
        )
        seen = set()
        for event in sorted(events.get(urn, []), key=lambda e: e["timestampMillis"], reverse=True):
            key = (event["timestampMillis"], event["runId"])
            if key in seen:  # the same evaluation loaded twice (a record file loaded again whole)
                continue
            seen.add(key)
            native = (event.get("result") or {}).get("nativeResults") or {}
            batch = event.get("batchSpec") or {}
            history.evaluations.append(
                Evaluation(
                    dataset=name,
                    check=check,
                    severity=native.get("severity", history.severity),
                    status=native.get("status", "pass" if event["result"]["type"] == "SUCCESS" else "fail"),
                    failing=int(native.get("failing", event["result"].get("unexpectedCount") or 0)),
                    rows=int(native.get("rows", event["result"].get("rowCount") or 0)),
                    version=(batch.get("customProperties") or {}).get("version") or None,
                    run_id=event["runId"],
                    tool=(event.get("runtimeContext") or {}).get("tool", ""),
                    at_ms=event["timestampMillis"],
                    expected=int(native["expected"]) if "expected" in native else None,
                    examples=json.loads(native["examples"]) if "examples" in native else [],
                    rule=native.get("rule", ""),
                )
            )
        datasets.setdefault(name, DatasetQuality(name)).checks.append(history)
    for urn, results in models.items():
        name = dataset_of(urn)
        histories: dict[str, CheckHistory] = {}
        seen = set()
        for check, result in results:
            if (check, result["run"], result["version"]) in seen:  # the same evaluation loaded twice
                continue
            seen.add((check, result["run"], result["version"]))
            declared = _declared(name, check)
            history = histories.setdefault(
                check,
                CheckHistory(
                    dataset=name,
                    check=check,
                    severity=result["severity"],
                    doc=declared.doc if declared else result.get("summary", ""),
                    rule=declared_rule(declared) if declared else "",
                    declared=declared is not None,
                ),
            )
            history.evaluations.append(
                Evaluation(
                    dataset=name,
                    check=check,
                    severity=result["severity"],
                    status=result["status"],
                    failing=result["failing"],
                    rows=result["rows"],
                    version=result["version"],
                    run_id=result["run"],
                    tool=result["tool"],
                    at_ms=result.get("at_ms") or 0,
                    expected=result.get("expected"),
                )
            )
        for history in histories.values():
            history.evaluations.sort(key=lambda e: e.at_ms, reverse=True)
        datasets.setdefault(name, DatasetQuality(name)).checks.extend(histories.values())
    for urn, values in profiles.items():
        name = dataset_of(urn)
        points = {}
        for value in values:
            version = (value.get("messageId") or "").rpartition("@")[2] or str(value["timestampMillis"])
            points[version] = ProfilePoint(
                dataset=name,
                version=version,
                at_ms=value["timestampMillis"],
                rows=value.get("rowCount"),
                columns=value.get("columnCount"),
                size_bytes=value.get("sizeInBytes"),
                fields={
                    f["fieldPath"]: {k: v for k, v in f.items() if k != "fieldPath"}
                    for f in value.get("fieldProfiles", [])
                },
            )
        datasets.setdefault(name, DatasetQuality(name)).profiles = sorted(points.values(), key=lambda p: p.at_ms)
    for name, found in datasets.items():
        order = [c.name for c in getattr(DATASETS.get(name), "checks", ())]
        found.checks.sort(key=lambda h: (order.index(h.check) if h.check in order else len(order), h.check))
    return Quality(datasets)


# ---- as text ----------------------------------------------------------------------------------------------


def verdict(evaluations: list[Evaluation]) -> str:
    """``✓ 4 passed, ! 6 warned`` (``✗ 1 failed`` first when one did)."""
    counted = {status: sum(e.status == status for e in evaluations) for status in ("fail", "warn", "pass")}
    words = {"fail": "failed", "warn": "warned", "pass": "passed"}
    return ", ".join(f"{SYMBOLS[s]} {n} {words[s]}" for s, n in counted.items() if n) or "no checks recorded"


def render(found: DatasetQuality, history: int = 10) -> str:
    dataset = found.dataset
    lines = []
    declared = getattr(DATASETS.get(dataset), "checks", ())
    if not found.checks and not found.profiles:
        lines.append(f"{dataset}: no check results or profiles recorded yet")
        if declared:
            lines.append(f"  declared checks: {', '.join(c.name for c in declared)} (core/datasets.py)")
        return "\n".join(lines)
    versions = {e.version for h in found.checks for e in h.evaluations}
    lines.append(
        f"{dataset}: {len(found.checks)} checks, {len(versions)} versions checked, {len(found.profiles)} profiles "
        "(from DataHub Lite: assertions, their run events, dataset profiles)"
    )
    lines.append("checks and their last result (declared in shared/nyc_taxi/core/datasets.py):")
    for check in found.checks:
        last = check.last
        result = (
            f"{SYMBOLS[last.status]} {last.status:4s} {last.counts()}  @ {last.version or 'not committed'}"
            if last
            else "not evaluated yet"
        )
        lines.append(f"  {check.check:30s} {check.severity:5s}  {result}")
        if last and last.status == "fail":
            lines.append(f"      rule: {check.rule}")
    lines.append(f"history, newest first (the last {history} evaluations):")
    evaluations = sorted(
        (e for c in found.checks for e in c.evaluations), key=lambda e: (e.at_ms, e.check), reverse=True
    )
    by_run: dict[tuple, list[Evaluation]] = {}
    for evaluation in evaluations:
        by_run.setdefault((evaluation.at_ms, evaluation.run_id, evaluation.version), []).append(evaluation)
    for (at_ms, run_id, version), results in list(by_run.items())[:history]:
        failed = [e.check for e in results if e.status == "fail"]
        lines.append(
            f"  {when(at_ms)}  version {version or 'not committed'}  run {run_id}  {verdict(results)}"
            + (f"  (failed: {', '.join(failed)})" if failed else "")
        )
    if found.profiles:
        lines.append("profile over versions (from Iceberg's manifests):")
        lines.append(f"  {'version':20s} {'at':23s} {'rows':>12s} {'columns':>8s} {'bytes':>12s}  nulls")
        for point in found.profiles:
            nulls = ", ".join(f"{name} {v['nullCount']:,}" for name, v in point.fields.items() if v.get("nullCount"))
            lines.append(
                f"  {point.version:20s} {when(point.at_ms):23s} {point.rows or 0:>12,} {point.columns or 0:>8} "
                f"{point.size_bytes or 0:>12,}  {nulls or 'none'}"
            )
    return "\n".join(lines)
