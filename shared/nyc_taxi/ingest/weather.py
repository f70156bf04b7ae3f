"""NOAA nClimGrid-Daily county weather: New York City's five counties, one row per county and day."""

from __future__ import annotations

import logging
from pathlib import Path

from nyc_taxi import registry
from nyc_taxi import sql
from nyc_taxi.commits import retry_on_conflict
from nyc_taxi.ingest import download, landing
from nyc_taxi.ingest.common import current_snapshot_id, upsert_changes
from nyc_taxi.ingest.errors import BadSourceFile, NotPublishedYet
from nyc_taxi.lineage.report import DatasetUse, StepReport
from nyc_taxi.settings import Settings, get_settings
from nyc_taxi.spark import get_spark

log = logging.getLogger(__name__)

FILES, STAGING, RAW = registry.NOAA_NCLIMGRID_COUNTY_FILES, registry.WEATHER_STAGING, registry.WEATHER_RAW
VARIABLES = ("prcp", "tavg", "tmax", "tmin")
FIELDS = [c.name for c in FILES.columns]
# NOAA region codes: NOAA state code (New York = 30) + county FIPS.
NYC_COUNTIES = {
    "30005": "NY: Bronx County",
    "30047": "NY: Kings County",
    "30061": "NY: New York County",
    "30081": "NY: Queens County",
    "30085": "NY: Richmond County",
}


def validate_county_file(path: Path, origin: str) -> None:
    """Raise BadSourceFile unless every row has the 37 nClimGrid fields and there is no header."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BadSourceFile(f"{origin} is not a text CSV file (the server sent binary data)") from None
    lines = text.split("\n")
    if not text.strip():
        raise BadSourceFile(f"{origin} is empty; nothing was loaded. Re-run once NOAA has published it.")
    if text.lstrip().lower().startswith(("<!doctype", "<html")):
        raise BadSourceFile(f"{origin} is an HTML page, not the county CSV: check NOAA_BASE_URL.")
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        fields = line.split(",")
        if len(fields) != len(FIELDS):
            raise BadSourceFile(f"{origin} line {number} has {len(fields)} fields, expected {len(FIELDS)} "
                                "(region_type, region_code, region_name, year, month, variable, day1..day31); "
                                "the file layout changed or is damaged. Nothing was loaded.")
        if not (fields[3].strip().isdigit() and fields[4].strip().isdigit()):
            raise BadSourceFile(f"{origin} line {number} is not a data row (year {fields[3]!r}, month {fields[4]!r}): "
                                "nClimGrid county files have no header row. Nothing was loaded.")


def _land_month(year: int, month: int, settings: Settings) -> tuple[str, list[tuple[str, str]]]:
    """Land the four variables, final ('scaled') files if published, else the current 'prelim' ones."""
    for status in ("scaled", "prelim"):
        try:
            landed = []
            for var in VARIABLES:
                url = FILES.url(year, month, settings, var=var, status=status)
                location = FILES.landed_path(year, month, settings, var=var, status=status)
                # Preliminary files change every day: always fetch them again.
                download.fetch(url, location, validate_county_file, settings, refetch=status == "prelim")
                landed.append((url, location))
            return status, landed
        except NotPublishedYet as missing:
            log.info("%s", missing)
    raise NotPublishedYet(f"NOAA nClimGrid county files for {year:04d}-{month:02d} are not published yet "
                          f"(neither -scaled nor -prelim at {FILES.base_url(settings)})")


def download_and_stage(year: int, month: int, settings: Settings | None = None) -> StepReport:
    settings = settings or get_settings()
    status, landed = _land_month(year, month, settings)
    spark = get_spark(settings)
    schema = ", ".join(f"{name} STRING" for name in FIELDS)
    frame = spark.read.csv([landing.spark_path(location) for _, location in landed], schema=schema, header=False,
                           mode="FAILFAST")
    frame.createOrReplaceTempView("landed_county_files")
    codes = ", ".join(f"'{code}'" for code in NYC_COUNTIES)
    retry_on_conflict(f"staging {STAGING.name}", lambda: sql.run(
        spark, "stage_weather", staging=STAGING.spark_name(settings), county_files="landed_county_files",
        county_codes=codes, status=status))
    rows = spark.table(STAGING.spark_name(settings)).count()
    if rows == 0:
        raise BadSourceFile(f"{landed[0][0]} and its siblings hold no rows for New York City's counties "
                            f"({', '.join(NYC_COUNTIES)}); nothing was staged.")
    log.info("staged %d county-days (%s) for %04d-%02d", rows, status, year, month)
    return StepReport(
        inputs=[DatasetUse(FILES, source_url=landed[0][0])],
        outputs=[DatasetUse(STAGING, snapshot_id=current_snapshot_id(spark, STAGING.spark_name(settings)),
                            row_count=rows, operation="INSERT")],
        summary={"month": f"{year:04d}-{month:02d}", "status": status,
                 "files": [Path(location).name for _, location in landed], "staged_rows": rows},
    )


def merge_into_raw(year: int, month: int, settings: Settings | None = None) -> StepReport:
    settings = settings or get_settings()
    spark = get_spark(settings)
    staging, raw = STAGING.spark_name(settings), RAW.spark_name(settings)
    staged = spark.table(staging).count()
    changed = upsert_changes(spark, "weather_changes", "merge_weather", staging=staging, raw=raw)
    log.info("merged %d new or changed of %d staged county-days into %s", changed, staged, RAW.name)
    return StepReport(
        inputs=[DatasetUse(STAGING, snapshot_id=current_snapshot_id(spark, staging), row_count=staged)],
        outputs=[DatasetUse(RAW, snapshot_id=current_snapshot_id(spark, raw), row_count=changed)],
        summary={"month": f"{year:04d}-{month:02d}", "staged_rows": staged, "merged_rows": changed},
    )
