"""`bash run lineage --stale`: what the morning after a source changed needs, from the records both tools
wrote and the tables' own metadata: every output computed from a version that has since been superseded
in what it read, transitively, with the reason; and the smallest plan of re-runs that brings it up to date.

- A **landed month** is stale when its source now publishes another version than the one it landed from
  (``published_now``: a HEAD request to the source; unknown offline, then only what was recorded counts).
- A **raw month** is stale when raw does not hold the month's landed version (Iceberg's snapshot summary
  says which one it holds: ``core/snapshots.py``), or when the landed month is stale itself.
- A **flow run** (its actuals, model, forecasts and the score of its forecast) is stale when a table it read has commits after the
  snapshot it read that added or deleted data files in the range it read (the range is in its OpenLineage
  input facet; the files' bounds in Iceberg's manifests: no data is scanned), or when that range holds a
  raw month that is stale. A change outside the range read does not make a run stale.

The plan: the ingestion DAG runs of the stale months, then the flow runs (through the
``train_forecast_model`` DAG, with their recorded parameters), in that order; a month whose source is
gone blocks the plan, and says so.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from nyc_taxi.core import datasets as d
from nyc_taxi.core.catalog import load_table
from nyc_taxi.core.intervals import Intervals
from nyc_taxi.core.jobs import (
    AS_OF_DATETIME,
    INGEST_WEATHER_DATA,
    INGEST_YELLOW_TAXI_DATA,
    MODEL,
    TRAIN_FORECAST_MODEL,
    TRAINING_FLOW,
    Pipeline,
    parse_as_of,
)
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.core.snapshots import MONTH, REPLACED_VERSION, data_changes, held_version
from nyc_taxi.lineage.read.runs import JobRun, Runs

GONE = "gone"  # what ``published_now`` answers for a file its source no longer publishes
# the flow's parameters a re-run passes on (the train_forecast_model DAG's params), by name
FLOW_PARAMETERS = {p.name: p for p in TRAINING_FLOW.parameters}


@dataclass(frozen=True)
class Ingestion:
    """An ingestion DAG as staleness sees it: which published files it lands into which raw table."""

    pipeline: Pipeline
    published: d.PublishedFiles
    landed: d.LandedFiles
    raw: d.Table
    column: str  # the raw table's column a month's rows are placed by

    @property
    def download(self) -> str:
        return f"{self.pipeline.name}.download_published_files"

    @property
    def merge(self) -> str:
        return next(j.qualified_name for j in self.pipeline.jobs if self.raw in j.writes)


INGESTIONS = (
    Ingestion(
        INGEST_YELLOW_TAXI_DATA,
        d.TLC_YELLOW_TRIPDATA_PUBLISHED,
        d.TLC_YELLOW_TRIPDATA_LANDED,
        d.YELLOW_TAXI_RAW,
        "pickup_datetime",
    ),
    Ingestion(
        INGEST_WEATHER_DATA,
        d.NOAA_NCLIMGRID_DAILY_COUNTY_PUBLISHED,
        d.NOAA_NCLIMGRID_DAILY_COUNTY_LANDED,
        d.WEATHER_RAW,
        "date",
    ),
)


@dataclass
class StaleItem:
    kind: str  # "landed" | "raw" | "flow run"
    name: str  # what is stale, as a person names it
    dataset: str | None
    version: str | None  # the stale version
    reason: str
    new_version: str | None = None  # what supersedes it, where known
    outputs: dict[str, str | None] = field(default_factory=dict)  # a run's outputs: dataset -> version
    run: str | None = None  # a run's label (Metaflow's pathspec) and OpenLineage id
    run_id: str | None = None
    score: str | None = None  # a flow run's: the score of its forecast, stale with it ("<model> as of <origin>")


@dataclass
class PlannedRun:
    dag: str
    conf: dict
    because: str
    blocked: str | None = None  # why it cannot run (the source is gone)

    def command(self) -> str:
        return f"{self.dag}:{json.dumps(self.conf, sort_keys=True)}"


@dataclass
class StaleReport:
    items: list[StaleItem] = field(default_factory=list)
    plan: list[PlannedRun] = field(default_factory=list)
    checked_sources: bool = True  # False: the sources were not reachable; only the records were compared

    @property
    def blocked(self) -> list[PlannedRun]:
        return [p for p in self.plan if p.blocked]

    def as_dict(self) -> dict:
        return {
            "stale": [asdict(i) for i in self.items],
            "plan": [asdict(p) for p in self.plan],
            "checked_sources": self.checked_sources,
        }

    def of_run(self, run_id: str) -> StaleItem | None:
        return next((i for i in self.items if i.run_id == run_id), None)

    def of_dataset(self, name: str) -> list[StaleItem]:
        return [i for i in self.items if i.dataset == name or name in i.outputs]

    def scores(self) -> set[tuple[str, dt.datetime]]:
        """(model, origin) of every stale run's score: what the backtest's comparison marks stale."""
        found = set()
        for item in self.items:
            if item.score:
                model, _, origin = item.score.partition(" as of ")
                found.add((model, parse_as_of(origin)))  # the origin as the flow took it: to the hour
        return found


def flow_runs(runs: Runs) -> frozenset[str]:
    """The training flow's runs (Metaflow's pathspecs, ``Flow/run_id``) whose lineage records what their
    staleness is judged from: the version of raw ``compute_actuals`` read (its own, or, resuming a run, that
    run's, whose step it cloned). A run whose events of that step were lost (its recorder killed, OpenLineage off
    for it) is not known fresh, however much else it recorded."""
    counted = TRAINING_FLOW.compute_actuals.qualified_name
    return frozenset(
        run.label
        for run in runs.of_job(TRAINING_FLOW.name)
        if run.label and any(s.job == counted and s.inputs.get(d.YELLOW_TAXI_RAW.name) for s in runs.steps(run))
    )


# ---- the months the ingestion DAGs loaded ----------------------------------------------------------


@dataclass
class Month:
    ingestion: Ingestion
    month: str
    published: str | None  # the published version its landed files came from (the download run's input)
    landed: str | None  # the landed version (file@sha256, ...)
    url: str | None
    held: str | None = None  # the landed version raw holds of the month
    now: str | None = None  # what the source publishes now (None: unknown)
    stale: StaleItem | None = None


def _months(runs: Runs, ingestion: Ingestion) -> dict[str, Month]:
    """Each month's latest successful download, as it recorded it."""
    months: dict[str, Month] = {}
    for run in runs.of_job(ingestion.download):
        month = run.parameters.get("month")
        if run.state != "success" or not month or not run.outputs.get(ingestion.landed.name):
            continue  # failed, or nothing landed (a month not published yet is skipped)
        urls = run.locations.get(ingestion.published.name, [])
        months[month] = Month(
            ingestion,
            month,
            run.inputs.get(ingestion.published.name),
            run.outputs.get(ingestion.landed.name),
            urls[0] if urls else None,
        )
    return months


def _placed(table, ingestion: Ingestion, month: Month) -> Intervals:
    """Where raw holds the month's rows, from its data files' bounds (Iceberg's metadata): a taxi file's rows
    by their pickup time, including trips outside the file's month; a weather month's by its days."""
    year, number = map(int, month.month.split("-"))
    days = Intervals.of([(dt.datetime(year, number, 1), dt.datetime(year + number // 12, number % 12 + 1, 1))])
    if "source_file" not in {f.name for f in table.schema().fields} or not month.landed:
        return days
    names = {version.rsplit("@", 1)[0] for version in month.landed.split(", ")}
    placed = Intervals()
    for file in table.inspect.files().select(["readable_metrics"]).to_pylist():
        metrics = file["readable_metrics"]
        source, bounds = metrics["source_file"], metrics[ingestion.column]
        if source["lower_bound"] in names and source["upper_bound"] == source["lower_bound"]:
            if bounds["lower_bound"] is not None:
                placed |= Intervals.of([(bounds["lower_bound"], bounds["upper_bound"] + dt.timedelta(microseconds=1))])
        elif source["lower_bound"] is None or any(source["lower_bound"] <= n <= source["upper_bound"] for n in names):
            return Intervals.everything()  # a file without exact bounds: the rows may be anywhere
    return placed or days


# ---- the check ------------------------------------------------------------------------------------------


def _value(text: str) -> dt.datetime:
    """A range bound as recorded (a date or a date-time) as a date-time."""
    value = (
        dt.datetime.fromisoformat(text) if "T" in text or " " in text else dt.datetime.fromisoformat(text + "T00:00")
    )
    return value.replace(tzinfo=None)


def _compare(low, high, start: dt.datetime, end: dt.datetime) -> bool:
    low = low if isinstance(low, dt.datetime) else dt.datetime.combine(low, dt.time())
    high = high if isinstance(high, dt.datetime) else dt.datetime.combine(high, dt.time())
    return low < end and high >= start


def _changed_in_range(table, dataset: str, snapshot: str, bounds: tuple[str, str, str] | None) -> str | None:
    """Why the table's commits after ``snapshot`` changed what a run read (``bounds``: column, start, end;
    None: the whole table); None when they did not."""
    column = bounds[0] if bounds else None
    if column is None:
        current = table.current_snapshot()
        return None if current is None or str(current.snapshot_id) == snapshot else f"{dataset} has new commits"
    try:
        since = int(snapshot)
    except (TypeError, ValueError):
        return None
    changes = data_changes(table, since, column)
    if changes is None:
        return f"{dataset} snapshot {snapshot} is no longer in the table's history: what it read cannot be compared"
    start, end = _value(bounds[1]), _value(bounds[2])
    touching = [c for c in changes if not c.bounded or (c.low is not None and _compare(c.low, c.high, start, end))]
    if not touching:
        return None
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    commits = []
    for snapshot_id in sorted({c.snapshot_id for c in touching}, key=lambda i: by_id[i].timestamp_ms):
        summary = by_id[snapshot_id].summary
        what = f"snapshot {snapshot_id}"
        if summary is not None and summary.get(MONTH):
            what += f" (month {summary.get(MONTH)}"
            if summary.get(REPLACED_VERSION):
                what += f": {_whole(summary.get(REPLACED_VERSION))} → {_whole(summary.get('nyc-taxi.landed-version'))}"
            what += ")"
        commits.append(what)
    files = len(touching)
    return (
        f"{dataset} changed where this run read it ({bounds[0]} {bounds[1]} – {bounds[2]}): "
        f"{files} data file{'s' if files != 1 else ''} added or removed by {', '.join(commits)}"
    )


def _whole(version: str | None) -> str:
    """A version as recorded, whole: a Last-Modified date has commas of its own, so it is never cut."""
    return version or "?"


def _live_flow_runs(runs: Runs) -> list[JobRun]:
    """The latest successful flow run of every model and origin (the forecast table's key: a run replaces the
    rows of its model and origin, whatever its lookback and horizon): what the tables' rows come from now."""
    latest: dict[tuple, JobRun] = {}
    for run in runs.of_job(TRAINING_FLOW.name):
        if run.state == "success":
            origin = run.parameters.get(AS_OF_DATETIME.name)  # as typed: with or without its seconds
            latest[(run.parameters.get(MODEL.name), dt.datetime.fromisoformat(origin) if origin else None)] = run
    return sorted(latest.values(), key=lambda r: r.started or "")


def check(
    settings: Settings | None = None,
    published_now: Callable[[Ingestion, str], str | None] | None = None,
    runs: Runs | None = None,
) -> StaleReport:
    """What is stale now, and the re-run plan. ``published_now(ingestion, month)``: what the source publishes
    for the month now (a version as the download records it, ``GONE``, or None when it cannot be asked)."""
    settings = settings or get_settings()
    runs = runs or Runs.read(settings)
    report = StaleReport()
    tables = {}
    pending: list[tuple[Month, Intervals]] = []  # stale raw months and where raw holds their rows
    for ingestion in INGESTIONS:
        months = _months(runs, ingestion)
        if not months:
            continue
        tables[ingestion.raw.name] = table = load_table(ingestion.raw, settings)
        for month in months.values():
            month.held = held_version(table, month.month)
            month.now = published_now(ingestion, month.month) if published_now else None
            if published_now is not None and month.now is None:
                report.checked_sources = False
            landed_stale = month.now is not None and month.now != month.published
            if landed_stale:
                gone = month.now == GONE
                report.items.append(
                    StaleItem(
                        "landed",
                        f"{ingestion.landed.name} {month.month}",
                        ingestion.landed.name,
                        month.landed,
                        f"{month.url or ingestion.published.name} is no longer published"
                        if gone
                        else f"the source published a new version: {_whole(month.published)} → {_whole(month.now)}",
                        new_version=None if gone else month.now,
                    )
                )
            if landed_stale or (month.held is not None and month.landed is not None and month.held != month.landed):
                month.stale = StaleItem(
                    "raw",
                    f"{ingestion.raw.name} month {month.month}",
                    ingestion.raw.name,
                    month.held,
                    "its source month is stale (above)"
                    if landed_stale
                    else f"holds {_whole(month.held)}; the month landed since as {_whole(month.landed)} "
                    "and was not merged",
                    new_version=month.landed if not landed_stale else None,
                )
                report.items.append(month.stale)
                report.plan.append(
                    PlannedRun(
                        ingestion.pipeline.name,
                        {"month": month.month},
                        because=month.stale.name,
                        blocked=f"{month.url} is no longer published: nothing to load" if month.now == GONE else None,
                    )
                )
                pending.append((month, _placed(table, ingestion, month)))

    for flow_run in _live_flow_runs(runs):
        reasons = []
        for step in runs.steps(flow_run):
            for name, version in sorted(step.inputs.items()):
                if name not in tables or version is None:
                    continue
                bounds = step.input_ranges.get(name)
                if why := _changed_in_range(tables[name], name, version, bounds):
                    reasons.append(f"{step.job.split('.')[-1]} read {name} @ {version}; {why}")
                read = Intervals.of([(_value(bounds[1]), _value(bounds[2]))]) if bounds else Intervals.everything()
                for month, placed in pending:
                    if month.ingestion.raw.name == name and placed & read:
                        where = f"over {bounds[1]} – {bounds[2]}" if bounds else "whole"
                        reasons.append(f"{step.job.split('.')[-1]} read {name} {where}, which holds {month.stale.name}")
        if not reasons:
            continue
        outputs = {n: v for c in runs.steps(flow_run) for n, v in c.outputs.items()}
        parameters = {p: flow_run.parameters[p] for p in FLOW_PARAMETERS if p in flow_run.parameters}
        model, origin = parameters.get(MODEL.name), parameters.get(AS_OF_DATETIME.name)
        report.items.append(
            StaleItem(
                "flow run",
                f"{flow_run.label or flow_run.run_id} ({', '.join(f'{k} {v}' for k, v in parameters.items())})",
                None,
                None,
                "; ".join(dict.fromkeys(reasons)),
                outputs=outputs,
                run=flow_run.label,
                run_id=flow_run.run_id,
                score=f"{model} as of {origin}" if d.YELLOW_RIDES_FORECAST_SCORES.name in outputs else None,
            )
        )
        conf = {k: FLOW_PARAMETERS[k].check(v) for k, v in parameters.items()}
        if not any(p.dag == TRAIN_FORECAST_MODEL.name and p.conf == conf for p in report.plan):
            report.plan.append(PlannedRun(TRAIN_FORECAST_MODEL.name, conf, because=report.items[-1].name))
    return report


# ---- as text --------------------------------------------------------------------------------------------


def render(report: StaleReport) -> str:
    if not report.items:
        lines = ["nothing is stale: every output was computed from what its inputs hold now"]
    else:
        lines = [f"stale ({len(report.items)}):"]
        for item in report.items:
            lines.append(f"  {item.kind:9s} {item.name}")
            if item.outputs:
                lines.append("            wrote " + ", ".join(f"{n} @ {v}" for n, v in sorted(item.outputs.items())))
            if item.score:
                lines.append(
                    f"            its forecast's score in {d.YELLOW_RIDES_FORECAST_SCORES.name} is stale: {item.score}"
                )
            lines.append(f"            because {item.reason}")
    if not report.checked_sources:
        lines.append("(a source could not be reached: only what was recorded was compared)")
    if report.plan:
        lines.append("re-run plan, in this order (bash run lineage --stale --rerun):")
        for number, step in enumerate(report.plan, 1):
            lines.append(f"  {number}. {step.dag} {json.dumps(step.conf, sort_keys=True)}   for {step.because}")
            if step.blocked:
                lines.append(f"     cannot run: {step.blocked}")
        if report.blocked:
            lines.append("the plan cannot run as a whole: nothing will be run")
    return "\n".join(lines)
