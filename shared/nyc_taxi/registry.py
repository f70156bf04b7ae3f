"""The dataset registry: every dataset of the project is declared here, once.

Each entry carries its schema, partitioning and primary key, and derives its identities for the
active profile: the Iceberg identifier and storage location, the OpenLineage dataset
(namespace, name, symlinks), the DataHub URN and the Airflow Asset URI. Airflow DAGs, the Metaflow
flow and the lineage code all ask this module; no other module spells a table name or a URN.

Identity choices (see README, "How one table gets one name"):
- DataHub: platform ``iceberg``, name ``[<platform instance>.]<database>.<table>`` (the name
  DataHub's own Iceberg source gives a table).
- Airflow Asset: ``iceberg://<that DataHub name>``, which DataHub's Airflow plugin turns into
  exactly that URN.
- OpenLineage: namespace ``iceberg://<catalog>``, name = the same dotted name, so DataHub's
  OpenLineage translation lands on the same URN; the storage location (``file``/``s3://bucket``)
  and, on aws, the Glue table (``arn:aws:glue:<region>:<account>`` + ``table/<db>/<table>``) are
  attached as symlinks, as the OpenLineage naming spec describes for catalog tables.
- Landed source files: plain storage naming (``file`` + path, or ``s3://bucket`` + key).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import datahub.emitter.mce_builder as dh
from openlineage.client.event_v2 import Dataset as OLDataset
from openlineage.client.facet_v2 import symlinks_dataset
from openlineage.client.naming import dataset as ol_naming

from nyc_taxi.settings import Settings, get_settings

ICEBERG_PLATFORM = "iceberg"
MODEL_PLATFORM = "metaflow"


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # Spark SQL type; Iceberg maps TIMESTAMP_NTZ -> timestamp, TIMESTAMP -> timestamptz
    doc: str
    nullable: bool = True
    source: str | None = None  # column name in the source file (matched case-insensitively)


@dataclass(frozen=True)
class Identity:
    """How every tool names one dataset under one profile."""

    key: str
    datahub_urn: str
    ol_namespace: str
    ol_name: str
    ol_symlinks: tuple[symlinks_dataset.Identifier, ...]
    asset_uri: str | None
    location: str | None

    def openlineage_dataset(self) -> OLDataset:
        facets = {"symlinks": symlinks_dataset.SymlinksDatasetFacet(identifiers=list(self.ol_symlinks))} if self.ol_symlinks else {}
        return OLDataset(namespace=self.ol_namespace, name=self.ol_name, facets=facets)


def _storage_naming(location: str) -> ol_naming.DatasetNaming:
    """OpenLineage naming of a storage location (local path or s3:// URI)."""
    if location.startswith(("s3://", "s3a://")):
        bucket, _, key = location.split("://", 1)[1].partition("/")
        return ol_naming.S3(bucket_name=bucket, object_key=key)
    return ol_naming.LocalFileSystem(path=location)


def _asset_uri_for_location(location: str) -> str:
    if location.startswith(("s3://", "s3a://")):
        return "s3://" + location.split("://", 1)[1]
    return f"file://{location}"


def _datahub_name(name: str, settings: Settings) -> str:
    instance = settings.datahub_platform_instance
    return f"{instance}.{name}" if instance else name


@dataclass(frozen=True)
class Table:
    """An Iceberg table in the project's database."""

    name: str
    description: str
    layer: Literal["staging", "raw", "mart"]
    columns: tuple[Column, ...]
    partitioned_by: tuple[str, ...] = ()  # Iceberg partition transforms in Spark SQL
    primary_key: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def identifier(self, settings: Settings | None = None) -> str:
        """Iceberg identifier inside the catalog: ``<database>.<table>``."""
        return f"{(settings or get_settings()).database}.{self.name}"

    def spark_name(self, settings: Settings | None = None) -> str:
        """Fully qualified name for Spark SQL: ``<catalog>.<database>.<table>``."""
        settings = settings or get_settings()
        return f"{settings.catalog_name}.{self.identifier(settings)}"

    def location(self, settings: Settings | None = None) -> str:
        settings = settings or get_settings()
        return f"{settings.warehouse}/{settings.database}/{self.name}"

    def asset_uri(self, settings: Settings | None = None) -> str:
        """The Airflow Asset URI (no cloud call: safe while a DAG file is parsed)."""
        settings = settings or get_settings()
        return f"{ICEBERG_PLATFORM}://{_datahub_name(self.identifier(settings), settings)}"

    def airflow_asset(self, settings: Settings | None = None):
        from airflow.sdk import Asset

        return Asset(name=self.identifier(settings), uri=self.asset_uri(settings))

    def identity(self, settings: Settings | None = None) -> Identity:
        settings = settings or get_settings()
        dh_name = _datahub_name(self.identifier(settings), settings)
        location = self.location(settings)
        storage = _storage_naming(location)
        symlinks = [symlinks_dataset.Identifier(namespace=storage.get_namespace(), name=storage.get_name(), type="LOCATION")]
        if settings.profile == "aws":
            from nyc_taxi import aws

            glue = ol_naming.AWSGlue(region_name=settings.aws_region, account_id=aws.account_id(settings),
                                     database_name=settings.database, table_name=self.name)
            symlinks.append(symlinks_dataset.Identifier(namespace=glue.get_namespace(), name=glue.get_name(), type="TABLE"))
        return Identity(
            key=self.name,
            datahub_urn=dh.make_dataset_urn(ICEBERG_PLATFORM, dh_name, settings.datahub_env),
            ol_namespace=f"{ICEBERG_PLATFORM}://{settings.catalog_name}",
            ol_name=dh_name,
            ol_symlinks=tuple(symlinks),
            asset_uri=self.asset_uri(settings),
            location=location,
        )


@dataclass(frozen=True)
class SourceFiles:
    """Downloaded source files: fetched from a public site, landed in the lake as they are."""

    name: str
    description: str
    file_format: Literal["parquet", "csv"]
    remote_path: str  # URL path template under the base URL, with {year} {month:02d} (and {var})
    file_name: str  # landed file name template
    base_url_setting: Literal["tlc_base_url", "noaa_base_url"]
    columns: tuple[Column, ...] = ()

    def base_url(self, settings: Settings | None = None) -> str:
        return getattr(settings or get_settings(), self.base_url_setting)

    def url(self, year: int, month: int, settings: Settings | None = None, **parts: str) -> str:
        return self.base_url(settings) + self.remote_path.format(year=year, month=month, **parts)

    def location(self, settings: Settings | None = None) -> str:
        return f"{(settings or get_settings()).landing}/{self.name}"

    def landed_path(self, year: int, month: int, settings: Settings | None = None, **parts: str) -> str:
        return f"{self.location(settings)}/{self.file_name.format(year=year, month=month, **parts)}"

    def identity(self, settings: Settings | None = None) -> Identity:
        settings = settings or get_settings()
        location = self.location(settings)
        storage = _storage_naming(location)
        namespace, name = storage.get_namespace(), storage.get_name()
        # DataHub's OpenLineage translation keeps the bucket in an object-store name and the
        # absolute path of a local file; mirror it so both routes meet on one URN.
        if namespace.startswith("s3://"):
            dh_platform, dh_name = "s3", f"{namespace[len('s3://'):]}/{name}"
        else:
            dh_platform, dh_name = "file", name
        return Identity(
            key=self.name,
            datahub_urn=dh.make_dataset_urn(dh_platform, dh_name, settings.datahub_env),
            ol_namespace=namespace,
            ol_name=name,
            ol_symlinks=(),
            asset_uri=_asset_uri_for_location(location),
            location=location,
        )


@dataclass(frozen=True)
class Model:
    """A trained model: an ML model in DataHub, a dataset of type MODEL in OpenLineage."""

    name: str
    description: str

    def identity(self, settings: Settings | None = None) -> Identity:
        settings = settings or get_settings()
        dh_name = _datahub_name(f"{settings.database}.{self.name}", settings)
        return Identity(
            key=self.name,
            datahub_urn=dh.make_ml_model_urn(MODEL_PLATFORM, dh_name, settings.datahub_env),
            ol_namespace=f"{MODEL_PLATFORM}://{settings.openlineage_namespace}",
            ol_name=dh_name,
            ol_symlinks=(),
            asset_uri=None,
            location=None,
        )


# --------------------------------------------------------------------------------------------
# Columns shared by the staging and raw taxi tables: the one target schema every TLC file
# (2022-2025 shapes) is cast to. Source names are matched case-insensitively.
# --------------------------------------------------------------------------------------------
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
    Column("row_key", "STRING", "Deterministic key of the source row: same file row, same key", nullable=False),
    Column("source_file", "STRING", "Landed file the row came from", nullable=False),
    Column("ingested_at", "TIMESTAMP", "When the row was loaded (UTC instant)", nullable=False),
)

TLC_YELLOW_TRIP_FILES = SourceFiles(
    name="tlc_yellow_tripdata_files",
    description="NYC TLC yellow taxi trip records, one parquet file per month, as published",
    file_format="parquet",
    remote_path="/trip-data/yellow_tripdata_{year:04d}-{month:02d}.parquet",
    file_name="yellow_tripdata_{year:04d}-{month:02d}.parquet",
    base_url_setting="tlc_base_url",
    # Source names (case varies by year); the type is the one each column is cast to.
    columns=tuple(Column(c.source, c.type, c.doc) for c in YELLOW_TRIP_COLUMNS),
)
NOAA_NCLIMGRID_COUNTY_FILES = SourceFiles(
    name="noaa_nclimgrid_daily_county_files",
    description="NOAA nClimGrid-Daily county averages (prcp, tavg, tmax, tmin), one headerless CSV per variable and month",
    file_format="csv",
    remote_path="/pub/data/daily-grids/v1-0-0/averages/{year:04d}/{var}-{year:04d}{month:02d}-cty-{status}.csv",
    file_name="{var}-{year:04d}{month:02d}-cty-{status}.csv",
    base_url_setting="noaa_base_url",
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

YELLOW_TAXI_STAGING = Table(
    name="yellow_taxi_staging",
    description="One landed TLC month, cast to the target schema; replaced on every load",
    layer="staging",
    columns=LOAD_COLUMNS + YELLOW_TRIP_COLUMNS,
)
YELLOW_TAXI_RAW = Table(
    name="yellow_taxi_raw",
    description="All yellow taxi trips as the source has them, upserted month by month",
    layer="raw",
    columns=LOAD_COLUMNS + YELLOW_TRIP_COLUMNS,
    partitioned_by=("days(pickup_datetime)",),
    primary_key=("row_key",),
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
    description="Daily New York City county weather; final (scaled) values overwrite preliminary ones",
    layer="raw",
    columns=WEATHER_COLUMNS,
    partitioned_by=("years(date)",),
    primary_key=("county_code", "date"),
)

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

YELLOW_RIDES_FORECAST_MODEL = Model(
    name="yellow_rides_forecast_model",
    description="Hourly yellow taxi demand per zone: seasonal-naive (same hour a week earlier), optionally weather-adjusted",
)

TABLES: dict[str, Table] = {t.name: t for t in (
    YELLOW_TAXI_STAGING, YELLOW_TAXI_RAW, WEATHER_STAGING, WEATHER_RAW,
    YELLOW_RIDES_HOURLY_ACTUALS, YELLOW_RIDES_HOURLY_FORECAST,
)}
SOURCE_FILES: dict[str, SourceFiles] = {s.name: s for s in (TLC_YELLOW_TRIP_FILES, NOAA_NCLIMGRID_COUNTY_FILES)}
MODELS: dict[str, Model] = {m.name: m for m in (YELLOW_RIDES_FORECAST_MODEL,)}
DATASETS: dict[str, Table | SourceFiles | Model] = {**SOURCE_FILES, **TABLES, **MODELS}


def get(name: str) -> Table | SourceFiles | Model:
    """Look a dataset up by its registry name; unknown names fail loudly with the known ones."""
    try:
        return DATASETS[name]
    except KeyError:
        raise KeyError(f"unknown dataset {name!r}; the registry knows: {', '.join(sorted(DATASETS))}") from None


def by_urn(urn: str, settings: Settings | None = None) -> Table | SourceFiles | Model | None:
    """The registry dataset whose DataHub URN under the active profile is ``urn``."""
    return next((d for d in DATASETS.values() if d.identity(settings).datahub_urn == urn), None)
