"""Every dataset of the project, declared once: what it is, its columns and their meaning.

Read it like a schema file. How each tool names a dataset (DataHub URN, OpenLineage namespace and
name, Airflow Asset URI, Iceberg identifier) is derived from these declarations by the naming rules
in ``nyc_taxi.core.naming``; nothing else spells a table name or a URN.

The data flows: published files (the public sites) → landed files (the lake's landing area) →
staging tables → raw tables → marts and the model (see ``nyc_taxi.core.jobs`` for who moves it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # Spark SQL type; Iceberg maps TIMESTAMP_NTZ -> timestamp, TIMESTAMP -> timestamptz
    doc: str
    nullable: bool = True
    source: str | None = None  # the column's name in the published file (matched case-insensitively)


@dataclass(frozen=True)
class PublishedFiles:
    """Files a public site publishes, one per period: the origin of the project's data."""

    name: str
    description: str
    publisher: str
    base_url_setting: Literal["tlc_base_url", "noaa_base_url"]
    path: str  # URL path under the base URL, with {year} {month} (and {var}, {status})
    file_format: Literal["parquet", "csv"]
    columns: tuple[Column, ...] = ()


@dataclass(frozen=True)
class LandedFiles:
    """Published files as downloaded into the lake's landing area, byte for byte."""

    name: str
    description: str
    published: PublishedFiles
    file_name: str  # landed file name, with the same placeholders as the published path

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.published.columns


@dataclass(frozen=True)
class Table:
    """An Iceberg table in the project's database."""

    name: str
    description: str
    layer: Literal["staging", "raw", "mart"]
    columns: tuple[Column, ...]
    partitioned_by: tuple[str, ...] = ()  # Iceberg partition transforms in Spark SQL
    primary_key: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict, hash=False)  # Iceberg table properties

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def replaced_on_every_load(self) -> bool:
        """A staging table holds one load; the others accumulate every commit in their history."""
        return self.layer == "staging"


@dataclass(frozen=True)
class Model:
    """A trained model: an ML model in DataHub, a dataset of type MODEL in OpenLineage. Its columns
    are what fitting it learned (so column lineage can pass through it)."""

    name: str
    description: str
    columns: tuple[Column, ...] = ()


Dataset = PublishedFiles | LandedFiles | Table | Model


# The declarations below are a table, one column per line: the formatter leaves them as written.
# fmt: off
# ---- NYC TLC yellow taxi trips ------------------------------------------------------------------
# The one target schema every TLC file (2022-2025 shapes) is cast to; `source` names its column in
# the published file (the case varies by year).
YELLOW_TRIP_COLUMNS: tuple[Column, ...] = (
    Column("vendor_id", "INT", "TPEP provider: 1 Creative Mobile, 2 Curb, 6 Myle, 7 Helix (source VendorID)", source="VendorID"),
    Column("pickup_datetime", "TIMESTAMP_NTZ", "Meter engaged, New York local wall-clock time (source tpep_pickup_datetime)", source="tpep_pickup_datetime"),
    Column("dropoff_datetime", "TIMESTAMP_NTZ", "Meter disengaged, New York local wall-clock time (source tpep_dropoff_datetime)", source="tpep_dropoff_datetime"),
    Column("passenger_count", "BIGINT", "Passengers, as entered by the driver", source="passenger_count"),
    Column("trip_distance", "DOUBLE", "Miles reported by the taximeter", source="trip_distance"),
    Column("ratecode_id", "BIGINT", "Final rate code; 99 = unknown (source RatecodeID)", source="RatecodeID"),
    Column("store_and_fwd_flag", "STRING", "Y/N: trip record held in vehicle memory before sending", source="store_and_fwd_flag"),
    Column("pickup_location_id", "INT", "TLC taxi zone of pickup, 1..265 (source PULocationID)", source="PULocationID"),
    Column("dropoff_location_id", "INT", "TLC taxi zone of drop-off, 1..265 (source DOLocationID)", source="DOLocationID"),
    Column("payment_type", "BIGINT", "0 flex fare, 1 credit card, 2 cash, 3 no charge, 4 dispute, 5 unknown, 6 voided", source="payment_type"),
    Column("fare_amount", "DOUBLE", "Time-and-distance fare, USD", source="fare_amount"),
    Column("extra", "DOUBLE", "Miscellaneous extras and surcharges, USD", source="extra"),
    Column("mta_tax", "DOUBLE", "MTA tax, USD", source="mta_tax"),
    Column("tip_amount", "DOUBLE", "Credit card tips, USD", source="tip_amount"),
    Column("tolls_amount", "DOUBLE", "Tolls, USD", source="tolls_amount"),
    Column("improvement_surcharge", "DOUBLE", "Improvement surcharge, USD", source="improvement_surcharge"),
    Column("total_amount", "DOUBLE", "Total charged to passengers (cash tips excluded), USD", source="total_amount"),
    Column("congestion_surcharge", "DOUBLE", "NYS congestion surcharge, USD", source="congestion_surcharge"),
    Column("airport_fee", "DOUBLE", "Airport fee for LaGuardia/JFK pickups, USD (source Airport_fee / airport_fee)", source="Airport_fee"),
    Column("cbd_congestion_fee", "DOUBLE", "MTA congestion relief zone fee from 2025-01, USD; null before", source="cbd_congestion_fee"),
)
LOAD_COLUMNS: tuple[Column, ...] = (
    Column("row_key", "STRING", "Key of the trip in its file: <file>:<hash of vendor, pickup and drop-off time and zone>:<n-th such trip in the file>", nullable=False),
    Column("source_file", "STRING", "Landed file the row came from", nullable=False),
    Column("ingested_at", "TIMESTAMP", "When the row was loaded (UTC instant)", nullable=False),
)

TLC_YELLOW_TRIPDATA_PUBLISHED = PublishedFiles(
    name="tlc_yellow_tripdata_published",
    description="NYC TLC yellow taxi trip records, one parquet file per month, on the TLC's public site",
    publisher="NYC Taxi & Limousine Commission",
    base_url_setting="tlc_base_url",
    path="/trip-data/yellow_tripdata_{year:04d}-{month:02d}.parquet",
    file_format="parquet",
    # The published column names; the type is the one each column is cast to.
    columns=tuple(Column(c.source, c.type, c.doc) for c in YELLOW_TRIP_COLUMNS),
)
TLC_YELLOW_TRIPDATA_LANDED = LandedFiles(
    name="tlc_yellow_tripdata_landed",
    description="The TLC yellow trip files as downloaded, one per month, checked before they land",
    published=TLC_YELLOW_TRIPDATA_PUBLISHED,
    file_name="yellow_tripdata_{year:04d}-{month:02d}.parquet",
)
# Each data file's exact bounds of source_file (Iceberg keeps the first 16 characters by default, the
# same for every month's file name): a read of one file's trips in raw skips every other month's files.
BY_SOURCE_FILE = {"write.metadata.metrics.column.source_file": "full"}
YELLOW_TAXI_STAGING = Table(
    name="yellow_taxi_staging",
    description="One landed TLC month, cast to the target schema; replaced on every load",
    layer="staging",
    columns=LOAD_COLUMNS + YELLOW_TRIP_COLUMNS,
    # Raw's shape (columns, partitioning, codec, metrics): a new month's files join raw as they are
    # written here (core/appends.py), instead of being written a second time.
    partitioned_by=("days(pickup_datetime)",),
    properties=BY_SOURCE_FILE,
)
YELLOW_TAXI_RAW = Table(
    name="yellow_taxi_raw",
    description="All yellow taxi trips as the source publishes them now: each month exactly its file's latest version",
    layer="raw",
    columns=LOAD_COLUMNS + YELLOW_TRIP_COLUMNS,
    partitioned_by=("days(pickup_datetime)",),
    primary_key=("row_key",),
    properties=BY_SOURCE_FILE,
)

# ---- NOAA nClimGrid-Daily county weather --------------------------------------------------------
NOAA_NCLIMGRID_DAILY_COUNTY_PUBLISHED = PublishedFiles(
    name="noaa_nclimgrid_daily_county_published",
    description="NOAA nClimGrid-Daily county averages (prcp, tavg, tmax, tmin), one headerless CSV per "
    "variable and month: -prelim while the month is revised, -scaled once final",
    publisher="NOAA National Centers for Environmental Information",
    base_url_setting="noaa_base_url",
    path="/pub/data/daily-grids/v1-0-0/averages/{year:04d}/{var}-{year:04d}{month:02d}-cty-{status}.csv",
    file_format="csv",
    # No header row: the 37 fields by position, values as text (two decimals, -999.99 = missing).
    columns=(
        Column("region_type", "STRING", "'cty' for county rows"),
        Column("region_code", "STRING", "NOAA state code (2 digits) + county FIPS (3 digits)"),
        Column("region_name", "STRING", "'ST: Name County'"),
        Column("year", "STRING", "YYYY"),
        Column("month", "STRING", "MM"),
        Column("variable", "STRING", "PRCP (mm), TAVG, TMAX, TMIN (degrees C)"),
        *(Column(f"day{d}", "STRING", f"value of day {d}; -999.99 when missing or past the month's end") for d in range(1, 32)),
    ),
)
NOAA_NCLIMGRID_DAILY_COUNTY_LANDED = LandedFiles(
    name="noaa_nclimgrid_daily_county_landed",
    description="The NOAA county files as downloaded, four per month (one per variable)",
    published=NOAA_NCLIMGRID_DAILY_COUNTY_PUBLISHED,
    file_name="{var}-{year:04d}{month:02d}-cty-{status}.csv",
)
WEATHER_COLUMNS: tuple[Column, ...] = (
    Column("county_code", "STRING", "NOAA region code: 2-digit NOAA state code + 3-digit county FIPS (NYC: 30005, 30047, 30061, 30081, 30085)", nullable=False),
    Column("county_name", "STRING", "NOAA region name, e.g. 'NY: New York County'"),
    Column("date", "DATE", "Calendar day", nullable=False),
    Column("tmax_c", "DOUBLE", "Daily maximum temperature, degrees C"),
    Column("tmin_c", "DOUBLE", "Daily minimum temperature, degrees C"),
    Column("tavg_c", "DOUBLE", "Daily average temperature, degrees C"),
    Column("prcp_mm", "DOUBLE", "Daily precipitation, mm"),
    Column("source_status", "STRING", "'prelim' (current month, revised daily) or 'scaled' (final)", nullable=False),
    Column("ingested_at", "TIMESTAMP", "When the row was loaded (UTC instant)", nullable=False),
)
WEATHER_STAGING = Table(
    name="weather_staging",
    description="One month of New York City county weather, one row per county and day; replaced on every load",
    layer="staging",
    columns=WEATHER_COLUMNS,
)
WEATHER_RAW = Table(
    name="weather_raw",
    description="Daily New York City county weather as NOAA publishes it now; final (scaled) values overwrite preliminary ones",
    layer="raw",
    columns=WEATHER_COLUMNS,
    partitioned_by=("years(date)",),
    primary_key=("county_code", "date"),
)

# ---- Demand forecasting -------------------------------------------------------------------------
YELLOW_RIDES_HOURLY_ACTUALS = Table(
    name="yellow_rides_hourly_actuals",
    description="Yellow taxi pickups per zone and New York local hour (zero-filled for zones active in the window)",
    layer="mart",
    columns=(
        Column("pickup_location_id", "INT", "TLC taxi zone of pickup", nullable=False),
        Column("pickup_hour", "TIMESTAMP_NTZ", "Start of the New York local wall-clock hour", nullable=False),
        Column("ride_count", "BIGINT", "Trips picked up in that zone and hour", nullable=False),
        Column("computed_at", "TIMESTAMP", "When the count was computed (UTC instant)", nullable=False),
    ),
    partitioned_by=("months(pickup_hour)",),
    primary_key=("pickup_location_id", "pickup_hour"),
)
YELLOW_RIDES_FORECAST_MODEL = Model(
    name="yellow_rides_forecast_model",
    description="Hourly yellow taxi demand per zone: seasonal-naive (same hour a week earlier), optionally weather-adjusted",
    columns=(
        Column("pickup_location_id", "INT", "Zone the learned history belongs to"),
        Column("history_hour", "TIMESTAMP_NTZ", "A New York local hour of the training window"),
        Column("history_ride_count", "BIGINT", "Rides in that zone and hour, as trained on"),
        Column("wet_factor", "DOUBLE", "weather_adjusted only: demand on wet days relative to dry days"),
        Column("daily_prcp_mm", "DOUBLE", "weather_adjusted only: NYC's mean precipitation per day of the "
               "training window and the horizon (a day with 1 mm or more is wet)"),
    ),
)
YELLOW_RIDES_HOURLY_FORECAST = Table(
    name="yellow_rides_hourly_forecast",
    description="Forecast yellow taxi pickups per zone and New York local hour",
    layer="mart",
    columns=(
        Column("pickup_location_id", "INT", "TLC taxi zone of pickup", nullable=False),
        Column("forecast_hour", "TIMESTAMP_NTZ", "Start of the forecast New York local hour", nullable=False),
        Column("predicted_ride_count", "DOUBLE", "Forecast trips in that zone and hour", nullable=False),
        Column("model_name", "STRING", "Model that produced the forecast", nullable=False),
        Column("model_version", "STRING", "Model version (Metaflow run pathspec of the training step)", nullable=False),
        Column("as_of_datetime", "TIMESTAMP_NTZ", "Forecast origin: last hour of data the model could see", nullable=False),
        Column("created_at", "TIMESTAMP", "When the forecast was written (UTC instant)", nullable=False),
    ),
    partitioned_by=("months(forecast_hour)",),
    primary_key=("pickup_location_id", "forecast_hour"),
)

# fmt: on
TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        YELLOW_TAXI_STAGING,
        YELLOW_TAXI_RAW,
        WEATHER_STAGING,
        WEATHER_RAW,
        YELLOW_RIDES_HOURLY_ACTUALS,
        YELLOW_RIDES_HOURLY_FORECAST,
    )
}
PUBLISHED: dict[str, PublishedFiles] = {
    p.name: p for p in (TLC_YELLOW_TRIPDATA_PUBLISHED, NOAA_NCLIMGRID_DAILY_COUNTY_PUBLISHED)
}
LANDED: dict[str, LandedFiles] = {f.name: f for f in (TLC_YELLOW_TRIPDATA_LANDED, NOAA_NCLIMGRID_DAILY_COUNTY_LANDED)}
MODELS: dict[str, Model] = {m.name: m for m in (YELLOW_RIDES_FORECAST_MODEL,)}
DATASETS: dict[str, Dataset] = {**PUBLISHED, **LANDED, **TABLES, **MODELS}
