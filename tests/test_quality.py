"""Data-quality checks and profiles, on real Spark, Iceberg and DuckDB (core/quality.py, core/profiles.py),
and their DataHub records read back from DataHub Lite (lineage/read/quality.py).

- Each kind of check compiles to SQL that counts exactly the rows a hand count names, and each severity
  judges them as declared (a tolerance of an error check is a boundary, not a range).
- A profile from Iceberg's manifests equals DuckDB's own count over the snapshot's data files.
- Every declared check fails on a counterexample through its writer: tests/test_check_counterexamples.py.
- A check's assertion URN is the same in every run, its run events accumulate in DataHub Lite (read back
  from its own table: the one place Lite's storage is read), and every record passes DataHub's checker.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pyarrow as pa
import pytest

from nyc_taxi.core import datasets as d
from nyc_taxi.core import quality, verdicts
from nyc_taxi.core.datasets import Check, accepted_values, expect, not_null, row_count, unique
from nyc_taxi.core.settings import Settings
from nyc_taxi.core.snapshots import MONTH, month_of

# A hand-made batch: ids 1..10, key (a, b) with one duplicate pair, x NULL twice, y outside 1..3 three times.
ROWS = [
    # id, a, b, x, y
    (1, 1, 1, 5.0, 1),
    (2, 1, 2, 6.0, 2),
    (3, 2, 1, None, 3),
    (4, 2, 2, -1.0, 4),  # x negative; y not accepted
    (5, 3, 1, 7.0, 1),
    (6, 3, 1, 8.0, 2),  # (3, 1) twice
    (7, 4, 1, None, 9),  # y not accepted
    (8, 4, 2, -2.0, 0),  # x negative; y not accepted
    (9, 5, 1, 1.0, 1),
    (10, 5, 2, 2.0, 2),
]
CHECKS = (
    expect("x_not_negative", "x >= 0", on=("x",), doc="x"),  # NULL passes: 2 fail (rows 4, 8)
    not_null("x", name="x_present", doc="x"),  # 2 fail (rows 3, 7)
    accepted_values("y", "1, 2, 3", name="y_known", doc="y"),  # 3 fail (rows 4, 7, 8)
    unique("a", "b", name="key_unique", doc="key"),  # 1 fails: 10 rows, 9 distinct keys
    unique("a", "b", name="key_unique_where", where="id <> 6", doc="key"),  # 0 fail without row 6
    row_count("rows_are_ten", "${expected}", doc="rows"),  # 0 fail when expected is 10
    row_count("two_rows_per_a", "count(DISTINCT a) * 2", doc="rows"),  # 10 rows, 5 a's: 0
    row_count("eight_first", "7", where="id <= 8", doc="rows"),  # 8 such rows where 7 are expected: 1
    row_count("rows_counted", "count(*)", doc="rows"),  # a rule that aggregates: 10 rows, 10 counted: 0
)
EXPECTED_FAILING = {
    "x_not_negative": 2,
    "x_present": 2,
    "y_known": 3,
    "key_unique": 1,
    "key_unique_where": 0,
    "rows_are_ten": 0,
    "two_rows_per_a": 0,
    "eight_first": 1,
    "rows_counted": 0,
}


@pytest.mark.spark
def test_each_kind_of_check_counts_exactly_the_failing_rows_on_spark_and_duckdb(spark):
    frame = spark.createDataFrame(ROWS, "id INT, a INT, b INT, x DOUBLE, y INT")
    values = {"expected": 10}
    counts = quality.count_frame(frame, quality.aggregates(CHECKS, values))
    assert {c.name: counts[c.name] for c in CHECKS} == EXPECTED_FAILING
    assert all(counts[f"{c.name}:rows"] == 10 for c in CHECKS if not c.where)
    assert counts["key_unique_where:rows"] == 9 and counts["eight_first:rows"] == 8
    assert counts["rows_are_ten:expected"] == 10

    # The same SQL on DuckDB (the model's checks are counted there), for the kinds it shares with Spark.
    portable = [c for c in CHECKS if c.kind != "unique"]
    arrow = pa.table({name: [row[i] for row in ROWS] for i, name in enumerate(["id", "a", "b", "x", "y"])})
    duck = quality.count_arrow(arrow, quality.aggregates(portable, values))
    assert {c.name: duck[c.name] for c in portable} == {c.name: EXPECTED_FAILING[c.name] for c in portable}

    # A row count off by three: three rows missing.
    counts = quality.count_frame(frame, quality.aggregates(CHECKS, {"expected": 13}))
    assert (counts["rows_are_ten"], counts["rows_are_ten:rows"], counts["rows_are_ten:expected"]) == (3, 10, 13)

    # Examples are rows that fail, with the columns asked for and the check's own.
    examples = quality.failing_examples(frame, CHECKS[0], values, ("id",))
    assert sorted(e["id"] for e in examples) == [4, 8] and all(e["x"] < 0 for e in examples)


@pytest.mark.spark
@pytest.mark.parametrize("metrics", ["truncate(16)", "none"])
def test_a_snapshots_nulls_and_rows_come_from_its_manifests_else_from_its_rows(spark, settings, metrics):
    """``count_snapshot`` on an Iceberg snapshot of the hand-made batch: every check counts what the hand
    count says. A column's nulls and a row count whose rule is a number come from the manifests when Iceberg keeps
    the columns' metrics (Iceberg's default), so no row is read for them; without metrics, a column's nulls
    from the rows."""
    from nyc_taxi.core.catalog import load_catalog

    name = f"checks_{metrics.split('(')[0]}_{uuid.uuid4().hex[:6]}"
    table = f"{settings.catalog_name}.{settings.database}.{name}"
    frame = spark.createDataFrame(ROWS, "id INT, a INT, b INT, x DOUBLE, y INT")
    spark.sql(
        f"CREATE TABLE {table} (id INT, a INT, b INT, x DOUBLE, y INT) USING iceberg "
        f"TBLPROPERTIES ('write.metadata.metrics.default' = '{metrics}')"
    )
    try:
        frame.writeTo(table).append()
        iceberg = load_catalog(settings).load_table(f"{settings.database}.{name}")
        snapshot = iceberg.current_snapshot().snapshot_id
        rows = spark.table(table)
        counts = quality.count_snapshot(iceberg, snapshot, rows, CHECKS, {"expected": 10})
        assert {c.name: counts[c.name] for c in CHECKS} == EXPECTED_FAILING

        # Given no rows to read, only what the manifests settle is still counted right.
        settled = {"x_present", "rows_are_ten"}
        counts = quality.count_snapshot(iceberg, snapshot, rows.limit(0), CHECKS, {"expected": 10})
        right = {c.name for c in CHECKS if counts[c.name] == EXPECTED_FAILING[c.name] and counts[f"{c.name}:rows"]}
        assert right == (settled if metrics != "none" else {"rows_are_ten"})  # a file's record count is always kept
        # one rule decides both: what Spark can observe leaves the write's pass exactly when the manifests
        # are to settle it without a condition (with one, only the files' bounds can say: it stays in the pass)
        left = {
            c.name for c in CHECKS if quality.observable(c) and not quality.counted_in_the_pass(c, {"expected": 10})
        }
        assert left == settled == {c.name for c in CHECKS if quality.from_the_manifests(c, {"expected": 10})}
        per_file = row_count("per_file", "10", where="a = 1", on=("a",), doc="rows")  # as raw's per source file
        assert quality.from_the_manifests(per_file, {}) and quality.counted_in_the_pass(per_file, {})
    finally:
        spark.sql(f"DROP TABLE {table}")


def test_severity_and_tolerance_decide_pass_warn_and_fail():
    warn = expect("w", "x > 0", on=("x",), doc="")
    strict = expect("e", "x > 0", on=("x",), doc="", severity="error")
    tolerant = expect("t", "x > 0", on=("x",), doc="", severity="error", tolerance=0.01)
    counted = row_count("n", "100", doc="")

    def status(check: Check, failing: int, rows: int = 1000) -> str:
        counts = {check.name: failing, f"{check.name}:rows": rows}
        [result] = quality.judge("t", [check], counts, "1", {})
        return result.status

    assert [status(warn, n) for n in (0, 1, 1000)] == ["pass", "warn", "warn"]
    assert [status(strict, n) for n in (0, 1)] == ["pass", "fail"]
    assert [status(tolerant, n) for n in (0, 10, 11)] == ["pass", "warn", "fail"]  # 1 % of 1,000 is 10
    assert [status(counted, n, rows=100 + n) for n in (0, 1)] == ["pass", "fail"]  # a row count has no tolerance


def test_a_refusal_names_the_check_its_failing_rows_of_all_a_few_of_them_and_what_stays():
    check = expect("pickup_in_month", "month = 3", on=("month",), doc="", severity="error", tolerance=0.01)
    results = quality.judge("t", [check], {"pickup_in_month": 500, "pickup_in_month:rows": 500}, "7", {})
    with pytest.raises(quality.ChecksFailed) as refused:
        quality.refuse(
            results,
            subject="t snapshot 7",
            consequence="raw was not changed",
            keep="kept for inspection",
            examples=lambda c: [{"id": 1, "month": 2}, {"id": 2, "month": 2}],
            checks=[check],
            report=lambda checked: checked,
        )
    message = str(refused.value)
    assert "pickup_in_month (error): 500 of 500 rows fail (100.0%), more than the 1% allowed" in message
    assert "e.g. id=1, month=2" in message and "raw was not changed" in message and "kept for inspection" in message
    assert [r.examples for r in refused.value.report] == [({"id": 1, "month": 2}, {"id": 2, "month": 2})]
    warned = quality.judge("t", [check], {"pickup_in_month": 5, "pickup_in_month:rows": 500}, "7", {})
    quality.refuse(warned, subject="", consequence="", keep="", examples=lambda c: [], checks=[check], report=list)


# ---- DataHub: stable assertions, accumulating results, read back from Lite -----------------------------------


def _results(version: str, failing: int) -> list[quality.CheckResult]:
    counts = {}
    for check in d.YELLOW_TAXI_STAGING.checks:
        counts |= {check.name: 0, f"{check.name}:rows": 1000, f"{check.name}:expected": 1000}
    counts["pickup_in_month"] = failing
    values = {"landed_rows": 1000, "month_start": "2024-03-01 00:00:00", "next_month_start": "2024-04-01 00:00:00"}
    return quality.judge(d.YELLOW_TAXI_STAGING.name, d.YELLOW_TAXI_STAGING.checks, counts, version, values)


@pytest.mark.guards
def test_assertion_urns_are_stable_run_events_accumulate_in_lite_and_every_record_is_valid(tmp_path):
    from datahub_check import assert_valid_record_files

    from nyc_taxi.lineage.read import quality as read
    from nyc_taxi.lineage.write import datahub, datahub_quality
    from nyc_taxi.lineage.write.outbox import Outbox, datahub_files
    from nyc_taxi.lineage.write.report import DatasetUse, StepReport

    settings = Settings(_env_file=None, state_dir=tmp_path)
    runs = [(str(uuid.uuid4()), "111", 3), (str(uuid.uuid4()), "222", 900)]  # a warning, then a failure
    urns = []
    for at, (run_id, version, failing) in enumerate(runs):
        report = StepReport(outputs=[DatasetUse(d.YELLOW_TAXI_STAGING, version, checks=_results(version, failing))])
        records = datahub.write_records(
            report, "airflow:x.stage", settings, at_ms=1_700_000_000_000 + at, run_id=run_id
        )
        Outbox(settings, "airflow").add_records(records)
        urns.append(sorted({r.entityUrn for r in records if r.entityUrn.startswith("urn:li:assertion:")}))
    assert urns[0] == urns[1] and len(urns[0]) == len(d.YELLOW_TAXI_STAGING.checks)  # one URN per check, kept
    assert datahub_quality.assertion_urn(d.YELLOW_TAXI_STAGING, "pickup_in_month", settings) in urns[0]
    assert_valid_record_files(datahub_files(settings))

    found = read.read(settings).of(d.YELLOW_TAXI_STAGING.name)
    [history] = [h for h in found.checks if h.check == "pickup_in_month"]
    assert [(e.run_id, e.version, e.status, e.failing, e.rows) for e in history.evaluations] == [
        (runs[1][0], "222", "fail", 900, 1000),  # newest first
        (runs[0][0], "111", "warn", 3, 1000),
    ]
    assert [c.check for c in found.checks] == [c.name for c in d.YELLOW_TAXI_STAGING.checks]
    assert all(len(h.evaluations) == 2 for h in found.checks)
    # loading again changes nothing: Lite keeps each distinct value once
    again = read.read(settings).of(d.YELLOW_TAXI_STAGING.name)
    assert next(h for h in again.checks if h.check == "pickup_in_month").evaluations == history.evaluations


def test_a_models_checks_are_read_back_from_its_metrics_and_a_refused_models_from_the_run_that_refused_it(tmp_path):
    """A model that passed its checks carries their results as training metrics; a model its checks refused
    is never written, so its results are properties of the run that refused it. Both read back as one
    history per check, newest first, and every record passes DataHub's checker."""
    from datahub_check import assert_valid_record_files

    from nyc_taxi.core.jobs import TRAINING_FLOW
    from nyc_taxi.lineage.read import quality as read
    from nyc_taxi.lineage.write import datahub
    from nyc_taxi.lineage.write.outbox import Outbox, datahub_files
    from nyc_taxi.lineage.write.report import DatasetUse, StepReport

    settings = Settings(_env_file=None, state_dir=tmp_path)
    model = d.YELLOW_RIDES_FORECAST_MODEL
    train = next(j for j in TRAINING_FLOW.jobs if model in j.writes)
    counts = {c.name: 0 for c in model.checks} | {f"{c.name}:rows": 48 for c in model.checks}
    counts |= {f"{c.name}:expected": 48 for c in model.checks if c.kind == "row_count"}
    values = {"zones": 2, "training_hours": 24}
    passed = quality.judge(model.name, model.checks, counts, "m1", values)
    failed = quality.judge(model.name, model.checks, counts | {"every_training_hour_learned": 24}, None, values)
    records, at = [], 1_700_000_000_000
    for n, (report, ok) in enumerate(
        [
            (StepReport(outputs=[DatasetUse(model, "m1", checks=passed, committed=True)]), True),
            (StepReport(outputs=[DatasetUse(model, None, checks=failed, committed=False)]), False),
        ]
    ):
        step = datahub.StepRun(TRAINING_FLOW, train, f"flow/{n}/train/1", started_ms=at + n, job_version="v1")
        records += datahub.model_records(step, report, settings, run_id=f"run-{n}", ended_ms=at + n)
        records += datahub.run_records(step, report, ok, settings, ended_ms=at + n, run_id=f"run-{n}")
    assert sum(r.aspectName == "mlModelProperties" for r in records) == 1  # the refused model: no version
    Outbox(settings, "metaflow").add_records(records)
    assert_valid_record_files(datahub_files(settings))

    found = read.read(settings).of(model.name)
    [history] = [h for h in found.checks if h.check == "every_training_hour_learned"]
    assert history.declared and history.severity == "error"
    assert [(e.run_id, e.version, e.status, e.failing, e.rows, e.expected) for e in history.evaluations] == [
        ("run-1", None, "fail", 24, 48, 48),  # refused: on the refusing run's properties
        ("run-0", "m1", "pass", 0, 48, 48),  # kept: among the model's training metrics
    ]
    assert {h.check for h in found.checks} == {c.name for c in model.checks}


# ---- profiles against DuckDB ---------------------------------------------------------------------------------


def _duckdb_profile(table, snapshot_id: int, columns) -> dict:
    """Independent: rows, and per column nulls, min and max (and distinct values), counted by DuckDB over the
    data files pyiceberg plans for the snapshot."""
    import duckdb

    files = [task.file.file_path.removeprefix("file://") for task in table.scan(snapshot_id=snapshot_id).plan_files()]
    measures = ["count(*)"]
    for column in columns:
        measures += [f"count(*) - count({column.name})", f"min({column.name})", f"max({column.name})"]
        measures += [f"count(DISTINCT {column.name})"]
    row = duckdb.sql(f"SELECT {', '.join(measures)} FROM read_parquet({files!r})").fetchall()[0]
    found = {"rows": row[0]}
    for i, column in enumerate(columns):
        nulls, low, high, distinct = row[1 + 4 * i : 5 + 4 * i]
        found[column.name] = {"nulls": nulls, "min": low, "max": high, "distinct": distinct}
    return found


def _value(text: str, column):
    if column.type in ("INT", "BIGINT"):
        return int(text)
    if column.type == "DOUBLE":
        return float(text)
    if column.type == "DATE":
        return dt.date.fromisoformat(text)
    return dt.datetime.fromisoformat(text)


def _same(value):
    """DuckDB's value as the profile's text parses (an instant in UTC)."""
    return value.astimezone(dt.UTC) if isinstance(value, dt.datetime) and value.tzinfo else value


@pytest.mark.spark
def test_profiles_from_the_manifests_equal_duckdb_over_the_snapshots_data_files(spark, site, settings):
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.core.profiles import BOUNDED_TYPES
    from nyc_taxi.core.tables import ensure_tables
    from nyc_taxi.ingest import taxi, weather
    from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month

    ensure_tables([d.YELLOW_TAXI_STAGING, d.YELLOW_TAXI_RAW, d.WEATHER_STAGING, d.WEATHER_RAW])
    add_taxi_month(site, 2016, 5, rows=4_000, seed=51)
    add_weather_month(site, 2016, 5, seed=51, n_counties=40)
    taxi.download_published_file(2016, 5)
    weather.download_published_files(2016, 5)
    profiles = [
        step(2016, 5).outputs[0].profile
        for step in (taxi.stage_landed_file, taxi.merge_into_raw, weather.stage_landed_files, weather.merge_into_raw)
    ]
    assert [p.dataset for p in profiles] == ["yellow_taxi_staging", "yellow_taxi_raw", "weather_staging", "weather_raw"]
    assert taxi.stage_landed_file(2016, 5).outputs[0].profile is None  # staging holds it: nothing written
    assert profiles[0].rows == 4_000 and profiles[2].rows == 5 * 31
    for profile in profiles:
        declared = d.TABLES[profile.dataset]
        table = load_table(declared)
        expected = _duckdb_profile(table, int(profile.version), declared.columns)
        assert profile.rows == expected["rows"] and profile.columns == len(declared.columns)
        assert profile.size_bytes == sum(
            t.file.file_size_in_bytes for t in table.scan(snapshot_id=int(profile.version)).plan_files()
        )
        for column in declared.columns:
            field, want = profile.field(column.name), expected[column.name]
            assert field.nulls == want["nulls"], (profile.dataset, column.name)
            if column.type in BOUNDED_TYPES and want["min"] is not None:
                got = (_value(field.min, column), _value(field.max, column))
                assert got == (_same(want["min"]), _same(want["max"])), column.name
            else:
                assert field.min is None and field.max is None  # strings: the manifests' bounds are cut
            if field.distinct is not None:
                assert declared.replaced_on_every_load and column.categorical
                assert field.distinct == want["distinct"], (profile.dataset, column.name)
    assert profiles[2].field("county_code").distinct == 5 and profiles[0].field("vendor_id").distinct > 1


def test_a_failed_month_is_found_through_a_snapshots_ancestry_until_a_later_commit_judges_it_again(tmp_path):
    """What the flow refuses (``verdicts.failures_of``), on a real Iceberg table's snapshots (pyiceberg on a
    SQLite catalog, no Spark): January's merge fails its check; February's passes on top; a commit no check
    judged (a compaction) comes next; January loaded again passes. Each snapshot holds January as the
    latest commit that judged it left it; a rollback to before the failure holds none; January's snapshot
    expired, February's record still carries its failure; a merge of March killed before its check is
    unjudged until a retry judges it."""
    import json

    table, merge, failed = _raw_like(tmp_path)
    before = table.current_snapshot().snapshot_id

    def months(snapshot) -> list[tuple[str, str]]:
        return [(batch, r.check) for batch, r in verdicts.failures_of(table, snapshot)]

    january = merge("2011-01", [failed("2011-01")])
    february = merge("2011-02", [])
    unjudged = merge("", None)
    again = merge("2011-01", [])
    assert months(january) == months(february) == months(unjudged) == [("2011-01", "month_rows_as_staged")]
    assert months(again) == [] and months(before) == []

    # a stored failure of fields this code no longer knows, or without one it now has, still reads, as a failure
    key = f"{verdicts.JUDGED_PREFIX}{january}.2011-01"
    stored = json.loads(table.properties[key])
    stored["failed"][0][1] |= {"a_field_of_later_code": 1}
    del stored["failed"][0][1]["tolerance"], stored["failed"][0][1]["status"]
    with table.transaction() as transaction:
        transaction.set_properties({key: json.dumps(stored)})
    assert months(unjudged) == [("2011-01", "month_rows_as_staged")]
    assert verdicts.failures_of(table, unjudged)[0][1].stops

    # January's snapshot gone from the history (as expiry does): February's record carries its failure
    with table.transaction() as transaction:
        transaction.remove_properties(key)
    assert months(february) == [("2011-01", "month_rows_as_staged")]

    # March merged, killed before its check: unjudged, until a retry judges it; other months are not
    march = merge("2011-03", None)
    assert verdicts.unjudged(table, march, "2011-03", month_of)
    assert not verdicts.unjudged(table, march, "2011-02", month_of)
    # April merges on top and fails before March's retry judges March on April's snapshot (the retry
    # commits nothing): both judgements stand, April's failure with them
    april = merge("2011-04", [failed("2011-04")])
    assert verdicts.unjudged(table, april, "2011-03", month_of)
    verdicts.record_judgement_on(table, april, "2011-03", [])
    assert not verdicts.unjudged(table, april, "2011-03", month_of)
    assert months(april) == [("2011-04", "month_rows_as_staged")]
    # judged at last for every month it wrote, an unchanged month's re-run judges nothing again
    assert not any(verdicts.unjudged(table, april, m, month_of) for m in ("2011-01", "2011-02", "2011-03", "2011-04"))


def _raw_like(tmp_path):
    """A real Iceberg table (pyiceberg on a SQLite catalog, no Spark) with a merge's commit and judgement,
    as a raw table's merges leave them: ``merge(month, results)`` commits and, unless ``results`` is None
    (killed before its check), records what its check judged."""
    from pyiceberg.catalog.sql import SqlCatalog

    tmp_path.mkdir(exist_ok=True)
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("n")
    rows = pa.table({"k": pa.array([1], pa.int64())})
    table = catalog.create_table("n.raw", schema=rows.schema)
    table.append(rows)

    def merge(month: str, results: list | None) -> int:
        table.append(rows, snapshot_properties={MONTH: month})
        snapshot = table.current_snapshot().snapshot_id
        if results is not None:
            verdicts.record_judgement_on(table, snapshot, month, results)
        return snapshot

    def failed(month: str, version: int | None = None) -> quality.CheckResult:
        return quality.CheckResult(
            "raw", "month_rows_as_staged", "row_count", "error", "fail", 2, 4, str(version),
            f"count(*) = 2 WHERE source_file IN ('{month}')", expected=2,
        )  # fmt: skip

    return table, merge, failed


def test_a_months_own_judgement_on_a_snapshot_outweighs_a_failure_another_months_judgement_carried_there(tmp_path):
    """January fails; February's merge is killed before its check; January, loaded again, passes on its new
    commit, but February's retry records its judgement on that snapshot first, carrying January's old
    failure. January's own verdict there wins, on that snapshot and every later one; and a failure two
    judgements on one snapshot carry is reported once."""
    table, merge, failed = _raw_like(tmp_path)

    def months(snapshot) -> list[tuple[str, str]]:
        return [(batch, r.check) for batch, r in verdicts.failures_of(table, snapshot)]

    merge("2011-01", [failed("2011-01")])
    merge("2011-02", None)
    again = merge("2011-01", None)  # January's commit, its check still running
    verdicts.record_judgement_on(table, again, "2011-02", [])  # February's retry judges on it first
    assert months(again) == [("2011-01", "month_rows_as_staged")]  # January not yet judged again: still failed
    verdicts.record_judgement_on(table, again, "2011-01", [])  # January's own check passes
    assert months(again) == []
    assert months(merge("2011-03", [])) == []

    # January fails for good; February and March, both killed before their checks, are judged by their
    # retries on the last snapshot: each carries January's failure, which is one failure
    table2, merge2, failed2 = _raw_like(tmp_path / "second")
    merge2("2011-01", [failed2("2011-01")])
    merge2("2011-02", None)
    last = merge2("2011-03", None)
    verdicts.record_judgement_on(table2, last, "2011-02", [])
    verdicts.record_judgement_on(table2, last, "2011-03", [])
    assert [(b, r.check) for b, r in verdicts.failures_of(table2, last)] == [("2011-01", "month_rows_as_staged")]


def test_the_flow_refuses_a_window_over_an_unjudged_month_and_names_the_commit_that_wrote_a_failed_one(tmp_path):
    """The flow's refusal of raw (``actuals.refuse_raw_that_failed``) on a real Iceberg table: a month whose
    commit no check judged is refused, naming that commit, until a retry judges it; a month a retry judged
    on a later snapshot and failed is refused with the rollback to before the month's own commit (rolling
    back to before the judged snapshot would leave the month, unjudged, in place)."""
    from nyc_taxi.forecast import actuals
    from nyc_taxi.forecast.errors import MonthNotJudged
    from nyc_taxi.forecast.window import Window
    from nyc_taxi.lineage.write.report import DatasetUse

    table, merge, failed = _raw_like(tmp_path)
    settings = Settings(_env_file=None, state_dir=tmp_path)
    before = table.current_snapshot().snapshot_id
    january = merge("2011-01", None)  # killed between its commit and its check
    february = merge("2011-02", [])

    def refuse(as_of: dt.datetime, snapshot: int) -> None:
        actuals.refuse_raw_that_failed(
            table,
            Window.of(as_of, 14, 24),
            DatasetUse(d.YELLOW_TAXI_RAW, version=str(snapshot)),
            DatasetUse(d.YELLOW_RIDES_HOURLY_ACTUALS, committed=False),
            settings,
        )

    with pytest.raises(MonthNotJudged, match=rf"2011-01 \(written by snapshot {january}\)"):
        refuse(dt.datetime(2011, 1, 20), february)
    refuse(dt.datetime(2011, 2, 20), february)  # February alone: judged, passed

    # January's retry judges January on February's snapshot, and it fails
    verdicts.record_judgement_on(table, february, "2011-01", [failed("2011-01", february)])
    with pytest.raises(quality.ChecksFailed) as refused:
        refuse(dt.datetime(2011, 1, 20), february)
    message = str(refused.value)
    assert (
        f"rollback_to_snapshot('{settings.database}.{d.YELLOW_TAXI_RAW.name}', {before}) undoes snapshot {january}"
        in message
    )
    assert f"The check failed on {d.YELLOW_TAXI_RAW.name} snapshot {february}," in message
    refuse(dt.datetime(2011, 2, 20), february)  # a window of February alone is not refused for January
