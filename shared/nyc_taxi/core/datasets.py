"""Every dataset of the project, declared once: what it is, its columns and their meaning.

Read it like a schema file. How each tool names a dataset (DataHub URN, OpenLineage namespace and
name, Airflow Asset URI, Iceberg identifier) is derived from these declarations by the naming rules
in ``nyc_taxi.core.naming``; nothing else spells a table name or a URN.

The data flows: published files (the public sites) → landed files (the lake's landing area) →
staging tables → raw tables → marts and the model (see ``nyc_taxi.core.jobs`` for who moves it).

Each table and the model also declares its data-quality checks, as a dbt schema file declares its
tests: a name, the column(s), the rule and a severity. Every version written is checked by the step
that writes it (``nyc_taxi.core.quality`` compiles the rules and judges the counts).
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
    categorical: bool = False  # few distinct values (codes, zones): a profile counts them exactly


@dataclass(frozen=True)
class Check:
    """A data-quality check, declared with its dataset and evaluated on every version written.

    ``kind``:
    - ``expect``: every row satisfies ``rule`` (a SQL condition over the columns). A row where it is NULL
      passes, as in a SQL CHECK constraint: a missing value is ``not_null``'s to count.
    - ``not_null``: ``columns[0]`` is never NULL.
    - ``accepted``: ``columns[0]`` is one of ``rule`` (SQL values); NULL passes.
    - ``unique``: no two rows (those satisfying ``where``, if given) share ``columns``.
    - ``row_count``: the rows (those satisfying ``where``, if given) number exactly ``rule``, a SQL
      expression that may aggregate; every row missing or extra counts as one failing.

    ``severity``: ``warn`` — recorded, the run goes on (a quirk kept as the source has it); ``error`` —
    the run stops before what it checks is published, when more than ``tolerance`` of the rows fail
    (a share; fewer failing rows are warned of). ``${name}`` placeholders are the batch's own values
    (its month, the landed file's rows), filled by the step that checks it.

    ``grain``: what a row is. Empty: a row of the dataset. Otherwise rows the writer derives from what it
    writes, named with the dataset (``day``: one per day of a window; ``forecast``: one for the forecast as a
    whole), whose columns the dataset's declaration lists.
    """

    name: str
    kind: Literal["expect", "not_null", "accepted", "unique", "row_count"]
    doc: str
    columns: tuple[str, ...] = ()
    rule: str = ""
    where: str = ""
    severity: Literal["warn", "error"] = "warn"
    tolerance: float = 0.0
    grain: str = ""


def expect(name: str, rule: str, *, on: tuple[str, ...], doc: str, severity="warn", tolerance=0.0, grain="") -> Check:
    return Check(name, "expect", doc, on, rule, severity=severity, tolerance=tolerance, grain=grain)


def not_null(column: str, *, name: str, doc: str, severity="warn", tolerance=0.0) -> Check:
    return Check(name, "not_null", doc, (column,), f"{column} IS NOT NULL", severity=severity, tolerance=tolerance)


def accepted_values(column: str, values: str, *, name: str, doc: str, severity="warn") -> Check:
    return Check(name, "accepted", doc, (column,), values, severity=severity)


def unique(*columns: str, name: str, doc: str, where: str = "", severity="error") -> Check:
    return Check(name, "unique", doc, columns, where=where, severity=severity)


def row_count(
    name: str, equals: str, *, doc: str, where: str = "", on: tuple[str, ...] = (), severity="error"
) -> Check:
    return Check(name, "row_count", doc, on, equals, where=where, severity=severity)


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
    checks: tuple[Check, ...] = ()

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
    checks: tuple[Check, ...] = ()


Dataset = PublishedFiles | LandedFiles | Table | Model


# The declarations below are a table, one column per line: the formatter leaves them as written.
# fmt: off
# ---- NYC TLC yellow taxi trips ------------------------------------------------------------------
# The one target schema every TLC file (2022-2025 shapes) is cast to; `source` names its column in
# the published file (the case varies by year).
YELLOW_TRIP_COLUMNS: tuple[Column, ...] = (
    Column("vendor_id", "INT", "TPEP provider: 1 Creative Mobile, 2 Curb, 6 Myle, 7 Helix (source VendorID)", source="VendorID", categorical=True),
    Column("pickup_datetime", "TIMESTAMP_NTZ", "Meter engaged, New York local wall-clock time (source tpep_pickup_datetime)", source="tpep_pickup_datetime"),
    Column("dropoff_datetime", "TIMESTAMP_NTZ", "Meter disengaged, New York local wall-clock time (source tpep_dropoff_datetime)", source="tpep_dropoff_datetime"),
    Column("passenger_count", "BIGINT", "Passengers, as entered by the driver", source="passenger_count", categorical=True),
    Column("trip_distance", "DOUBLE", "Miles reported by the taximeter", source="trip_distance"),
    Column("ratecode_id", "BIGINT", "Final rate code; 99 = unknown (source RatecodeID)", source="RatecodeID", categorical=True),
    Column("store_and_fwd_flag", "STRING", "Y/N: trip record held in vehicle memory before sending", source="store_and_fwd_flag", categorical=True),
    Column("pickup_location_id", "INT", "TLC taxi zone of pickup, 1..265 (source PULocationID)", source="PULocationID", categorical=True),
    Column("dropoff_location_id", "INT", "TLC taxi zone of drop-off, 1..265 (source DOLocationID)", source="DOLocationID", categorical=True),
    Column("payment_type", "BIGINT", "0 flex fare, 1 credit card, 2 cash, 3 no charge, 4 dispute, 5 unknown, 6 voided", source="payment_type", categorical=True),
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
# A month's trips as the TLC publishes them, checked as they are staged: the merge publishes a month
# into raw only when no error check failed (audit before publish); warnings are the TLC's own quirks,
# kept as published (docs/sources.md).
# A tolerance of 1 %: the TLC's files have none of these values missing and tens of stray pickups in millions
# of trips, far below it; a file with more is not what the TLC publishes (docs/quality.md).
TAXI_MONTH_CHECKS: tuple[Check, ...] = (
    row_count("rows_as_landed", "${landed_rows}", severity="error",
              doc="Every trip of the landed file is staged once: as many rows as the file's parquet footer says"),
    not_null("pickup_datetime", name="pickup_present", severity="error", tolerance=0.01,
             doc="A trip without a pickup time is on no day and in no hour's count: a few are kept as published "
                 "(warned of), more than 1 % is a damaged file"),
    not_null("dropoff_datetime", name="dropoff_present", severity="error", tolerance=0.01,
             doc="A trip without a drop-off time: a few are kept as published (warned of), more than 1 % is a damaged file"),
    not_null("pickup_location_id", name="pickup_zone_present", severity="error", tolerance=0.01,
             doc="A trip without a pickup zone is in no zone's count: a few are kept (warned of), more than 1 % is a damaged file"),
    expect("pickup_in_month", "pickup_datetime >= TIMESTAMP_NTZ'${month_start}' AND pickup_datetime < TIMESTAMP_NTZ'${next_month_start}'",
           on=("pickup_datetime",), severity="error", tolerance=0.01,
           doc="A month's file holds that month's trips: real files carry tens of stray pickups, some years off "
               "(warned of); more than 1 % elsewhere is another month's file or a broken one, and stops the load "
               "(a missing pickup time is pickup_present's to count)"),
    expect("trip_not_repeated", "row_key LIKE '%:1'", on=("row_key",), severity="error", tolerance=0.01,
           doc="A trip whose vendor, pickup and drop-off time and zones repeat an earlier row of the file (its row "
               "key's n-th, 2 or more): the few duplicates the TLC publishes are warned of and kept; more than 1 % "
               "is a file exported twice"),
    expect("dropoff_after_pickup", "dropoff_datetime > pickup_datetime", on=("pickup_datetime", "dropoff_datetime"),
           doc="About 0.06 % of real trips end at or before they start (kept as published)"),
    expect("trip_within_3_hours", "dropoff_datetime <= pickup_datetime + INTERVAL 3 HOURS", on=("pickup_datetime", "dropoff_datetime"),
           doc="Meters left running: trips over 3 hours (kept as published)"),
    expect("total_positive", "total_amount > 0", on=("total_amount",),
           doc="Refunds and disputes have negative or zero totals, about 4 % of real trips (kept as published)"),
    expect("fare_and_distance_plausible", "fare_amount <= 10000 AND trip_distance <= 1000", on=("fare_amount", "trip_distance"),
           doc="Absurd extremes seen in real files (a fare of 323,800, a distance of 318,608), kept as published"),
    expect("not_flex_fare", "payment_type <> 0", on=("payment_type",),
           doc="Flex fares (payment type 0): the TLC leaves passenger_count, ratecode_id, store_and_fwd_flag, "
               "congestion_surcharge and airport_fee null on them, 10-29 % of the rows in 2025 (kept as published)"),
    expect("pickup_zone_known", "pickup_location_id BETWEEN 1 AND 265", on=("pickup_location_id",),
           severity="error", tolerance=0.01,
           doc="A taxi zone of the TLC's lookup (1..265; 264 and 265 are its unknown zones): a trip elsewhere is in no "
               "zone's actuals; a few are warned of, more than 1 % is a damaged file"),
    accepted_values("vendor_id", "1, 2, 6, 7", name="vendor_known",
                    doc="The TPEP providers the data dictionary lists (1, 2, 6, 7)"),
)
YELLOW_TAXI_STAGING = Table(
    name="yellow_taxi_staging",
    description="One landed TLC month, cast to the target schema; replaced on every load",
    layer="staging",
    columns=LOAD_COLUMNS + YELLOW_TRIP_COLUMNS,
    # Raw's shape (columns, partitioning, codec, metrics): a new month's files join raw as they are
    # written here (core/appends.py), instead of being written a second time.
    partitioned_by=("days(pickup_datetime)",),
    properties=BY_SOURCE_FILE,
    checks=TAXI_MONTH_CHECKS,
)
YELLOW_TAXI_RAW = Table(
    name="yellow_taxi_raw",
    description="All yellow taxi trips as the source publishes them now: each month exactly its file's latest version",
    layer="raw",
    columns=LOAD_COLUMNS + YELLOW_TRIP_COLUMNS,
    partitioned_by=("days(pickup_datetime)",),
    primary_key=("row_key",),
    properties=BY_SOURCE_FILE,
    checks=(
        # from Iceberg's manifests (each data file's source_file bounds and record count): no data read
        row_count("month_rows_as_staged", "${staged_rows}", where="source_file IN (${source_files})", on=("source_file",),
                  doc="After a merge raw holds the month's staged trips, each once: a month appended twice, or a "
                      "MERGE that lost rows, fails here (the commit stands: roll it back and load the month again)"),
    ),
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
    Column("county_code", "STRING", "NOAA region code: 2-digit NOAA state code + 3-digit county FIPS (NYC: 30005, 30047, 30061, 30081, 30085)", nullable=False, categorical=True),
    Column("county_name", "STRING", "NOAA region name, e.g. 'NY: New York County'"),
    Column("date", "DATE", "Calendar day", nullable=False),
    Column("tmax_c", "DOUBLE", "Daily maximum temperature, degrees C"),
    Column("tmin_c", "DOUBLE", "Daily minimum temperature, degrees C"),
    Column("tavg_c", "DOUBLE", "Daily average temperature, degrees C"),
    Column("prcp_mm", "DOUBLE", "Daily precipitation, mm"),
    Column("source_status", "STRING", "'prelim' (current month, revised daily) or 'scaled' (final)", nullable=False, categorical=True),
    Column("ingested_at", "TIMESTAMP", "When the row was loaded (UTC instant)", nullable=False),
)
WEATHER_MONTH_CHECKS: tuple[Check, ...] = (
    row_count("every_county_day", "${counties} * ${days}", on=("county_code", "date"),
              doc="Every county has every day: of the whole month once its files are final (-scaled); while they "
                  "are preliminary (-prelim), up to the last day the files publish for any county of the country"),
    expect("date_in_month", "date >= DATE'${month_start}' AND date < DATE'${next_month_start}'", on=("date",),
           severity="error", doc="A month's files hold that month's days: another month's is a damaged or misnamed file"),
    expect("values_present", "tmax_c IS NOT NULL AND tmin_c IS NOT NULL AND tavg_c IS NOT NULL AND prcp_mm IS NOT NULL",
           on=("tmax_c", "tmin_c", "tavg_c", "prcp_mm"), severity="error", tolerance=0.01,
           doc="NOAA's -999.99 (missing) in a variable of a county-day: NYC's final values have none; one county-day "
               "in a month (under 1 %) is warned of, more is a damaged file"),
    expect("prcp_not_negative", "prcp_mm >= 0", on=("prcp_mm",), severity="error",
           doc="Precipitation is never negative: a negative value is a damaged file (a missing one is values_present's)"),
    expect("tavg_between_tmin_and_tmax", "tavg_c BETWEEN tmin_c - 0.02 AND tmax_c + 0.02", on=("tavg_c", "tmin_c", "tmax_c"),
           doc="NOAA's daily average is the mean of the minimum and maximum (to 0.02 degrees)"),
)
WEATHER_STAGING = Table(
    name="weather_staging",
    description="One month of New York City county weather, one row per county and day; replaced on every load",
    layer="staging",
    columns=WEATHER_COLUMNS,
    checks=WEATHER_MONTH_CHECKS,
)
WEATHER_RAW = Table(
    name="weather_raw",
    description="Daily New York City county weather as NOAA publishes it now; final (scaled) values overwrite preliminary ones",
    layer="raw",
    columns=WEATHER_COLUMNS,
    partitioned_by=("years(date)",),
    primary_key=("county_code", "date"),
    # No check of its own: the merge's MERGE on the key can write a county-day once only, Iceberg refuses a
    # MERGE over another writer's rows of the month (serializable isolation) and Spark a MERGE whose key
    # matches twice, so no input could make a uniqueness check here fail (docs/quality.md).
)

# ---- Demand forecasting -------------------------------------------------------------------------
# A day is whole against its weekday, hour by hour (the actuals' day check; docs/quality.md): WHOLE of its
# weekday's rides or more, or else a quarter (USUAL_HOURS) of its busy hours (BUSY of the day's rides or more)
# as busy as usual (USUAL_HOUR of theirs or more); and never with a hole, HOLE_HOURS busy hours in a row each
# under HOLE of theirs (a file's hours lost). A holiday or a storm moves rides between hours; trips missing from
# a file thin every hour alike, or leave hours empty. The horizon's days are judged by the same rule
# (forecast/window.py).
WHOLE, USUAL_HOUR, USUAL_HOURS, BUSY = 0.6, 0.85, 0.25, 0.02
HOLE, HOLE_HOURS = 0.05, 2
HOLE_RIDES = 20  # an hour is told empty only where its weekday's holds this many: with fewer, 0 can be chance
# times its weekday's rides: a day counted over three times. Not 2 (a day counted twice): where damaged days
# are most of a weekday's, its median is half an intact day's, which then reads 2 times (a test); a file loaded
# twice is refused before raw (staging's repeated trips)
AT_MOST = 3
YELLOW_RIDES_HOURLY_ACTUALS = Table(
    name="yellow_rides_hourly_actuals",
    description="Yellow taxi pickups per zone and New York local hour (zero-filled for zones active in the window)",
    layer="mart",
    columns=(
        Column("pickup_location_id", "INT", "TLC taxi zone of pickup", nullable=False, categorical=True),
        Column("pickup_hour", "TIMESTAMP_NTZ", "Start of the New York local wall-clock hour", nullable=False),
        Column("ride_count", "BIGINT", "Trips picked up in that zone and hour", nullable=False),
        Column("computed_at", "TIMESTAMP", "When the count was computed (UTC instant)", nullable=False),
    ),
    partitioned_by=("months(pickup_hour)",),
    primary_key=("pickup_location_id", "pickup_hour"),
    # Checked on the window's days before its counts are written (grain "day", one row per day of the window:
    # `day`; `rides`, its trips in every zone within the window; `training`, whether the model learns from it
    # (its midnight is before the forecast origin); `complete`, whether the whole day is in the window;
    # `reference`, its weekday's rides: hour by hour, the median of that hour on the window's other complete
    # training days of its weekday when there are two or more, else of all of them, summed; `usual_hours`, the
    # share of its busy hours (2 % of the reference's day or more) holding 85 % of their reference or more;
    # `hole_hours`, the most busy hours in a row each holding under 5 % of theirs, of 20 rides or more).
    # A window that fails is not committed, and no model is trained on it. A horizon day raw does not hold
    # whole by the same rule — no trip, a few stray ones of a month not loaded, most of its trips missing —
    # has not happened or is not loaded yet: it is not counted (no zero is written for it), and not scored.
    checks=(
        expect("training_days_have_rides", "rides > 0 OR NOT training", on=("pickup_hour", "ride_count"),
               severity="error", grain="day",
               doc="Every day a model learns from has trips in raw: a day without a single trip in any zone is a "
                   "month not loaded (or published empty), not a quiet day, and counting it as zeros would teach "
                   "the model that nobody rode"),
        expect("day_rides_near_their_weekday",
               "NOT training OR NOT complete OR rides = 0 OR reference IS NULL "
               f"OR (rides <= {AT_MOST} * reference AND coalesce(hole_hours, 0) < {HOLE_HOURS} "
               f"AND (rides >= {WHOLE} * reference OR coalesce(usual_hours, 0) >= {USUAL_HOURS}))",
               on=("pickup_hour", "ride_count"), severity="error", grain="day",
               doc="A training day is whole against its weekday: at most three times its rides, and at least "
                   "six tenths, or else a quarter of its busy hours as busy as usual; and no two busy hours in a "
                   "row all but empty. A holiday moves rides between hours and keeps the evening's; trips "
                   "missing from a file thin every hour alike or leave hours empty: a day with half its trips "
                   "missing, three of its hours in a row, or counted four times, fails (docs/quality.md)"),
    ),
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
    # checked on the fitted model (its history, one row per zone and hour) before it is used: DuckDB's SQL
    checks=(
        row_count("every_training_hour_learned", "${zones} * ${training_hours}", on=("history_hour",),
                  doc="Every zone the model learned has every hour of the training window (its actuals are "
                      "zero-filled): an hour missing there, in the actuals it read, would be forecast as zero"),
        expect("wet_factor_plausible", "wet_factor BETWEEN 0.5 AND 2", on=("wet_factor",),
               doc="weather_adjusted: rain changes demand by less than half or double (NULL: the model has no factor)"),
    ),
)
YELLOW_RIDES_HOURLY_FORECAST = Table(
    name="yellow_rides_hourly_forecast",
    description="Forecast yellow taxi pickups per zone and New York local hour, every model's and origin's kept",
    layer="mart",
    columns=(
        Column("pickup_location_id", "INT", "TLC taxi zone of pickup", nullable=False, categorical=True),
        Column("forecast_hour", "TIMESTAMP_NTZ", "Start of the forecast New York local hour", nullable=False),
        Column("predicted_ride_count", "DOUBLE", "Forecast trips in that zone and hour", nullable=False),
        Column("model_name", "STRING", "Model that produced the forecast", nullable=False, categorical=True),
        Column("model_version", "STRING", "Model version (Metaflow run pathspec of the training step)", nullable=False),
        Column("as_of_datetime", "TIMESTAMP_NTZ", "Forecast origin: last hour of data the model could see", nullable=False),
        Column("created_at", "TIMESTAMP", "When the forecast was written (UTC instant)", nullable=False),
        Column("lookback_days", "INT", "Days of actuals the model was trained on (NULL: written before they were "
               "recorded)"),
    ),
    partitioned_by=("months(forecast_hour)",),
    # A forecast per model and origin: a run replaces its own model's and origin's rows, and only those.
    # "The forecast for this hour" is the latest origin's of a chosen model (forecast/sql/latest_forecasts.sql).
    primary_key=("model_name", "as_of_datetime", "pickup_location_id", "forecast_hour"),
    # Checked on the run's forecasts before they are written (grain "forecast", one row: `predicted`, the
    # forecast rides of the horizon's first week at most; `week_before`, the rides the actuals table holds for
    # the same hours a week earlier, read when the forecasts are written): forecasts that fail are not committed.
    checks=(
        expect("forecast_near_the_week_before",
               "week_before > 0 AND predicted BETWEEN 0.25 * week_before AND 4 * week_before",
               on=("predicted_ride_count",), severity="error", grain="forecast",
               doc="A forecast's rides are within a quarter and four times the rides of the same hours a week "
                   "before, as the actuals table holds them: a forecast of zeros, or from a week with no rides, "
                   "is not written"),
    ),
)

YELLOW_RIDES_FORECAST_SCORES = Table(
    name="yellow_rides_forecast_scores",
    description="Every kept forecast scored against the actual rides of its hours, per model and origin",
    layer="mart",
    columns=(
        Column("model_name", "STRING", "Model that produced the forecast", nullable=False, categorical=True),
        Column("as_of_datetime", "TIMESTAMP_NTZ", "The forecast's origin", nullable=False),
        Column("model_version", "STRING", "The forecast's model version (Metaflow pathspec of its training step)",
               nullable=False),
        Column("first_hour", "TIMESTAMP_NTZ", "The forecast's first hour", nullable=False),
        Column("last_hour", "TIMESTAMP_NTZ", "The forecast's last hour", nullable=False),
        Column("forecast_zone_hours", "BIGINT", "Zone-hours the forecast holds", nullable=False),
        Column("scored_zone_hours", "BIGINT", "Of those, the ones whose hour the actuals hold (a zone without a "
               "row in such an hour had no pickup: 0 rides)", nullable=False),
        Column("coverage", "DOUBLE", "scored_zone_hours / forecast_zone_hours: 1 once every hour has happened and "
               "is loaded", nullable=False),
        Column("actual_rides", "BIGINT", "Rides in the scored zone-hours", nullable=False),
        Column("predicted_rides", "DOUBLE", "Forecast rides in the scored zone-hours", nullable=False),
        Column("mae", "DOUBLE", "Mean absolute error per scored zone-hour, in rides", nullable=False),
        Column("wape", "DOUBLE", "Sum of absolute errors / actual rides (NULL when no ride happened)"),
        Column("bias", "DOUBLE", "Mean of forecast minus actual per scored zone-hour: above 0, too many rides "
               "forecast", nullable=False),
        Column("forecast_snapshot_id", "BIGINT", "The forecast table's snapshot the score was computed from",
               nullable=False),
        Column("actuals_snapshot_id", "BIGINT", "The actuals table's snapshot the score was computed from",
               nullable=False),
        Column("scored_at", "TIMESTAMP", "When the step that scored it read the forecast and actuals versions "
               "(UTC instant): a score is replaced only by one read later", nullable=False),
        Column("lookback_days", "INT", "Days of actuals the forecast's model was trained on: two scores compare "
               "like with like only at the same lookback (NULL: not recorded)"),
        Column("zone_set", "STRING", "The zones the forecast holds, as a SHA-256 of their sorted ids: two scores "
               "compare like with like only over the same zones"),
    ),
    primary_key=("model_name", "as_of_datetime"),
    # Checked on every score a run computes, before they are written; warnings: a score is kept as computed.
    checks=(
        expect("horizon_happened", "coverage = 1", on=("coverage",),
               doc="Every hour of the forecast has happened and its trips are loaded: once the rest are loaded, the "
                   "run that made the forecast is stale, and its re-run (or any run whose window counts them) scores "
                   "it whole"),
        expect("rides_near_what_happened", "predicted_rides BETWEEN 0.5 * actual_rides AND 2 * actual_rides",
               on=("predicted_rides", "actual_rides"),
               doc="The forecast's rides over the hours scored are within half and twice the rides that happened: "
                   "farther, the week it learned from or the hours it forecast are not what they were (a holiday, "
                   "a month republished after the forecast was made)"),
    ),
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
        YELLOW_RIDES_FORECAST_SCORES,
    )
}
PUBLISHED: dict[str, PublishedFiles] = {
    p.name: p for p in (TLC_YELLOW_TRIPDATA_PUBLISHED, NOAA_NCLIMGRID_DAILY_COUNTY_PUBLISHED)
}
LANDED: dict[str, LandedFiles] = {f.name: f for f in (TLC_YELLOW_TRIPDATA_LANDED, NOAA_NCLIMGRID_DAILY_COUNTY_LANDED)}
MODELS: dict[str, Model] = {m.name: m for m in (YELLOW_RIDES_FORECAST_MODEL,)}
DATASETS: dict[str, Dataset] = {**PUBLISHED, **LANDED, **TABLES, **MODELS}
