"""Yellow taxi months: download and stage one TLC file, then upsert staging into raw."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nyc_taxi import registry
from nyc_taxi import sql
from nyc_taxi.commits import retry_on_conflict
from nyc_taxi.ingest import download, landing
from nyc_taxi.ingest.common import current_snapshot_id, day_ranges_predicate, merge_changes, month_bounds
from nyc_taxi.ingest.errors import BadSourceFile
from nyc_taxi.lineage.report import Check, DatasetUse, StepReport
from nyc_taxi.settings import Settings, get_settings
from nyc_taxi.spark import get_spark

log = logging.getLogger(__name__)

FILES, STAGING, RAW = registry.TLC_YELLOW_TRIP_FILES, registry.YELLOW_TAXI_STAGING, registry.YELLOW_TAXI_RAW
OPTIONAL_SOURCE_COLUMNS = {"cbd_congestion_fee"}  # published from 2025-01 on
# Which Arrow types each target type accepts (2022-2023 files carry counts as double).
_ACCEPTS = {
    "INT": (pa.types.is_integer, pa.types.is_floating),
    "BIGINT": (pa.types.is_integer, pa.types.is_floating),
    "DOUBLE": (pa.types.is_integer, pa.types.is_floating),
    "STRING": (pa.types.is_string, pa.types.is_large_string),
    "TIMESTAMP_NTZ": (lambda t: pa.types.is_timestamp(t) and t.tz is None,),
}


def validate_trip_file(path: Path, origin: str) -> None:
    """Raise BadSourceFile unless ``path`` is a complete TLC trip parquet file with usable columns."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(4)
        f.seek(max(size - 4, 0))
        tail = f.read(4)
    if head != b"PAR1":
        sample = path.read_bytes()[:60].decode("utf-8", "replace").strip()
        raise BadSourceFile(f"{origin} is not a parquet file (it starts with {sample!r}): the server sent something "
                            "else, e.g. an error page. Check TLC_BASE_URL and that the month is published.")
    if size < 12 or tail != b"PAR1":
        raise BadSourceFile(f"{origin} is truncated ({size} bytes, no parquet footer): the download was cut short. "
                            "Delete it and re-run the task to fetch it again.")
    try:
        meta = pq.ParquetFile(path).metadata
    except Exception as error:  # pyarrow raises several types for corrupt footers
        raise BadSourceFile(f"{origin} has a corrupt parquet footer ({error}); re-run to fetch it again.") from None
    if meta.num_rows == 0:
        raise BadSourceFile(f"{origin} contains no rows; the source published an empty file — nothing was loaded.")
    schema = {name.lower(): field.type for name, field in zip(meta.schema.to_arrow_schema().names, meta.schema.to_arrow_schema())}
    missing, wrong = [], []
    for column in registry.YELLOW_TRIP_COLUMNS:
        found = schema.get(column.source.lower())
        if found is None:
            if column.source not in OPTIONAL_SOURCE_COLUMNS:
                missing.append(column.source)
        elif not any(accepts(found) for accepts in _ACCEPTS[column.type]):
            wrong.append(f"{column.source} is {found}, expected a type castable to {column.type}")
    if missing or wrong:
        raise BadSourceFile(f"{origin} does not have the TLC yellow trip schema: "
                            + "; ".join(([f"missing columns {', '.join(missing)}"] if missing else []) + wrong)
                            + ". Nothing was loaded; compare the file with the published data dictionary.")


def download_and_stage(year: int, month: int, settings: Settings | None = None) -> StepReport:
    """Land the month's TLC file (unless already landed) and replace staging with it."""
    settings = settings or get_settings()
    url, location = FILES.url(year, month, settings), FILES.landed_path(year, month, settings)
    landed = download.fetch(url, location, validate_trip_file, settings)

    spark = get_spark(settings)
    frame = spark.read.parquet(landing.spark_path(location)).selectExpr(
        "*", "_metadata.file_name AS source_file", "_metadata.row_index AS source_row_index")
    present = {name.lower() for name in frame.columns}
    for column in registry.YELLOW_TRIP_COLUMNS:
        if column.source.lower() not in present:
            frame = frame.selectExpr("*", f"CAST(NULL AS {column.type}) AS {column.source}")
    frame.createOrReplaceTempView("landed_yellow_taxi")
    retry_on_conflict(f"staging {STAGING.name}", lambda: sql.run(
        spark, "stage_yellow_taxi", staging=STAGING.spark_name(settings), landed="landed_yellow_taxi"))
    rows = spark.table(STAGING.spark_name(settings)).count()
    log.info("staged %d rows of %s into %s", rows, Path(location).name, STAGING.name)
    return StepReport(
        inputs=[DatasetUse(FILES, source_url=url)],
        outputs=[DatasetUse(STAGING, snapshot_id=current_snapshot_id(spark, STAGING.spark_name(settings)),
                            row_count=rows, operation="INSERT")],
        summary={"month": f"{year:04d}-{month:02d}", "file": Path(location).name, "fetched": landed.fetched,
                 "bytes": landed.size, "staged_rows": rows},
    )


def _content_hash(alias: str) -> str:
    """A 64-bit hash of a row's content. Spark's hashes skip NULLs, so each column's null flag is
    hashed too: (NULL, 1) and (1, NULL) must differ."""
    columns = [f"{alias}.{c.name}" for c in registry.YELLOW_TRIP_COLUMNS] + [f"{alias}.source_file"]
    return f"xxhash64({', '.join(columns)}, {', '.join(f'isnull({c})' for c in columns)})"


def merge_into_raw(year: int, month: int, settings: Settings | None = None) -> StepReport:
    """Upsert staging into raw on the row key; unchanged rows are not rewritten. Quality counted, nothing dropped."""
    settings = settings or get_settings()
    spark = get_spark(settings)
    staging, raw = STAGING.spark_name(settings), RAW.spark_name(settings)
    start, end = month_bounds(year, month)
    quality = sql.run(spark, "yellow_taxi_quality", staging=staging, month_start=f"{start} 00:00:00",
                      next_month_start=f"{end} 00:00:00").first().asDict()
    row_count = quality.pop("row_count")
    checks = [Check(name, count, "pickup_datetime" if "pickup" in name or "trip" in name else None)
              for name, count in quality.items()]
    for check in checks:
        log.info("quality: %-26s %8d rows (kept as the source has them)", check.name, check.rows)

    days = [r[0] for r in spark.sql(f"SELECT DISTINCT CAST(pickup_datetime AS DATE) FROM {staging}").collect()]
    raw_days = day_ranges_predicate("t.pickup_datetime", days)
    hashes = {"content_hash": _content_hash("t"), "staged_content_hash": _content_hash("s")}

    def write() -> int:
        """Decided on raw as it is now, so a retry after another writer's commit decides afresh."""
        fingerprint = sql.run(spark, "yellow_taxi_fingerprint", staging=staging, raw=raw, raw_days=raw_days, **hashes).first()
        if (fingerprint.staged_rows, fingerprint.staged_content) == (fingerprint.raw_rows, fingerprint.raw_content):
            return 0  # raw already holds exactly this batch: commit nothing
        if fingerprint.raw_rows == 0:
            sql.run(spark, "append_yellow_taxi", raw=raw, staging=staging)
            return fingerprint.staged_rows
        return merge_changes(spark, "yellow_taxi_changes", "merge_yellow_taxi", staging=staging, raw=raw,
                             raw_days=raw_days, **hashes)

    changed = retry_on_conflict(f"loading {RAW.name}", write)
    log.info("merged %d new or changed rows of %d staged into %s", changed, row_count, RAW.name)
    return StepReport(
        inputs=[DatasetUse(STAGING, snapshot_id=current_snapshot_id(spark, staging), row_count=row_count, checks=checks)],
        outputs=[DatasetUse(RAW, snapshot_id=current_snapshot_id(spark, raw), row_count=changed)],
        summary={"month": f"{year:04d}-{month:02d}", "staged_rows": row_count, "merged_rows": changed,
                 **{c.name: c.rows for c in checks}},
    )
