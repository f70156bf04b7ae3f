"""Writers racing on the same Iceberg table: a MERGE that loses to another writer's commit is
recomputed and committed again, nothing of either writer is lost, and a write that keeps losing
fails with a clear error and commits nothing of its own. Then the whole system: both ingestion
DAGs and the training flow at the same time end with exactly the rows an independent computation
from the source files gives, and every job's lineage once, whole."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from expected_loads import (
    actuals_rows,
    comparable,
    expected_taxi_rows,
    expected_weather,
    hourly_rides,
    table_actuals,
)

from nyc_taxi.core import commits
from nyc_taxi.core import datasets as registry
from nyc_taxi.core.jobs import INGEST_WEATHER_DATA, INGEST_YELLOW_TAXI_DATA, TRAINING_FLOW
from nyc_taxi.core.naming import iceberg_identifier, spark_table
from nyc_taxi.core.sql import SqlFolder
from nyc_taxi.core.upserts import RowChanges, upsert_changes
from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month

pytestmark = [pytest.mark.spark, pytest.mark.faults]
RACE_SQL = SqlFolder(__file__)  # tests/sql/: a plain upsert of an actuals-shaped batch, the shared mechanism's subject
ACTUALS = registry.YELLOW_RIDES_HOURLY_ACTUALS
ZONES, HOURS = range(1, 121), 24 * 28  # 80k zone-hours: a MERGE that takes a while
START = dt.datetime(2024, 2, 1)


@pytest.fixture
def race(spark, settings):
    """The actuals table in a namespace of its own, seeded with a count of 1 per zone-hour."""
    from nyc_taxi.core.tables import ensure_tables

    own = settings.model_copy(update={"database": "concurrency_test"})
    ensure_tables([ACTUALS], own)
    name = spark_table(ACTUALS, own)
    spark.sql(f"DELETE FROM {name}")
    spark.sql(f"""INSERT INTO {name}
                  SELECT z.id, timestampadd(HOUR, h.id, TIMESTAMP_NTZ'{START}'), 1L, current_timestamp()
                  FROM range(1, {max(ZONES) + 1}) z CROSS JOIN range(0, {HOURS}) h""")
    # the new computation: every seeded zone-hour now counts 2
    spark.sql(f"""SELECT CAST(z.id AS INT) AS pickup_location_id,
                         timestampadd(HOUR, h.id, TIMESTAMP_NTZ'{START}') AS pickup_hour,
                         2L AS ride_count, current_timestamp() AS computed_at
                  FROM range(1, {max(ZONES) + 1}) z CROSS JOIN range(0, {HOURS}) h""").createOrReplaceTempView(
        "recomputed"
    )
    yield own, name
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")


class _Appender(threading.Thread):
    """Another writer (pyiceberg, as any other tool would be): appends rows of zone 900+i, one commit
    each, until told to stop."""

    def __init__(self, settings, stop: threading.Event):
        super().__init__(daemon=True)
        self.settings, self.stop, self.commits, self.error = settings, stop, 0, None

    def run(self):
        from nyc_taxi.core.catalog import load_catalog

        try:
            table = load_catalog(self.settings).load_table(iceberg_identifier(ACTUALS, self.settings))
            schema = table.schema().as_arrow()
            while not self.stop.is_set():
                zone = 900 + self.commits
                rows = pa.table(
                    {
                        "pickup_location_id": [zone] * 24,
                        "pickup_hour": [START + dt.timedelta(hours=h) for h in range(24)],
                        "ride_count": [7] * 24,
                        "computed_at": [dt.datetime.now(dt.UTC)] * 24,
                    },
                    schema=schema,
                )
                commits.retry_on_conflict("test append", lambda rows=rows: table.refresh().append(rows))
                self.commits += 1
                self.stop.wait(0.05)
        except Exception as error:  # reported by the test
            self.error = error


class _LostRaces(logging.Handler):
    def __init__(self, first: threading.Event):
        super().__init__(logging.WARNING)
        self.first, self.messages = first, []

    def emit(self, record):
        if "lost a race" in record.getMessage():
            self.messages.append(record.getMessage())
            self.first.set()


def _rows(spark, name) -> list[tuple]:
    """Every (zone, hour, count) row of the table, sorted: a row that is there twice shows twice."""
    return sorted(
        tuple(r) for r in spark.sql(f"SELECT pickup_location_id, pickup_hour, ride_count FROM {name}").collect()
    )


def _merge_against_appender(spark, own, name, stop_after_first_loss: bool):
    stop = threading.Event()
    handler = _LostRaces(stop if stop_after_first_loss else threading.Event())
    logging.getLogger("nyc_taxi.core.commits").addHandler(handler)
    appender = _Appender(own, stop)
    appender.start()
    try:
        while appender.commits == 0 and appender.error is None and appender.is_alive():
            stop.wait(0.05)  # the other writer is committing before the MERGE starts
        result = upsert_changes(spark, RACE_SQL, "race_changes", "race_merge", staging="recomputed", raw=name)
    except Exception as error:
        result = error
    finally:
        stop.set()
        appender.join(60)
        logging.getLogger("nyc_taxi.core.commits").removeHandler(handler)
    assert appender.error is None, appender.error
    return result, appender.commits, handler.messages


@pytest.mark.guards
def test_a_merge_that_loses_a_race_is_recomputed_and_nothing_is_lost(spark, race):
    own, name = race
    result, appended, lost = _merge_against_appender(spark, own, name, stop_after_first_loss=True)

    assert lost, "the MERGE never met the other writer's commits: the test did not race"
    assert any(word in lost[0] for word in ("concurrently modified", "conflicting files", "CommitFailedException")), (
        lost[0]
    )
    assert result == RowChanges(
        changed=len(ZONES) * HOURS
    )  # every zone-hour changed once, counted by the attempt that committed
    expected = [(z, START + dt.timedelta(hours=h), 2) for z in ZONES for h in range(HOURS)]
    expected += [(900 + i, START + dt.timedelta(hours=h), 7) for i in range(appended) for h in range(24)]
    assert _rows(spark, name) == sorted(expected)  # the MERGE's rows and every row the other writer appended, each once


def test_a_write_that_keeps_losing_fails_clearly_and_commits_nothing_of_its_own(spark, race, monkeypatch):
    own, name = race
    monkeypatch.setattr(commits, "ATTEMPTS", 2)
    monkeypatch.setattr(commits, "FIRST_WAIT_S", 0.01)
    result, appended, _lost = _merge_against_appender(spark, own, name, stop_after_first_loss=False)

    assert isinstance(result, commits.CommitConflict), result
    assert (
        f"MERGE into {name}" in str(result)
        and "2 times in a row" in str(result)
        and "nothing of this attempt" in str(result)
    )
    rows = _rows(spark, name)
    seeded = [(z, START + dt.timedelta(hours=h), 1) for z in ZONES for h in range(HOURS)]
    assert [r for r in rows if r[0] < 900] == sorted(seeded)  # no row of the MERGE landed, none doubled
    appended_rows = [(900 + i, START + dt.timedelta(hours=h), 7) for i in range(appended) for h in range(24)]
    assert [r for r in rows if r[0] >= 900] == sorted(appended_rows)  # the other writer lost nothing


def test_other_errors_are_not_retried(spark):
    calls = []

    def bad_sql():
        calls.append(1)
        spark.sql("SELECT no_such_column FROM range(1)")

    with pytest.raises(Exception, match="no_such_column"):
        commits.retry_on_conflict("a bad query", bad_sql)
    assert calls == [1]


# ---- the whole system: both ingestion DAGs and the training flow at the same time ----

FLOW = Path(__file__).resolve().parents[1] / "metaflow" / "train_model_flow.py"  # run as Metaflow runs it
# July's trips and weather are loaded first; then August's load while the weather-adjusted flow trains on
# July's last week: what it reads is being written at that moment. Its horizon, August's first day, is
# counted when August's commit came before the flow's read (a window whose training days reach a month
# not loaded yet is refused: docs/quality.md).
PRELOADED, CONCURRENT = (2023, 7), (2023, 8)
AS_OF, LOOKBACK, HORIZON = dt.datetime(2023, 8, 1), 7, 24


def _scenario(state: Path, airflow_state):
    """A fresh lakehouse with the preloaded month of trips and weather, Airflow's database, and the three
    jobs' commands: each DAG loads the next month while the flow reads the tables they write."""
    from nyc_taxi.airflow_adapter.environment import airflow_environment
    from nyc_taxi.core.settings import Settings
    from nyc_taxi.metaflow_adapter.environment import metaflow_environment

    settings = Settings(state_dir=state, profile="local")
    airflow_state(settings)
    env = {**os.environ, "STATE_DIR": str(state), **airflow_environment(settings), **metaflow_environment(settings)}
    preload = (
        "from nyc_taxi.core.lakehouse import lakehouse\nfrom nyc_taxi.ingest import taxi, weather\n"
        "from nyc_taxi.core.settings import get_settings\nfrom nyc_taxi.core.tables import ensure_tables\n"
        "s = get_settings(); lakehouse(s).create(); ensure_tables(None, s)\n"
        f"taxi.download_published_file(*{PRELOADED}, s); taxi.stage_landed_file(*{PRELOADED}, s); "
        f"taxi.merge_into_raw(*{PRELOADED}, s)\n"
        f"weather.download_published_files(*{PRELOADED}, s); weather.stage_landed_files(*{PRELOADED}, s); "
        f"weather.merge_into_raw(*{PRELOADED}, s)\n"
        # the concurrent month's preliminary weather, as NOAA publishes it in its first days: the weather
        # model needs every horizon day's, and the concurrent run replaces it with the final ('scaled') one
        f"weather.download_published_files(*{CONCURRENT}, s); weather.stage_landed_files(*{CONCURRENT}, s); "
        f"weather.merge_into_raw(*{CONCURRENT}, s)\n"
    )
    # As a deployment's DAG processor would have: DAGs and their Assets in the database before any
    # run (two `dags test` processes would otherwise both insert the same new Asset rows). Parsing the
    # DAGs touches no table, so it runs while the month is preloaded.
    commands = {
        "preload": [sys.executable, "-c", preload],
        "reserialize": [sys.executable, "-m", "airflow", "dags", "reserialize"],
    }
    preparing = {}
    try:
        for name, command in commands.items():
            with (state.parent / f"{name}.log").open("w") as log:
                preparing[name] = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        for name, process in preparing.items():
            assert process.wait(timeout=600) == 0, (state.parent / f"{name}.log").read_text()[-4000:]
    finally:
        for process in preparing.values():
            process.kill()  # after a failure: nothing left running (a no-op for a process that ended)
    dag_test = [sys.executable, "-m", "airflow", "dags", "test"]
    jobs = {
        "ingest_yellow_taxi_data": [
            *dag_test,
            "ingest_yellow_taxi_data",
            "--conf",
            json.dumps({"month": f"{CONCURRENT[0]:04d}-{CONCURRENT[1]:02d}"}),
        ],
        "ingest_weather_data": [
            *dag_test,
            "ingest_weather_data",
            "--conf",
            json.dumps({"month": f"{CONCURRENT[0]:04d}-{CONCURRENT[1]:02d}"}),
        ],
        "TrainForecastModelFlow": [
            sys.executable,
            str(FLOW),
            "--no-pylint",
            "run",
            "--as_of_datetime",
            AS_OF.isoformat(),
            "--lookback_days",
            str(LOOKBACK),
            "--model",
            "weather_adjusted",
        ],
    }
    return settings, env, jobs


def _succeeded(name: str, process: subprocess.Popen, output: str) -> None:
    assert process.returncode == 0, f"{name}:\n{output[-4000:]}"
    if name.startswith("ingest_"):
        assert "DagRunState.SUCCESS" in output or "state=success" in output.lower(), f"{name}:\n{output[-3000:]}"


def _run_together(jobs: dict, env: dict) -> tuple[dict[str, str], dict[str, tuple[float, float]]]:
    """Start all the jobs at once: their output and (start, end) times by name."""
    outputs, started, times = {}, {}, {}
    for name, command in jobs.items():
        times[name] = (time.time(), None)
        started[name] = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for name, process in started.items():
        outputs[name] = process.communicate(timeout=900)[0]
        times[name] = (times[name][0], time.time())
        _succeeded(name, process, outputs[name])
    return outputs, times


def _table_rows(table: registry.Table, settings) -> pa.Table:
    from nyc_taxi.core.catalog import load_table

    return load_table(table, settings).scan().to_arrow()


def _every_job_once() -> list[tuple[str, str]]:
    """(job, event type) of the three runs, from the registry: each task and step started and completed
    once, the flow's run too; of a DAG run, Airflow's `dags test` reports the end only."""
    events = []
    for pipeline in (INGEST_YELLOW_TAXI_DATA, INGEST_WEATHER_DATA, TRAINING_FLOW):
        events += [(pipeline.name, "COMPLETE")] + [(pipeline.name, "START")] * (pipeline.orchestrator == "metaflow")
        events += [(job.qualified_name, kind) for job in pipeline.jobs for kind in ("START", "COMPLETE")]
    return sorted(events)


def _actuals_at(settings, raw_snapshot: int) -> list[tuple]:
    """Independent: hourly pickups per zone from raw at one snapshot, zero-filled for the zones active in
    the window, over the training window and the horizon — what compute_actuals must have written."""
    from nyc_taxi.core.catalog import load_table

    start, end = AS_OF - dt.timedelta(days=LOOKBACK), AS_OF + dt.timedelta(hours=HORIZON)
    raw = (
        load_table(registry.YELLOW_TAXI_RAW, settings)
        .scan(selected_fields=("pickup_datetime", "pickup_location_id"), snapshot_id=raw_snapshot)
        .to_arrow()
    )
    pickups, zones = raw["pickup_datetime"].to_pylist(), raw["pickup_location_id"].to_pylist()
    return actuals_rows(hourly_rides(pickups, zones, start, end))


def _the_flow_read(settings) -> dict[str, str | None]:
    """The versions the flow's steps reported reading (its OpenLineage events)."""
    from nyc_taxi.lineage.read.runs import Runs

    runs = [r for r in Runs.read(settings) if r.job.startswith("TrainForecastModelFlow.")]
    return {name: version for r in runs for name, version in r.inputs.items()}


@pytest.mark.airflow
@pytest.mark.metaflow
@pytest.mark.system  # the team profile's suite runs its own two workers at once (tests/test_team_profile.py)
def test_both_dags_and_the_flow_at_once_overlap_and_each_reads_one_consistent_version(
    site, tmp_path, lineage_events, airflow_state
):
    from nyc_taxi.core.catalog import load_table

    preloaded = add_taxi_month(site, *PRELOADED, rows=30_000, seed=71)
    concurrent_month = add_taxi_month(site, *CONCURRENT, rows=30_000, seed=72)
    add_weather_month(site, *PRELOADED, seed=73, n_counties=60)
    prelim = add_weather_month(site, *CONCURRENT, seed=74, n_counties=60, through_day=5)  # preloaded

    settings, env, jobs = _scenario(tmp_path / "state", airflow_state)
    for path in prelim:  # NOAA publishes the month's final files, and withdraws the preliminary ones
        path.unlink()
    add_weather_month(site, *CONCURRENT, seed=74, n_counties=60)
    outputs, times = _run_together(jobs, env)

    # they really ran at the same time: every two of them overlap
    print({name: round(end - start) for name, (start, end) in times.items()})
    assert max(start for start, _ in times.values()) < min(end for _, end in times.values())

    # what Airflow loaded is exactly what the files hold, computed independently: raw has both months,
    # staging the month loaded last
    taxi_raw = comparable(pa.concat_tables([expected_taxi_rows(preloaded), expected_taxi_rows(concurrent_month)]))
    assert taxi_raw.num_rows == 60_000
    assert comparable(_table_rows(registry.YELLOW_TAXI_RAW, settings)).equals(taxi_raw)
    assert comparable(_table_rows(registry.YELLOW_TAXI_STAGING, settings)).equals(
        comparable(expected_taxi_rows(concurrent_month))
    )
    weather = expected_weather(site, *PRELOADED, "scaled") | expected_weather(site, *CONCURRENT, "scaled")
    assert weather, "no New York City county in the weather files: the scenario did not exercise weather"
    weather_raw = {(r["county_code"], r["date"]): r for r in _table_rows(registry.WEATHER_RAW, settings).to_pylist()}
    assert set(weather_raw) == set(weather)
    assert all({column: weather_raw[key][column] for column in weather[key]} == weather[key] for key in weather)
    assert {r["source_status"] for r in weather_raw.values()} == {"scaled"}
    staged = {(r["county_code"], r["date"]): r for r in _table_rows(registry.WEATHER_STAGING, settings).to_pylist()}
    assert staged == {key: row for key, row in weather_raw.items() if (key[1].year, key[1].month) == CONCURRENT}

    # the flow read one snapshot of each table it read, and wrote exactly what that snapshot gives
    read = _the_flow_read(settings)
    raw_snapshots = {s.snapshot_id for s in load_table(registry.YELLOW_TAXI_RAW, settings).snapshots()}
    assert int(read["yellow_taxi_raw"]) in raw_snapshots
    assert int(read["weather_raw"]) in {s.snapshot_id for s in load_table(registry.WEATHER_RAW, settings).snapshots()}
    actuals = table_actuals(_table_rows(registry.YELLOW_RIDES_HOURLY_ACTUALS, settings).to_pylist())
    assert actuals == _actuals_at(settings, int(read["yellow_taxi_raw"]))

    assert lineage_events(settings) == _every_job_once()  # no lineage lost, doubled or torn
    races = sum(out.count("lost a race") for out in outputs.values())
    print(f"lost races retried while running together: {races}")
