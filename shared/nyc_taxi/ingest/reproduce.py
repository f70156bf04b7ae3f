"""A merge run's output computed again from the landed version its lineage recorded (`bash run lineage
--reproduce yellow_taxi_raw@<snapshot>` or the DAG run): the landed files of that version are staged again
by the stage's own SQL into a temporary view, and compared, row for row, with what raw held of that batch at
the snapshot the merge wrote (Iceberg time travel). No table is written.

The landed file of a version is the landed file itself while it is current, and a retained copy once the
source replaced it (``download.retained``: kept ``LANDED_VERSION_RETENTION_DAYS``); older versions are gone,
and the answer says so.
"""

from __future__ import annotations

from nyc_taxi.core import datasets as d
from nyc_taxi.core.catalog import load_table
from nyc_taxi.core.reproduction import Comparison, Unreproducible
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.core.tables import pinned
from nyc_taxi.ingest import download, taxi, weather

SOURCES = {d.YELLOW_TAXI_RAW.name: taxi, d.WEATHER_RAW.name: weather}


def reproduce(raw: d.Table, snapshot_id: int, landed_version: str, settings: Settings | None = None) -> Comparison:
    """Stage ``landed_version`` (``name@sha256:…, …``) again and compare it with ``raw`` at ``snapshot_id``."""
    from nyc_taxi.core.spark import get_spark

    settings = settings or get_settings()
    source = SOURCES[raw.name]
    table = load_table(raw, settings)
    if table.snapshot_by_id(int(snapshot_id)) is None:
        raise Unreproducible(f"{raw.name} snapshot {snapshot_id} has been expired: what the merge wrote is gone")
    locations = []
    for entry in landed_version.split(", "):
        name, _, version = entry.rpartition("@")
        location = download.retained(source.LANDED, name, version, settings)
        if location is None:
            raise Unreproducible(
                f"{name} in version {version} is no longer retained in the landing area (versions a source replaced "
                f"are kept {settings.landed_version_retention_days} days): the merge's input is gone"
            )
        locations.append(location)
    spark = get_spark(settings)
    staged = source.staged_rows(spark, locations, settings).drop("ingested_at")
    held = spark.sql(f"SELECT * FROM {pinned(raw, snapshot_id, settings)}").where(source.batch_filter(locations))
    held = held.drop("ingested_at")
    missing = staged.exceptAll(held)  # staged again, but not in raw
    extra = held.exceptAll(staged)  # in raw, but not staged again
    differences = missing.count() + extra.count()
    sample = [("recomputed only", tuple(r)) for r in missing.limit(10).collect()]
    sample += [("in the table only", tuple(r)) for r in extra.limit(10).collect()]
    return Comparison(raw.name, str(snapshot_id), staged.count(), differences, sample)
