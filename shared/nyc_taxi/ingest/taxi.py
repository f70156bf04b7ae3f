"""Yellow taxi months: download the TLC file, stage it, upsert staging into raw. SQL in sql/."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nyc_taxi.core import datasets as d
from nyc_taxi.core import verdicts
from nyc_taxi.core.appends import append_staged_files
from nyc_taxi.core.catalog import current_snapshot, load_table
from nyc_taxi.core.commits import retry_on_conflict
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.naming import landed_location, published_url, spark_table
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.core.snapshots import (
    COMMITTED_BY,
    LANDED_ROWS,
    LANDED_VERSION,
    MONTH,
    REPLACED_VERSION,
    commit_properties,
    held_version,
    month_of,
)
from nyc_taxi.core.sql import SqlFolder
from nyc_taxi.core.tables import pinned
from nyc_taxi.core.upserts import RowChanges, merge_changes
from nyc_taxi.ingest import download
from nyc_taxi.ingest.audit import audit_staged, check_published
from nyc_taxi.ingest.common import merge_output, merge_report, month_bounds, month_label
from nyc_taxi.ingest.errors import BadSourceFile
from nyc_taxi.ingest.staging import landed_file_version, stage, staged_files
from nyc_taxi.lineage.write.columns import Statement, column_lineage
from nyc_taxi.lineage.write.report import DatasetUse, StepReport

log = logging.getLogger(__name__)
SQL = SqlFolder(__file__)

PUBLISHED, LANDED = d.TLC_YELLOW_TRIPDATA_PUBLISHED, d.TLC_YELLOW_TRIPDATA_LANDED
STAGING, RAW = d.YELLOW_TAXI_STAGING, d.YELLOW_TAXI_RAW
ROW_KEY = RAW.primary_key  # what names a staged trip (staging has raw's columns)
OPTIONAL_SOURCE_COLUMNS = {"cbd_congestion_fee"}  # published from 2025-01 on
# Which Arrow types each target type accepts (2022-2023 files carry counts as double).
_ACCEPTS = {
    "INT": (pa.types.is_integer, pa.types.is_floating),
    "BIGINT": (pa.types.is_integer, pa.types.is_floating),
    "DOUBLE": (pa.types.is_integer, pa.types.is_floating),
    "STRING": (pa.types.is_string, pa.types.is_large_string),
    "TIMESTAMP_NTZ": (lambda t: pa.types.is_timestamp(t) and t.tz is None,),
}


def validate_trip_file(path: Path, origin: str) -> int:
    """Raise BadSourceFile unless ``path`` is a complete TLC trip parquet file with usable columns; its rows."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(4)
        f.seek(max(size - 4, 0))
        tail = f.read(4)
    if head != b"PAR1":
        sample = path.read_bytes()[:60].decode("utf-8", "replace").strip()
        raise BadSourceFile(
            f"{origin} is not a parquet file (it starts with {sample!r}): the server sent something "
            "else, e.g. an error page. Check TLC_BASE_URL and that the month is published."
        )
    if size < 12 or tail != b"PAR1":
        raise BadSourceFile(
            f"{origin} is truncated ({size} bytes, no parquet footer): the download was cut short. "
            "Delete it and re-run the task to fetch it again."
        )
    try:
        meta = pq.ParquetFile(path).metadata
    except Exception as error:  # pyarrow raises several types for corrupt footers
        raise BadSourceFile(f"{origin} has a corrupt parquet footer ({error}); re-run to fetch it again.") from None
    if meta.num_rows == 0:
        raise BadSourceFile(f"{origin} contains no rows; the source published an empty file — nothing was loaded.")
    arrow = meta.schema.to_arrow_schema()
    schema = {name.lower(): field.type for name, field in zip(arrow.names, arrow, strict=False)}
    missing, wrong = [], []
    for column in d.YELLOW_TRIP_COLUMNS:
        found = schema.get(column.source.lower())
        if found is None:
            if column.source not in OPTIONAL_SOURCE_COLUMNS:
                missing.append(column.source)
        elif not any(accepts(found) for accepts in _ACCEPTS[column.type]):
            wrong.append(f"{column.source} is {found}, expected a type castable to {column.type}")
    if missing or wrong:
        raise BadSourceFile(
            f"{origin} does not have the TLC yellow trip schema: "
            + "; ".join(([f"missing columns {', '.join(missing)}"] if missing else []) + wrong)
            + ". Nothing was loaded; compare the file with the published data dictionary."
        )
    return meta.num_rows


def download_published_file(year: int, month: int, settings: Settings | None = None) -> StepReport:
    """Land the month's TLC file unless the landed copy is the TLC's current version."""
    settings = settings or get_settings()
    url, location = published_url(PUBLISHED, year, month, settings), landed_location(LANDED, year, month, settings)
    landed = download.fetch(url, location, validate_trip_file, settings)
    version, name = landed.version, Path(location).name
    return StepReport(
        inputs=[
            DatasetUse(
                PUBLISHED, version=f"{name}@{version.published_version}", locations=(url,), size_bytes=version.size
            )
        ],
        outputs=[
            DatasetUse(
                LANDED,
                version=f"{name}@{version.landed_version}",
                locations=(location,),
                size_bytes=version.size,
                committed=landed.fetched,
                operation="CREATE",
                columns=download.byte_for_byte(PUBLISHED),
            )
        ],
        summary={
            "month": month_label(year, month),
            "file": name,
            "fetched": landed.fetched,
            "bytes": version.size,
            "version": version.published_version,
        },
    )


def _landed_view(spark, locations: list[str], settings: Settings) -> str:
    """The landed file(s) as a view: with each row's file name and position, and the columns a year's
    files lack as NULL."""
    lake = lakehouse(settings)
    frame = spark.read.parquet(*(lake.spark_path(location) for location in locations)).selectExpr(
        "*", "_metadata.file_name AS source_file", "_metadata.row_index AS source_row_index"
    )
    present = {name.lower() for name in frame.columns}
    for column in d.YELLOW_TRIP_COLUMNS:  # a column a year's files lack is NULL
        if column.source.lower() not in present:
            frame = frame.selectExpr("*", f"CAST(NULL AS {column.type}) AS {column.source}")
    frame.createOrReplaceTempView("landed_yellow_taxi")
    return "landed_yellow_taxi"


def _landed_rows(location: str, settings: Settings) -> int:
    """The trips of a landed file: as its download's check read them, else from its parquet footer."""
    known = download.landed_version(location, settings)
    if known is not None and known.rows is not None:
        return known.rows
    with lakehouse(settings).local_copy(location) as path:  # landed before its rows were kept
        return pq.ParquetFile(path).metadata.num_rows


def stage_landed_file(year: int, month: int, settings: Settings | None = None) -> StepReport:
    """Replace staging with the landed month cast to the target schema (unless it already holds it), its
    checks counted as it is written."""
    settings = settings or get_settings()
    location = landed_location(LANDED, year, month, settings)
    version = landed_file_version(LANDED, [location], settings)
    rows = _landed_rows(location, settings)
    return stage(
        SQL,
        "stage_yellow_taxi",
        STAGING,
        LANDED,
        version,
        [location],
        lambda spark: _landed_view(spark, [location], settings),
        settings,
        summary={"month": month_label(year, month), "file": Path(location).name},
        check_values=_check_values(year, month, rows),
        key=ROW_KEY,
        properties={LANDED_ROWS: str(rows)},
    )


def staged_rows(spark, locations: list[str], settings: Settings):
    """What staging the landed files gives, as a DataFrame (no table written): what reproducing a merge compares."""
    return SQL.run(spark, "stage_yellow_taxi", landed=_landed_view(spark, locations, settings))


def batch_filter(locations: list[str]) -> str:
    """Raw's rows of the landed files' batch."""
    return f"source_file IN ({_sql_strings(Path(loc).name for loc in locations)})"


def _sql_strings(names) -> str:
    """File names as a SQL list of string literals (quotes doubled)."""
    return ", ".join("'" + name.replace("'", "''") + "'" for name in names)


def published_version(year: int, month: int, settings: Settings | None = None) -> str | None:
    """The version the TLC publishes of the month now, as the download records it (a HEAD request; None when
    the server names none); NotPublishedYet when it publishes no such file."""
    settings = settings or get_settings()
    url = published_url(PUBLISHED, year, month, settings)
    version = download.head(url)
    name = Path(landed_location(LANDED, year, month, settings)).name
    return f"{name}@{version}" if version else None


def _month_values(year: int, month: int) -> dict[str, str]:
    start, end = month_bounds(year, month)
    return {"month_start": f"{start} 00:00:00", "next_month_start": f"{end} 00:00:00"}


def _check_values(year: int, month: int, landed_rows: int) -> dict[str, object]:
    """What the staged month's checks compare with: the month's bounds and the landed file's rows."""
    return {**_month_values(year, month), "landed_rows": landed_rows}


def _content_hash(alias: str) -> str:
    """A 64-bit hash of a row's content. Spark's hashes skip NULLs, so each column's null flag is
    hashed too: (NULL, 1) and (1, NULL) must differ."""
    columns = [f"{alias}.{c.name}" for c in d.YELLOW_TRIP_COLUMNS] + [f"{alias}.source_file"]
    return f"xxhash64({', '.join(columns)}, {', '.join(f'isnull({c})' for c in columns)})"


def merge_into_raw(year: int, month: int, settings: Settings | None = None) -> StepReport:
    """Make raw hold exactly the staged version of the month's file: a new month joins as its staged
    files; for a month raw holds, one commit writes its new and changed trips and removes the trips the
    file no longer has. An unchanged month commits nothing. A batch that fails an error check of its
    staging table is refused before raw changes (ChecksFailed); warnings are kept as published.

    Three paths stand apart from that, because merges repeat and run beside each other: each try of the
    write decides on raw as it is then (``_write_batch``), so a try that lost the race to another
    writer's commit decides afresh; the merge's output is the snapshot its own write committed
    (``this_merges_snapshot``), not raw's newest, which another month's load may have committed since;
    and a task whose earlier try committed this batch but was lost before it could say so takes that
    commit as its own (``earlier_try_commit``) rather than commit again.
    """
    from nyc_taxi.core.spark import get_spark, start_spark

    settings = settings or get_settings()
    start_spark(settings)  # the JVM starts while the batch is found in the catalog's metadata
    batch = _StagedBatch.of(year, month, settings)
    before = current_snapshot(RAW, settings)
    spark = get_spark(settings)
    checked = _audit(batch, year, month, before, spark, settings)
    written = retry_on_conflict(f"loading {RAW.name}", lambda: _write_batch(batch, spark, settings))
    after, committed, changes, told = merge_output(RAW, settings, batch.label, before, written.base, written.changes)
    if told is not None:  # the commit's own summary says what it did
        written = _Written(changes, told.get(REPLACED_VERSION), written.base)
    report = _report(batch, checked, after, committed, written, settings)
    if committed or (
        after is not None and verdicts.unjudged(load_table(RAW, settings), after.snapshot_id, batch.label, month_of)
    ):  # raw's own checks and profile, on the snapshot this run holds as its commit
        (raw_use,) = report.outputs
        values = {"staged_rows": batch.rows, "source_files": batch.source_files}
        check_published(raw_use, RAW, spark, values, report, settings, batch=batch.label)
    return report


_HASHES = {"content_hash": _content_hash("t"), "staged_content_hash": _content_hash("s")}


@dataclass
class _StagedBatch:
    """The month staging holds, from its snapshot's metadata (no scan): its rows, the files they came
    from and their landed version. Every read of raw is limited to those files' rows (pruned by raw's
    source_file bounds)."""

    label: str
    snapshot: object  # staging's pyiceberg snapshot (None: staging is empty)
    staging: str  # staging for Spark SQL, pinned at that snapshot
    rows: int
    source_files: str  # the files' names as a SQL list
    version: str | None
    _fingerprint: dict | None = None

    @classmethod
    def of(cls, year: int, month: int, settings: Settings) -> _StagedBatch:
        snapshot = current_snapshot(STAGING, settings)
        return cls(
            label=month_label(year, month),
            snapshot=snapshot,
            staging=pinned(STAGING, snapshot, settings),
            rows=int(snapshot.summary.get("total-records", 0)) if snapshot else 0,
            source_files=_sql_strings(staged_files(snapshot)) or "NULL",
            version=snapshot.summary.get(LANDED_VERSION) if snapshot else None,
        )

    def fingerprint(self, spark) -> dict:
        """The batch's rows and the exact sum of their content hashes: one scan of staging, made once and
        only when raw holds rows of the batch (a new month is not hashed)."""
        if self._fingerprint is None:
            self._fingerprint = (
                SQL.run(spark, "yellow_taxi_fingerprint", staging=self.staging, **_HASHES).first().asDict()
            )
        return self._fingerprint


@dataclass(frozen=True)
class _Written:
    """What one try of the write did to raw, the landed version of the month it replaced, and raw's snapshot
    it decided on."""

    changes: RowChanges
    replaced: str | None = None
    base: object = None


def _audit(batch: _StagedBatch, year: int, month: int, before, spark, settings: Settings) -> list:
    """Audit before publish: the batch's checks as the stage counted them while it wrote the snapshot
    (table metadata, no scan), else counted here. An error stops the merge before raw changes."""
    landed_rows = batch.snapshot.summary.get(LANDED_ROWS) if batch.snapshot else None
    return audit_staged(
        STAGING,
        RAW,
        batch.snapshot,
        _check_values(
            year,
            month,
            int(landed_rows) if landed_rows else _landed_rows(landed_location(LANDED, year, month, settings), settings),
        ),
        before,
        spark,
        settings,
        batch.label,
        publisher="the TLC",
        shown=ROW_KEY,
    )


def _write_batch(batch: _StagedBatch, spark, settings: Settings) -> _Written:
    """One try of the write, decided on raw as it is now: the batch appended when raw holds none of its
    files' rows, nothing when raw holds exactly the batch, else its changes MERGEd."""
    base = current_snapshot(RAW, settings)
    if batch.rows == 0:
        return _Written(RowChanges(), base=base)
    summary = {MONTH: batch.label, **({LANDED_VERSION: batch.version} if batch.version else {})}
    if settings.task_run:
        summary[COMMITTED_BY] = settings.task_run
    held = SQL.run(
        spark, "yellow_taxi_held", raw=pinned(RAW, base, settings), source_files=batch.source_files, **_HASHES
    ).first()
    if held.row_count == 0:
        return _Written(_append_new_month(batch, base, spark, settings, summary), base=base)
    staged = batch.fingerprint(spark)
    if (staged["row_count"], staged["content"]) == (held.row_count, held.content):
        return _Written(RowChanges(), base=base)  # raw already holds exactly this batch: commit nothing
    replaced = held_version(load_table(RAW, settings), batch.label)
    changes = merge_changes(
        spark,
        SQL,
        "yellow_taxi_changes",
        "merge_yellow_taxi",
        summary={**summary, **({REPLACED_VERSION: replaced} if replaced else {})},
        staging=batch.staging,
        raw=spark_table(RAW, settings),
        source_files=batch.source_files,
        **_HASHES,
    )
    return _Written(changes, replaced, base)


def _append_new_month(batch: _StagedBatch, base, spark, settings: Settings, summary: dict) -> RowChanges:
    """A new month: staging's data files join raw as they are (no rows rewritten)."""
    added = RowChanges(added=batch.rows)
    summary = summary | added.as_summary()
    appended = append_staged_files(
        spark, STAGING, batch.snapshot.snapshot_id, RAW, base and base.snapshot_id, settings, summary
    )
    if appended is None:
        log.warning(
            "%s is not in %s's shape (created by an older version?): the month's rows are written again; "
            "drop the staging table to have the next load create it in raw's shape",
            STAGING.name,
            RAW.name,
        )
        with commit_properties(spark, summary):
            SQL.run(spark, "append_yellow_taxi", raw=spark_table(RAW, settings), staging=batch.staging)
    elif appended != batch.rows:
        raise RuntimeError(f"appended {appended} rows of a staged batch of {batch.rows}")
    return added


def _report(batch: _StagedBatch, checked: list, after, committed: bool, written: _Written, settings) -> StepReport:
    """The merge's report: the batch read, raw as the merge left it, and where raw's columns come from (a
    new month is appended, a changed one MERGEd: either way every column is staging's, the MERGE's
    lineage)."""
    columns = column_lineage(
        RAW,
        [
            Statement(
                SQL,
                "yellow_taxi_changes",
                reads={"staging": "staging", "raw": "target"},
                makes="changes",
                values={"source_files": "NULL", **_HASHES},
            ),
            Statement(
                SQL, "merge_yellow_taxi", reads={"raw": "target", "changes": "changes"}, values={"source_files": "NULL"}
            ),
        ],
        {"staging": STAGING},
        settings,
    )
    changes, replaced = written.changes, written.replaced
    log.info(
        "%s: %d trips added, %d changed, %d removed of %d staged%s",
        RAW.name,
        changes.added,
        changes.changed,
        changes.removed,
        batch.rows,
        f" ({batch.version} replaces {replaced})" if replaced else "",
    )
    return merge_report(
        STAGING,
        (_id(batch.snapshot), batch.rows, checked),
        RAW,
        _id(after),
        committed,
        changes,
        columns,
        batch.label,
        batch.version,
        replaced,
    )


def _id(snapshot) -> str | None:
    return str(snapshot.snapshot_id) if snapshot else None
