"""NOAA nClimGrid-Daily county weather: New York City's five counties, one row per county and day."""

from __future__ import annotations

import logging
from pathlib import Path

from nyc_taxi.core import datasets as d
from nyc_taxi.core.catalog import current_snapshot, load_table
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.naming import landed_location, published_url, spark_table
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.core.snapshots import COMMITTED_BY, LANDED_VERSION, MONTH, REPLACED_VERSION, held_version
from nyc_taxi.core.sql import SqlFolder
from nyc_taxi.core.tables import pinned
from nyc_taxi.core.upserts import RowChanges, upsert_changes
from nyc_taxi.ingest import download
from nyc_taxi.ingest.audit import audit_staged, check_published
from nyc_taxi.ingest.common import merge_output, merge_report, month_bounds, month_label
from nyc_taxi.ingest.errors import BadSourceFile, NotPublishedYet
from nyc_taxi.ingest.staging import landed_file_version, stage, staged_files
from nyc_taxi.lineage.write.columns import Statement, column_lineage
from nyc_taxi.lineage.write.report import DatasetUse, StepReport

log = logging.getLogger(__name__)
SQL = SqlFolder(__file__)

PUBLISHED, LANDED = d.NOAA_NCLIMGRID_DAILY_COUNTY_PUBLISHED, d.NOAA_NCLIMGRID_DAILY_COUNTY_LANDED
STAGING, RAW = d.WEATHER_STAGING, d.WEATHER_RAW
VARIABLES = ("prcp", "tavg", "tmax", "tmin")
STATUSES = ("scaled", "prelim")  # final files first; the current month only has preliminary ones
FIELDS = [c.name for c in PUBLISHED.columns]
# NOAA region codes: NOAA state code (New York = 30) + county FIPS.
NYC_COUNTIES = {
    "30005": "NY: Bronx County",
    "30047": "NY: Kings County",
    "30061": "NY: New York County",
    "30081": "NY: Queens County",
    "30085": "NY: Richmond County",
}


def validate_county_file(path: Path, origin: str) -> int:
    """Raise BadSourceFile unless every row has the 37 nClimGrid fields and there is no header; its rows."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BadSourceFile(f"{origin} is not a text CSV file (the server sent binary data)") from None
    if not text.strip():
        raise BadSourceFile(f"{origin} is empty; nothing was loaded. Re-run once NOAA has published it.")
    if text.lstrip().lower().startswith(("<!doctype", "<html")):
        raise BadSourceFile(f"{origin} is an HTML page, not the county CSV: check NOAA_BASE_URL.")
    rows = 0
    for number, line in enumerate(text.split("\n"), start=1):
        if not line:
            continue
        rows += 1
        fields = line.split(",")
        if len(fields) != len(FIELDS):
            raise BadSourceFile(
                f"{origin} line {number} has {len(fields)} fields, expected {len(FIELDS)} "
                "(region_type, region_code, region_name, year, month, variable, day1..day31); "
                "the file layout changed or is damaged. Nothing was loaded."
            )
        if not (fields[3].strip().isdigit() and fields[4].strip().isdigit()):
            raise BadSourceFile(
                f"{origin} line {number} is not a data row (year {fields[3]!r}, month {fields[4]!r}): "
                "nClimGrid county files have no header row. Nothing was loaded."
            )
    return rows


def _locations(year: int, month: int, status: str, settings: Settings) -> list[str]:
    return [landed_location(LANDED, year, month, settings, var=var, status=status) for var in VARIABLES]


def _landed_status(year: int, month: int, settings: Settings) -> str:
    """Which files of the month have landed: final ones if they have, else preliminary ones."""
    for status in STATUSES:
        if all(download.landed_version(loc, settings) for loc in _locations(year, month, status, settings)):
            return status
    raise BadSourceFile(
        f"NOAA county files for {month_label(year, month)} have not landed: run the download task for this month first"
    )


def download_published_files(year: int, month: int, settings: Settings | None = None) -> StepReport:
    """Land the four variables' files: final ('scaled') ones if published, else the current 'prelim' ones."""
    settings = settings or get_settings()
    for status in STATUSES:
        try:
            landed = [
                download.fetch(
                    published_url(PUBLISHED, year, month, settings, var=var, status=status),
                    landed_location(LANDED, year, month, settings, var=var, status=status),
                    validate_county_file,
                    settings,
                )
                for var in VARIABLES
            ]
            break
        except NotPublishedYet as missing:
            log.info("%s", missing)
    else:
        raise NotPublishedYet(
            f"NOAA nClimGrid county files for {month_label(year, month)} are not published yet "
            f"(neither -scaled nor -prelim at {getattr(settings, PUBLISHED.base_url_setting)})"
        )

    def version(kind: str) -> str:
        return ", ".join(sorted(f"{Path(f.location).name}@{getattr(f.version, kind)}" for f in landed))

    size = sum(f.version.size for f in landed)
    return StepReport(
        inputs=[
            DatasetUse(
                PUBLISHED,
                version=version("published_version"),
                size_bytes=size,
                locations=tuple(f.version.url for f in landed),
            )
        ],
        outputs=[
            DatasetUse(
                LANDED,
                version=version("landed_version"),
                size_bytes=size,
                operation="CREATE",
                locations=tuple(f.location for f in landed),
                committed=any(f.fetched for f in landed),
                columns=download.byte_for_byte(PUBLISHED),
            )
        ],
        summary={
            "month": month_label(year, month),
            "status": status,
            "files": [Path(f.location).name for f in landed],
            "fetched": sum(f.fetched for f in landed),
        },
    )


def _landed_view(spark, locations: list[str], settings: Settings) -> str:
    """The month's four county files as one view of 37 string columns."""
    schema = ", ".join(f"{name} STRING" for name in FIELDS)
    frame = spark.read.csv(
        [lakehouse(settings).spark_path(loc) for loc in locations], schema=schema, header=False, mode="FAILFAST"
    )
    frame.createOrReplaceTempView("landed_county_files")
    return "landed_county_files"


def _stage_values(status: str) -> dict[str, str]:
    return {"county_codes": ", ".join(f"'{code}'" for code in NYC_COUNTIES), "status": status}


def stage_landed_files(year: int, month: int, settings: Settings | None = None) -> StepReport:
    settings = settings or get_settings()
    status = _landed_status(year, month, settings)
    locations = _locations(year, month, status, settings)
    version = landed_file_version(LANDED, locations, settings)

    def no_rows() -> Exception:
        return BadSourceFile(
            f"{locations[0]} and its siblings hold no rows for New York City's counties "
            f"({', '.join(NYC_COUNTIES)}); nothing was staged."
        )

    return stage(
        SQL,
        "stage_weather",
        STAGING,
        LANDED,
        version,
        locations,
        lambda spark: _landed_view(spark, locations, settings),
        settings,
        summary={"month": month_label(year, month), "status": status},
        check_values=_check_values(year, month, status, settings),
        key=RAW.primary_key,
        empty=no_rows,
        small=True,  # the five NYC counties of every US county's rows: a few hundred county-days a month
        **_stage_values(status),
    )


def _check_values(year: int, month: int, status: str, settings: Settings) -> dict[str, object]:
    """What a staged month's checks compare with: every day of the month once its files are final; while
    they are preliminary, the days up to the last one the landed files publish for any county of the
    country (not only the rows staged: a day New York City's counties lack is missing there)."""
    start, end = month_bounds(year, month)
    days = (end - start).days
    if status != "scaled":
        days = min(days, _last_published_day(_locations(year, month, status, settings), settings))
    return {"counties": len(NYC_COUNTIES), "days": days, "month_start": str(start), "next_month_start": str(end)}


def _last_published_day(locations: list[str], settings: Settings) -> int:
    """The last day of the month any row of the landed files has a value for (-999.99: none)."""
    last = 0
    for location in locations:
        with lakehouse(settings).local_copy(location) as path:
            for line in path.read_text().splitlines():
                values = line.split(",")[6:]
                published = [day for day, value in enumerate(values, 1) if value.strip() not in ("-999.99", "")]
                last = max([last, *published])
    return last


def staged_rows(spark, locations: list[str], settings: Settings):
    """What staging the landed files gives, as a DataFrame (no table written): what reproducing a merge compares."""
    status = _file_status([Path(loc).name for loc in locations])
    return SQL.run(spark, "stage_weather", landed=_landed_view(spark, locations, settings), **_stage_values(status))


def batch_filter(locations: list[str]) -> str:
    """Raw's rows of the month the files hold (``prcp-YYYYMM-cty-….csv``)."""
    stamp = Path(locations[0]).name.split("-")[1]
    start, end = month_bounds(int(stamp[:4]), int(stamp[4:]))
    return f"date >= DATE'{start}' AND date < DATE'{end}'"


def published_version(year: int, month: int, settings: Settings | None = None) -> str | None:
    """The version NOAA publishes of the month now, as the download records it: the four final files if
    published, else the preliminary ones (HEAD requests); NotPublishedYet when neither is."""
    settings = settings or get_settings()
    for status in STATUSES:
        versions = []
        try:
            for var in VARIABLES:
                url = published_url(PUBLISHED, year, month, settings, var=var, status=status)
                name = Path(landed_location(LANDED, year, month, settings, var=var, status=status)).name
                version = download.head(url)
                if version is None:
                    return None
                versions.append(f"{name}@{version}")
        except NotPublishedYet:
            continue
        return ", ".join(sorted(versions))
    raise NotPublishedYet(f"NOAA publishes no county files for {month_label(year, month)}")


def merge_into_raw(year: int, month: int, settings: Settings | None = None) -> StepReport:
    """Make raw hold the staged month: in one commit, new and changed county-days written and the month's
    county-days the staged files no longer have removed (a final value is never replaced, nor removed,
    by a preliminary file). An unchanged month commits nothing.

    The write is one upsert that decides on raw as it is when it commits (a try that lost the race to
    another writer decides afresh); its output is the snapshot it committed (``this_merges_snapshot``),
    not raw's newest, which another month's load may have committed since; a task whose earlier try
    committed this batch but was lost before it could say so takes that commit as its own
    (``earlier_try_commit``) rather than commit again.
    """
    from nyc_taxi.core.spark import get_spark, start_spark

    settings = settings or get_settings()
    start_spark(settings, small=True)  # a month of NYC's county-days: small data; the JVM starts meanwhile
    staged_snapshot, before = current_snapshot(STAGING, settings), current_snapshot(RAW, settings)
    spark = get_spark(settings, small=True)
    staging, raw = pinned(STAGING, staged_snapshot, settings), spark_table(RAW, settings)
    staged = int(staged_snapshot.summary.get("total-records", 0)) if staged_snapshot else 0
    version = staged_snapshot.summary.get(LANDED_VERSION) if staged_snapshot else None
    label = month_label(year, month)
    start, end = month_bounds(year, month)
    values = {"month_start": str(start), "next_month_start": str(end), "status": _staged_status(staged_snapshot)}
    replaced = held_version(load_table(RAW, settings), label) if staged else None
    checked = audit_staged(
        STAGING,
        RAW,
        staged_snapshot,
        _check_values(year, month, values["status"], settings),
        before,
        spark,
        settings,
        label,
        publisher="NOAA",
        shown=RAW.primary_key,
    )
    summary = {MONTH: label, **({LANDED_VERSION: version} if version else {})}
    if settings.task_run:
        summary[COMMITTED_BY] = settings.task_run
    if replaced and replaced != version:
        summary[REPLACED_VERSION] = replaced

    # raw as the upsert finds it (its output when it changes nothing): read before it, so a retry after a lost
    # race may decide on a later one (taxi's write pins what each try reads; weather's changes read raw as is)
    base = current_snapshot(RAW, settings)
    changes = (
        upsert_changes(
            spark, SQL, "weather_changes", "merge_weather", summary=summary, staging=staging, raw=raw, **values
        )
        if staged
        else RowChanges()
    )
    after, committed, changes, told = merge_output(RAW, settings, label, before, base, changes)
    if told is not None:  # the commit's own summary says what it did
        summary = {**summary, **told.additional_properties}
    log.info(
        "%s: %d county-days added, %d changed, %d removed of %d staged",
        RAW.name,
        changes.added,
        changes.changed,
        changes.removed,
        staged,
    )
    columns = column_lineage(
        RAW,
        [
            Statement(
                SQL, "weather_changes", reads={"staging": "staging", "raw": "target"}, makes="changes", values=values
            ),
            Statement(SQL, "merge_weather", reads={"raw": "target", "changes": "changes"}),
        ],
        {"staging": STAGING},
        settings,
    )
    report = merge_report(
        STAGING,
        (snapshot_id(staged_snapshot), staged, checked),
        RAW,
        snapshot_id(after),
        committed,
        changes,
        columns,
        label,
        version,
        summary.get(REPLACED_VERSION),
    )
    (written,) = report.outputs
    if committed:  # raw's own checks (on the month's few hundred rows) and profile, on the snapshot written
        bounds = {"month_start": str(start), "next_month_start": str(end)}
        check_published(written, RAW, spark, bounds, report, settings, batch=label)
    return report


def _staged_status(snapshot) -> str:
    """Whether staging holds final ('scaled') or preliminary files: their names say (…-cty-scaled.csv)."""
    return _file_status(staged_files(snapshot))


def _file_status(names: list[str]) -> str:
    statuses = {name.rsplit("-", 1)[-1].removesuffix(".csv") for name in names}
    if len(statuses) != 1 or not statuses <= set(STATUSES):
        raise BadSourceFile(f"staging holds {', '.join(names) or 'no files'}: not one month's files of one status")
    return statuses.pop()


def snapshot_id(snapshot) -> str | None:
    return str(snapshot.snapshot_id) if snapshot else None
