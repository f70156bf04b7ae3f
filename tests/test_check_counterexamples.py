"""Every check declared in core/datasets.py fails on a counterexample: a small batch that violates it goes
through the real writer — the stage, the merge, `compute_actuals`, the training step, `write_forecasts` — and
the check fails; for an error check, the version is refused and nothing is published (the merge into raw, a
commit of the actuals or the forecasts, a model used). A check no input can make fail proves nothing: the
fast lane refuses a declared check without a counterexample here.

One batch per dataset violates each of its checks at once (each check counts its own rows, so each result
is its own); the batch's rows are named where it is built."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nyc_taxi.core import datasets as d
from nyc_taxi.core.datasets import DATASETS

# (dataset, check) -> the input that makes it fail, and what the check then says (written here, not read from
# the declaration: an error check turned into a warning fails this)
COUNTEREXAMPLES = {
    (d.YELLOW_TAXI_STAGING.name, "rows_as_landed"): (
        "the landed file has five trips more than its download counted",
        "fail",
    ),
    (d.YELLOW_TAXI_STAGING.name, "pickup_present"): ("2 % of the trips without a pickup time", "fail"),
    (d.YELLOW_TAXI_STAGING.name, "dropoff_present"): ("2 % without a drop-off time", "fail"),
    (d.YELLOW_TAXI_STAGING.name, "pickup_zone_present"): ("2 % without a pickup zone", "fail"),
    (d.YELLOW_TAXI_STAGING.name, "pickup_in_month"): ("2 % more picked up a year before the month", "fail"),
    (d.YELLOW_TAXI_STAGING.name, "trip_not_repeated"): (
        "2 % of the rows copies of others (vendor, times and zones)",
        "fail",
    ),
    (d.YELLOW_TAXI_STAGING.name, "dropoff_after_pickup"): ("five trips dropped off before they were picked up", "warn"),
    (d.YELLOW_TAXI_STAGING.name, "trip_within_3_hours"): ("five trips of four hours", "warn"),
    (d.YELLOW_TAXI_STAGING.name, "total_positive"): ("five negative totals", "warn"),
    (d.YELLOW_TAXI_STAGING.name, "fare_and_distance_plausible"): ("a fare of 50,000", "warn"),
    (d.YELLOW_TAXI_STAGING.name, "not_flex_fare"): ("five flex fares", "warn"),
    (d.YELLOW_TAXI_STAGING.name, "pickup_zone_known"): ("2 % of the pickups in zone 300", "fail"),
    (d.YELLOW_TAXI_STAGING.name, "vendor_known"): ("five trips of vendor 9", "warn"),
    (d.YELLOW_TAXI_RAW.name, "month_rows_as_staged"): (
        "another writer appended the month again, then it is republished",
        "fail",
    ),
    (d.WEATHER_STAGING.name, "every_county_day"): ("Queens without day 5", "fail"),
    (d.WEATHER_STAGING.name, "date_in_month"): ("the Bronx's rows dated a year earlier", "fail"),
    (d.WEATHER_STAGING.name, "values_present"): ("Kings without its maximum temperature on three days", "fail"),
    (d.WEATHER_STAGING.name, "prcp_not_negative"): ("Manhattan's rain negative on day 7", "fail"),
    (d.WEATHER_STAGING.name, "tavg_between_tmin_and_tmax"): ("Richmond's average above its maximum on day 9", "warn"),
    (d.YELLOW_RIDES_HOURLY_ACTUALS.name, "training_days_have_rides"): ("a window reaching a month not loaded", "fail"),
    (d.YELLOW_RIDES_HOURLY_ACTUALS.name, "day_rides_near_their_weekday"): (
        "a day with half its trips missing, and a day with seven in ten missing",
        "fail",
    ),
    (d.YELLOW_RIDES_FORECAST_MODEL.name, "every_training_hour_learned"): (
        "the actuals of its window recounted by another run meanwhile, with other zones",
        "fail",
    ),
    (d.YELLOW_RIDES_FORECAST_MODEL.name, "wet_factor_plausible"): ("three times the rides on wet days", "warn"),
    (d.YELLOW_RIDES_HOURLY_FORECAST.name, "forecast_near_the_week_before"): (
        "the week before the origin republished without most of its trips while the flow ran",
        "fail",
    ),
    (d.YELLOW_RIDES_FORECAST_SCORES.name, "horizon_happened"): ("a horizon that runs into a month not loaded", "warn"),
    (d.YELLOW_RIDES_FORECAST_SCORES.name, "rides_near_what_happened"): (
        "the forecast day republished as a holiday: one in ten of its daytime trips, its night's as they were",
        "warn",
    ),
}
CASES = sorted(COUNTEREXAMPLES)


def _checks_of(*datasets: d.Dataset) -> set[str]:
    """The checks of these datasets that have a counterexample here."""
    return {check for dataset, check in CASES if dataset in {x.name for x in datasets}}


def test_every_declared_check_has_a_counterexample():
    declared = {(dataset.name, check.name) for dataset in DATASETS.values() for check in getattr(dataset, "checks", ())}
    assert declared - set(COUNTEREXAMPLES) == set(), "a declared check with no input that makes it fail"
    assert set(COUNTEREXAMPLES) - declared == set(), "a counterexample of a check no longer declared"


# ---- the batches, each through its writer ------------------------------------------------------------------------

TAXI_MONTH = (2011, 1)
N = 1_000


def _taxi_counterexample(site) -> pa.Table:
    """A month of trips violating every check of the staging table: each kind of bad row in its own range."""
    from nyc_taxi_proving.fixtures import tlc

    trips = tlc.generate_yellow_month(*TAXI_MONTH, rows=N, seed=11)
    columns = {name: trips[name].to_pylist() for name in trips.column_names}
    pickup, dropoff = columns["tpep_pickup_datetime"], columns["tpep_dropoff_datetime"]
    for row in range(0, 20):
        pickup[row] = None
    for row in range(20, 40):
        dropoff[row] = None
    for row in range(40, 60):
        columns["PULocationID"][row] = None
    for row in range(60, 80):  # a year early: out of the month, with the generator's own strays beside them
        pickup[row], dropoff[row] = pickup[row] - dt.timedelta(days=365), dropoff[row] - dt.timedelta(days=365)
    for row in range(80, 100):  # exact copies of rows 100-119
        for name in columns:
            columns[name][row] = columns[name][row + 20]
    for row in range(120, 125):
        dropoff[row] = pickup[row] - dt.timedelta(minutes=5)
    for row in range(125, 130):
        dropoff[row] = pickup[row] + dt.timedelta(hours=4)
    for row in range(130, 135):
        columns["total_amount"][row] = -1.0
    columns["fare_amount"][135] = 50_000.0
    for row in range(136, 141):
        columns["payment_type"][row] = 0
    for row in range(141, 161):
        columns["PULocationID"][row] = 300
    for row in range(161, 166):
        columns["VendorID"][row] = 9
    return pa.table({name: pa.array(values, trips.schema.field(name).type) for name, values in columns.items()})


@pytest.fixture(scope="module")
def taxi_batch(spark, site):
    """The counterexample month through the stage (its checks) and the merge (refused): (the checks, the
    refusal, raw's snapshot before and after)."""
    from nyc_taxi.core.catalog import current_snapshot_id
    from nyc_taxi.core.lakehouse import lakehouse
    from nyc_taxi.core.naming import landed_location
    from nyc_taxi.core.quality import ChecksFailed
    from nyc_taxi.core.tables import ensure_tables
    from nyc_taxi.ingest import taxi
    from nyc_taxi_proving.fixtures import tlc
    from nyc_taxi_proving.fixtures.site import taxi_path

    ensure_tables([d.YELLOW_TAXI_STAGING, d.YELLOW_TAXI_RAW])
    trips = _taxi_counterexample(site)
    tlc.write_yellow_month(trips, taxi_path(site, *TAXI_MONTH))
    taxi.download_published_file(*TAXI_MONTH)
    # the landed file replaced after its download counted its trips: five more than it recorded
    with lakehouse().local_copy(landed_location(d.TLC_YELLOW_TRIPDATA_LANDED, *TAXI_MONTH)) as landed:
        pq.write_table(pa.concat_tables([trips, trips.slice(200, 5)]), landed)
    staged = taxi.stage_landed_file(*TAXI_MONTH)
    before = current_snapshot_id(d.YELLOW_TAXI_RAW)
    with pytest.raises(ChecksFailed) as refused:
        taxi.merge_into_raw(*TAXI_MONTH)
    return {r.check: r for r in staged.outputs[0].checks}, refused.value, before, current_snapshot_id(d.YELLOW_TAXI_RAW)


WEATHER_MONTH = (2011, 1)


def _set(lines: list[str], county: str, days: range, value: str | None = None, field: int | None = None) -> None:
    """In one variable's file: ``county``'s ``days`` set to ``value`` (or its field ``field`` set)."""
    for i, line in enumerate(lines):
        fields = line.split(",")
        if fields[1] == county:
            if field is not None:
                fields[field] = value
            else:
                for day in days:
                    fields[5 + day] = f"{float(value):9.2f}"
            lines[i] = ",".join(fields)


@pytest.fixture(scope="module")
def weather_batch(spark, site):
    """The counterexample month's four files through the stage and the merge (refused)."""
    from nyc_taxi.core.catalog import current_snapshot_id
    from nyc_taxi.core.quality import ChecksFailed
    from nyc_taxi.core.tables import ensure_tables
    from nyc_taxi.ingest import weather
    from nyc_taxi_proving.fixtures.site import add_weather_month

    ensure_tables([d.WEATHER_STAGING, d.WEATHER_RAW])
    for path in add_weather_month(site, *WEATHER_MONTH, seed=11):
        lines = path.read_text().split("\n")
        variable = path.name.split("-")[0]
        for var in ("prcp", "tavg", "tmax", "tmin"):
            if variable == var:
                _set(lines, "30081", range(5, 6), "-999.99")  # Queens: day 5 missing in every variable
        _set(lines, "30005", range(0), str(WEATHER_MONTH[0] - 1), field=3)  # the Bronx's rows: a year early
        if variable == "tmax":
            _set(lines, "30047", range(1, 4), "-999.99")  # Kings: no maximum on days 1-3
        if variable == "prcp":
            _set(lines, "30061", range(7, 8), "-1")  # Manhattan: negative rain
        if variable == "tavg":
            _set(lines, "30085", range(9, 10), "60")  # Richmond: an average above any maximum
        path.write_bytes("\n".join(lines).encode())
    weather.download_published_files(*WEATHER_MONTH)
    staged = weather.stage_landed_files(*WEATHER_MONTH)
    before = current_snapshot_id(d.WEATHER_RAW)
    with pytest.raises(ChecksFailed) as refused:
        weather.merge_into_raw(*WEATHER_MONTH)
    return {r.check: r for r in staged.outputs[0].checks}, refused.value, before, current_snapshot_id(d.WEATHER_RAW)


def _load_taxi(year: int, month: int):
    from nyc_taxi.ingest import taxi

    taxi.download_published_file(year, month)
    taxi.stage_landed_file(year, month)
    return taxi.merge_into_raw(year, month)


@pytest.fixture(scope="module")
def raw_batches(spark, site, settings):
    """Raw's own check, after the commit. A new taxi month, on the path that writes its rows (a staging table
    of an older shape, whose files cannot join raw as they are): between the merge's decision that raw lacks
    the month and its write, another writer appends the same month (a second load of it at once; the path
    that appends staging's files refuses a base that moved, and a MERGE another writer's rows). (a good
    month's report, the merge's refusal, the flow's refusal of raw then, the flow's report after raw's
    rollback)"""
    import dataclasses

    from nyc_taxi.core.catalog import load_catalog, load_table
    from nyc_taxi.core.naming import iceberg_identifier, spark_table
    from nyc_taxi.core.quality import ChecksFailed
    from nyc_taxi.core.tables import ensure_tables, pinned
    from nyc_taxi.forecast import steps
    from nyc_taxi.ingest import taxi
    from nyc_taxi_proving.fixtures.site import add_taxi_month

    ensure_tables([d.YELLOW_TAXI_STAGING, d.YELLOW_TAXI_RAW])
    add_taxi_month(site, 2011, 2, rows=2_000, seed=12)
    first = _load_taxi(2011, 2)

    add_taxi_month(site, 2011, 3, rows=2_000, seed=13)
    catalog = load_catalog(settings)
    older = dataclasses.replace(d.YELLOW_TAXI_STAGING, partitioned_by=(), properties={})
    catalog.drop_table(iceberg_identifier(d.YELLOW_TAXI_STAGING, settings))
    ensure_tables([older])
    real_append = taxi.append_staged_files

    def another_writer_first(session, staging, snapshot_id, *rest):
        staged = pinned(staging, load_table(staging).snapshot_by_id(snapshot_id))
        session.sql(f"INSERT INTO {spark_table(d.YELLOW_TAXI_RAW)} SELECT * FROM {staged}")
        return real_append(session, staging, snapshot_id, *rest)

    taxi.append_staged_files = another_writer_first
    good = load_table(d.YELLOW_TAXI_RAW).current_snapshot().snapshot_id
    try:
        with pytest.raises(ChecksFailed) as taxi_refused:
            _load_taxi(2011, 3)
    finally:
        taxi.append_staged_files = real_append
        catalog.drop_table(iceberg_identifier(d.YELLOW_TAXI_STAGING, settings))
        ensure_tables([d.YELLOW_TAXI_STAGING])
    # the flow refuses the snapshot that holds the doubled month; rolled back as the message says, raw is
    # read again (and the module's later cases start from raw without it)
    with pytest.raises(ChecksFailed) as flow_refused:
        steps.compute_actuals(dt.datetime(2011, 3, 20), 14, 24)
    february = steps.compute_actuals(dt.datetime(2011, 2, 20), 14, 24)  # a window without March: counted
    spark.sql(f"CALL {spark_table(d.YELLOW_TAXI_RAW).split('.')[0]}.system.rollback_to_snapshot("
              f"'{iceberg_identifier(d.YELLOW_TAXI_RAW, settings)}', {good})")  # fmt: skip
    read_again = steps.compute_actuals(dt.datetime(2011, 3, 1), 14, 24)
    return first, taxi_refused.value, flow_refused.value, february, read_again


def _window_loaded(site, months, rows=4_000):
    for year, month in months:
        from nyc_taxi_proving.fixtures.site import add_taxi_month

        add_taxi_month(site, year, month, rows=rows, seed=month)
        _load_taxi(year, month)


@pytest.fixture(scope="module")
def actuals_batches(spark, site):
    """The actuals' checks through compute_actuals: 2011-05 loaded, a forecast from mid-June (its window
    reaches June, not loaded), and June loaded with its 10th missing half its trips and its 11th seven in
    ten, every hour alike (trips lost from a file)."""
    from nyc_taxi.core.catalog import current_snapshot_id
    from nyc_taxi.core.quality import ChecksFailed
    from nyc_taxi.core.tables import ensure_tables
    from nyc_taxi.forecast import steps
    from nyc_taxi_proving.fixtures import tlc
    from nyc_taxi_proving.fixtures.site import taxi_path

    ensure_tables([d.YELLOW_TAXI_STAGING, d.YELLOW_TAXI_RAW, d.YELLOW_RIDES_HOURLY_ACTUALS])
    _window_loaded(site, [(2011, 5)])
    before = current_snapshot_id(d.YELLOW_RIDES_HOURLY_ACTUALS)
    with pytest.raises(ChecksFailed) as missing:
        steps.compute_actuals(dt.datetime(2011, 6, 15), 28, 24)
    unchanged = current_snapshot_id(d.YELLOW_RIDES_HOURLY_ACTUALS) == before

    trips = tlc.generate_yellow_month(2011, 6, rows=20_000, seed=6)  # a day's hours in tens of trips
    pickups = trips["tpep_pickup_datetime"].to_pylist()
    lost = {dt.date(2011, 6, 10): 5, dt.date(2011, 6, 11): 7}  # of every ten trips of the day
    keep = [p is None or p.date() not in lost or i % 10 >= lost[p.date()] for i, p in enumerate(pickups)]
    tlc.write_yellow_month(trips.filter(pa.array(keep)), taxi_path(site, 2011, 6))
    _load_taxi(2011, 6)
    with pytest.raises(ChecksFailed) as thin:
        steps.compute_actuals(dt.datetime(2011, 6, 20), 14, 24)
    return missing.value, thin.value, unchanged and current_snapshot_id(d.YELLOW_RIDES_HOURLY_ACTUALS) == before


def _training(as_of: dt.datetime, rides, days: int = 14):
    """Training rows of two zones, ``rides(zone, hour)`` each, the ``days`` before as_of."""
    from nyc_taxi.forecast import model as models
    from nyc_taxi.forecast.training import TrainingData
    from nyc_taxi.lineage.write.report import DatasetUse, StepReport

    start = as_of - dt.timedelta(days=days)
    hours = [start + dt.timedelta(hours=h) for h in range(days * 24)]
    rows = {(zone, hour): rides(zone, hour) for zone in (1, 2) for hour in hours}
    actuals = DatasetUse(d.YELLOW_RIDES_HOURLY_ACTUALS, "41")
    return rows, lambda kept: TrainingData(
        models.training_table(kept), report=StepReport(inputs=[actuals]), as_of=as_of, start=start
    )


# ---- each check fails on its counterexample ----------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("case", [c for c in CASES if c[0] == d.YELLOW_TAXI_STAGING.name], ids=lambda c: c[1])
def test_a_taxi_month_that_violates_a_check_fails_it_and_an_error_is_refused_before_raw(taxi_batch, case):
    results, refused, before, after = taxi_batch
    result = results[case[1]]
    assert result.status == COUNTEREXAMPLES[case][1], result
    if result.status == "fail":
        assert f"{case[1]} (error)" in str(refused) and "yellow_taxi_raw was not changed" in str(refused)
        assert after == before


@pytest.mark.spark
@pytest.mark.parametrize("case", [c for c in CASES if c[0] == d.WEATHER_STAGING.name], ids=lambda c: c[1])
def test_a_weather_month_that_violates_a_check_fails_it_and_an_error_is_refused_before_raw(weather_batch, case):
    results, refused, before, after = weather_batch
    result = results[case[1]]
    assert result.status == COUNTEREXAMPLES[case][1], result
    if result.status == "fail":
        assert f"{case[1]} (error)" in str(refused) and "weather_raw was not changed" in str(refused)
        assert after == before


@pytest.mark.spark
def test_raws_own_check_fails_on_a_month_another_writer_appended_and_the_merge_says_how_to_roll_back(raw_batches):
    first, refused, flow_refused, february, read_again = raw_batches
    [passed] = first.outputs[0].checks
    assert (passed.check, passed.status, passed.rows, passed.expected) == ("month_rows_as_staged", "pass", 2_000, 2_000)
    [failed] = [r for r in refused.results if r.stops]
    assert (failed.check, failed.rows, failed.expected) == ("month_rows_as_staged", 4_000, 2_000)
    assert {failed.check} == _checks_of(d.YELLOW_TAXI_RAW, d.WEATHER_RAW)
    assert "the commit stands" in str(refused) and "rollback_to_snapshot" in str(refused)
    # the flow does not count the doubled month: refused, naming the snapshot that failed; after the
    # rollback the message names, raw is read again
    message = str(flow_refused)
    assert message.startswith("yellow_taxi_raw snapshot") and "month_rows_as_staged (error)" in message, message
    assert f"failed on yellow_taxi_raw snapshot {failed.version}" in message and "rollback_to_snapshot" in message
    assert february.outputs[0].committed and read_again.outputs[0].committed


@pytest.mark.spark
def test_a_window_reaching_a_month_not_loaded_or_a_thin_day_is_refused_naming_the_days_and_the_month(actuals_batches):
    missing, thin, unchanged = actuals_batches
    failed = {r.check: r for r in missing.results if r.stops}
    # June's days before the origin have no trip, but for the 5th: one of May's stray pickups (a month file
    # carries a few, one 35 days on), a day far thinner than its weekday
    assert failed["training_days_have_rides"].failing == 13, str(missing)
    message = str(missing)
    assert "no trips on 2011-06-01 – 2011-06-04, 2011-06-06 – 2011-06-14" in message, message
    assert 'Load 2011-06 with the ingest_yellow_taxi_data DAG ({"month": "2011-06"})' in message, message
    failed = {r.check: r for r in thin.results if r.stops}
    assert set(failed) == {"day_rides_near_their_weekday"} and failed["day_rides_near_their_weekday"].failing == 2
    assert "day=2011-06-10" in str(thin) and "day=2011-06-11" in str(thin), str(thin)
    assert unchanged
    assert {r.check for e in (missing, thin) for r in e.results if r.stops} == _checks_of(d.YELLOW_RIDES_HOURLY_ACTUALS)


@pytest.mark.spark
def test_a_model_whose_actuals_another_run_recounted_meanwhile_is_refused_and_an_implausible_wet_factor_warned_of(
    actuals_batches,
):
    """Two training runs at once over May: run A counts its window (May 8 – 22), run B its own (May 19 – 27)
    before A reads its training rows. B's window's rows become B's zero-filled counts, and a zone with rides
    only before the 19th has no row in B's days: A learns that zone without its last days, and the model is
    refused (its zones times its window's hours, not the rows it got). A model fitted on wet days three times
    as busy as dry ones is warned of."""
    import pyarrow.compute as pc

    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.core.quality import ChecksFailed
    from nyc_taxi.forecast import steps

    a, b = dt.datetime(2011, 5, 22), dt.datetime(2011, 5, 27)
    steps.compute_actuals(a, 14, 24)
    steps.compute_actuals(b, 8, 24)
    data = steps.training_data(a, 14, 24, "seasonal_naive")
    rows = load_table(d.YELLOW_RIDES_HOURLY_ACTUALS).scan(row_filter="pickup_hour >= '2011-05-08T00:00:00'").to_arrow()
    early = set(
        pc.unique(
            rows.filter(pc.less(rows["pickup_hour"], pa.scalar(dt.datetime(2011, 5, 19), rows["pickup_hour"].type)))[
                "pickup_location_id"
            ]
        ).to_pylist()
    )
    late = set(
        pc.unique(
            rows.filter(
                pc.greater_equal(rows["pickup_hour"], pa.scalar(dt.datetime(2011, 5, 19), rows["pickup_hour"].type))
            )["pickup_location_id"]
        ).to_pylist()
    )
    assert early - late, "a zone with rides only before B's window"
    with pytest.raises(ChecksFailed) as refused:
        steps.train(data, "seasonal_naive", "TrainForecastModelFlow/1/train_forecasting_model/2")
    [failed] = [r for r in refused.value.results if r.stops]
    assert (failed.check, failed.expected) == ("every_training_hour_learned", failed.rows + failed.failing)
    assert failed.failing > 0 and "no forecast is made from it" in str(refused.value)

    as_of = dt.datetime(2024, 2, 15)
    rows, read = _training(as_of, lambda zone, hour: 3)
    wet = {day: 5.0 if day.day % 3 == 0 else 0.0 for day in {h.date() for _, h in rows}}
    rows, read = _training(as_of, lambda zone, hour: 9 if wet[hour.date()] else 3)
    busy = read(rows)
    busy.daily_prcp_mm = wet
    trained = steps.train(busy, "weather_adjusted", "TrainForecastModelFlow/1/train_forecasting_model/4")
    [plausible] = [r for r in trained.report.outputs[0].checks if r.check == "wet_factor_plausible"]
    assert plausible.status == "warn" and plausible.failing == plausible.rows
    assert {failed.check, plausible.check} == _checks_of(d.YELLOW_RIDES_FORECAST_MODEL)


@pytest.mark.spark
def test_a_forecast_from_a_week_the_source_has_since_withdrawn_is_not_written(actuals_batches, site, settings):
    """A flow forecasts from May 20; while it runs, the TLC republishes May without nine in ten trips of the
    13th (the day a week before the origin), and another run, forecasting from the 13th, no longer counts
    that day (a day with a tenth of its trips is not loaded: its rows leave the actuals). The forecast's
    rides are then against a week before with none: refused, nothing committed."""
    from nyc_taxi.core.catalog import current_snapshot_id
    from nyc_taxi.core.quality import ChecksFailed
    from nyc_taxi.forecast import steps
    from nyc_taxi_proving.fixtures import tlc
    from nyc_taxi_proving.fixtures.site import taxi_path

    as_of = dt.datetime(2011, 5, 20)
    steps.compute_actuals(as_of, 14, 24)
    data = steps.training_data(as_of, 14, 24, "seasonal_naive")
    trained = steps.train(data, "seasonal_naive", "TrainForecastModelFlow/2/train_forecasting_model/3")
    forecasts = steps.predict(trained, data, as_of, 24)

    trips = tlc.generate_yellow_month(2011, 5, rows=4_000, seed=5)  # May as loaded, then republished:
    pickups = trips["tpep_pickup_datetime"].to_pylist()
    keep = [p is None or p.date() != dt.date(2011, 5, 13) or i % 10 == 0 for i, p in enumerate(pickups)]
    tlc.write_yellow_month(trips.filter(pa.array(keep)), taxi_path(site, 2011, 5))
    _load_taxi(2011, 5)
    steps.compute_actuals(dt.datetime(2011, 5, 13), 7, 24)  # its horizon: the 13th, no longer held

    before = current_snapshot_id(d.YELLOW_RIDES_HOURLY_FORECAST)
    with pytest.raises(ChecksFailed) as refused:
        steps.write_forecasts(forecasts, settings)
    [failed] = [r for r in refused.value.results if r.stops]
    assert failed.check == "forecast_near_the_week_before" and "week_before=0" in str(refused.value)
    assert "nothing was committed" in str(refused.value)
    assert current_snapshot_id(d.YELLOW_RIDES_HOURLY_FORECAST) == before
    assert {failed.check} == _checks_of(d.YELLOW_RIDES_HOURLY_FORECAST)


@pytest.mark.spark
def test_a_score_over_part_of_its_hours_or_far_from_what_happened_is_warned_of(spark, site, settings):
    """August 2011 loaded; a forecast from the 15th; the TLC republishes August with the 15th as a holiday is
    (one in ten of its daytime trips, 06:00 to 18:59, its evening's and night's as they were: a whole day,
    by its usual hours); then a forecast from the 29th whose five days run into September, not loaded. Scoring both: the
    first forecast's rides are over twice what happened on the 15th, and the second is scored over three of
    its five days."""
    from nyc_taxi.core.tables import ensure_tables
    from nyc_taxi.forecast import steps
    from nyc_taxi_proving.fixtures import tlc
    from nyc_taxi_proving.fixtures.site import taxi_path

    ensure_tables()
    # a day's hours in some tens of trips: its usual hours tell, and a tenth of them is no hole by chance (at
    # 20,000 trips, two daytime hours of the 15th fall under 5 % of theirs and the day is judged not whole)
    _window_loaded(site, [(2011, 8)], rows=60_000)

    def forecast(as_of: dt.datetime, horizon: int, run: int) -> None:
        steps.compute_actuals(as_of, 14, horizon)
        data = steps.training_data(as_of, 14, horizon, "seasonal_naive")
        trained = steps.train(data, "seasonal_naive", f"TrainForecastModelFlow/{run}/train_forecasting_model/3")
        steps.write_forecasts(steps.predict(trained, data, as_of, horizon), settings)

    forecast(dt.datetime(2011, 8, 15), 24, 81)
    trips = tlc.generate_yellow_month(2011, 8, rows=60_000, seed=8)  # August as loaded, then republished:
    pickups = trips["tpep_pickup_datetime"].to_pylist()
    daytime = range(6, 19)
    keep = [
        p is None or p.date() != dt.date(2011, 8, 15) or p.hour not in daytime or i % 10 == 0
        for i, p in enumerate(pickups)
    ]
    tlc.write_yellow_month(trips.filter(pa.array(keep)), taxi_path(site, 2011, 8))
    _load_taxi(2011, 8)
    forecast(dt.datetime(2011, 8, 29), 120, 82)

    scores = steps.score_forecasts(settings)
    ours = {r["as_of_datetime"].day: r for r in scores.rows if r["as_of_datetime"].year == 2011}
    assert ours[15]["coverage"] == 1 and ours[15]["predicted_rides"] > 2 * ours[15]["actual_rides"], ours[15]
    assert ours[29]["coverage"] == pytest.approx(3 / 5), ours[29]
    assert 0.5 * ours[29]["actual_rides"] <= ours[29]["predicted_rides"] <= 2 * ours[29]["actual_rides"], ours[29]
    checks = {r.check: r for r in scores.report.outputs[0].checks}
    for name in ("horizon_happened", "rides_near_what_happened"):
        assert checks[name].status == COUNTEREXAMPLES[(d.YELLOW_RIDES_FORECAST_SCORES.name, name)][1], checks[name]
        assert checks[name].failing >= 1
    assert set(checks) == _checks_of(d.YELLOW_RIDES_FORECAST_SCORES)


def test_a_day_is_judged_whole_by_its_hours_as_docs_quality_says():
    """The table of docs/quality.md, computed: a fixture month's day, as generated, thinned every hour alike,
    and shaped as a holiday is (its daytime trips few, its night's as they were), against its weekday in a
    28-day window. No JVM: the window's hourly rides as the actuals count them, judged by ``WindowDays``."""
    import collections

    import pyarrow.compute as pc

    from nyc_taxi.core import quality
    from nyc_taxi.forecast.window import Window, WindowDays
    from nyc_taxi_proving.fixtures import tlc

    trips = tlc.generate_yellow_month(2024, 2, rows=200_000, seed=2)
    pickups, zones = trips["tpep_pickup_datetime"].to_pylist(), trips["PULocationID"].to_pylist()
    day, window = dt.date(2024, 2, 22), Window.of(dt.datetime(2024, 2, 29), 28, 24)

    def judged(keep, times: int = 1) -> tuple[float, float, bool]:
        hourly = collections.Counter(
            p.replace(minute=0, second=0, microsecond=0)
            for i, (p, z) in enumerate(zip(pickups, zones, strict=True))
            if p is not None and z is not None and 1 <= z <= 265 and (p.date() != day or keep(i, p))
            for _ in range(times if p.date() == day else 1)
        )
        days = WindowDays(window, {h: n for h, n in hourly.items() if window.start <= h < window.end})
        rows = days.rows()
        [row] = [r for r in rows.to_pylist() if r["day"] == day]
        # the actuals' check, its SQL over the day's row as compute_actuals runs it, judges it as the rule does
        [check] = [c for c in d.YELLOW_RIDES_HOURLY_ACTUALS.checks if c.name == "day_rides_near_their_weekday"]
        alone = rows.filter(pc.equal(rows["day"], pa.scalar(day, pa.date32())))
        [result] = quality.judge(
            "actuals", [check], quality.count_arrow(alone, quality.aggregates([check], {})), None, {}
        )
        assert result.passed == days.whole(day), (row, result)
        return round(row["rides"] / row["reference"], 2), round(row["usual_hours"], 2), days.whole(day)

    daytime = range(7, 18)
    assert judged(lambda i, p: True) == (1.0, 1.0, True)
    assert judged(lambda i, p: i % 10 >= 5) == (0.5, 0.0, False)  # half its trips missing
    assert judged(lambda i, p: i % 10 >= 7) == (0.3, 0.0, False)  # seven in ten
    assert judged(lambda i, p: i % 10 < 4) == (0.4, 0.0, False)  # four in ten kept
    assert judged(lambda i, p: p.hour not in daytime or i % 10 == 0) == (0.5, 0.39, True)  # a holiday's shape
    assert judged(lambda i, p: p.hour not in daytime or i % 10 < 3) == (0.61, 0.39, True)
    assert judged(lambda i, p: p.hour not in (10, 11, 12)) == (0.85, 0.83, False)  # three hours lost: a hole
    assert judged(lambda i, p: p.hour != 11) == (0.95, 0.94, True)  # one hour lost: no hole
    assert judged(lambda i, p: True, times=4) == (3.98, 1.0, False)  # counted four times


def test_an_hour_empty_by_chance_makes_no_hole_and_one_emptied_does():
    """Two busy hours in a row with no trip: in a month of a few trips an hour (4 on its weekday: chance, as a
    small fixture month's day met), the day is whole; with 40 trips an hour on its weekday, it has a hole."""
    from nyc_taxi.forecast.window import Window, WindowDays

    window, day = Window.of(dt.datetime(2024, 2, 29), 28, 24), dt.date(2024, 2, 22)

    def judged(per_hour: int) -> tuple[int, bool]:
        hourly = {
            window.start + dt.timedelta(hours=h): per_hour
            * (2 if 8 <= (window.start + dt.timedelta(hours=h)).hour < 20 else 1)
            for h in range(28 * 24)
        }
        for hour in (10, 11):  # both emptied on the day: busy hours (twice the night's)
            hourly[dt.datetime.combine(day, dt.time(hour))] = 0
        days = WindowDays(window, {h: n for h, n in hourly.items() if n})
        return days.rows().to_pylist()[(day - window.start.date()).days]["hole_hours"], days.whole(day)

    assert judged(2) == (0, True)  # 4 trips an hour on its weekday: no hole (under HOLE_RIDES)
    assert judged(20) == (2, False)  # 40: a hole of two hours


@pytest.mark.spark
def test_a_month_whose_last_ten_days_lost_half_their_trips_is_refused_and_a_holiday_is_counted(spark, site, settings):
    """January 2012 loaded whole but its 16th (Martin Luther King Day), shaped as a holiday is: one in ten
    of its daytime trips, its evening's and night's as they were. February loaded with its last ten days
    (the 20th to the 29th) missing half their trips, every hour alike. A window over the holiday is counted;
    one whose training days reach into the damaged days is refused, naming them; a forecast whose horizon
    runs into them is scored over its whole day only (coverage one half), and warned of."""
    from nyc_taxi.core.catalog import current_snapshot_id
    from nyc_taxi.core.quality import ChecksFailed
    from nyc_taxi.core.tables import ensure_tables
    from nyc_taxi.forecast import steps
    from nyc_taxi_proving.fixtures import tlc
    from nyc_taxi_proving.fixtures.site import taxi_path

    ensure_tables()
    holiday, daytime = dt.date(2012, 1, 16), range(7, 18)
    january = tlc.generate_yellow_month(2012, 1, rows=20_000, seed=21)
    pickups = january["tpep_pickup_datetime"].to_pylist()
    keep = [p is None or p.date() != holiday or p.hour not in daytime or i % 10 == 0 for i, p in enumerate(pickups)]
    tlc.write_yellow_month(january.filter(pa.array(keep)), taxi_path(site, 2012, 1))
    _load_taxi(2012, 1)
    february = tlc.generate_yellow_month(2012, 2, rows=20_000, seed=22)
    pickups = february["tpep_pickup_datetime"].to_pylist()
    keep = [p is None or p.month != 2 or p.day < 20 or i % 2 == 0 for i, p in enumerate(pickups)]
    tlc.write_yellow_month(february.filter(pa.array(keep)), taxi_path(site, 2012, 2))
    _load_taxi(2012, 2)

    counted = steps.compute_actuals(dt.datetime(2012, 1, 30), 28, 24)  # the holiday's week and the weeks around it
    [day_check] = [r for r in counted.outputs[0].checks if r.check == "day_rides_near_their_weekday"]
    assert day_check.status == "pass" and counted.outputs[0].version is not None

    before = current_snapshot_id(d.YELLOW_RIDES_HOURLY_ACTUALS)
    with pytest.raises(ChecksFailed) as refused:
        steps.compute_actuals(dt.datetime(2012, 3, 1), 28, 24)
    [failed] = [r for r in refused.value.results if r.stops]
    assert (failed.check, failed.failing) == ("day_rides_near_their_weekday", 10), str(refused.value)
    assert "day=2012-02-20" in str(refused.value) and current_snapshot_id(d.YELLOW_RIDES_HOURLY_ACTUALS) == before

    # a forecast from the 19th over 48 hours: the 19th is whole, the 20th has half its trips, not a day
    as_of = dt.datetime(2012, 2, 19)
    steps.compute_actuals(as_of, 14, 48)
    data = steps.training_data(as_of, 14, 48, "seasonal_naive")
    trained = steps.train(data, "seasonal_naive", "TrainForecastModelFlow/120/train_forecasting_model/3")
    steps.write_forecasts(steps.predict(trained, data, as_of, 48), settings)
    scores = steps.score_forecasts(settings)
    [score] = [r for r in scores.rows if r["as_of_datetime"] == as_of]
    assert score["coverage"] == pytest.approx(1 / 2) and score["last_hour"] == as_of + dt.timedelta(hours=47)
