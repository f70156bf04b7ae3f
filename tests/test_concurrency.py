"""Writers racing on the same Iceberg table: a MERGE that loses to another writer's commit is
recomputed and committed again, nothing of either writer is lost, and a write that keeps losing
fails with a clear error and commits nothing of its own. Then the whole system: both ingestion
DAGs and the training flow at the same time end with the tables and lineage of running them
one after another."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from nyc_taxi.core import commits
from nyc_taxi.core import datasets as registry
from nyc_taxi.core.naming import iceberg_identifier, spark_table
from nyc_taxi.core.upserts import upsert_changes
from nyc_taxi.fixtures.site import add_taxi_month, add_weather_month
from nyc_taxi.forecast.steps import SQL as FORECAST_SQL

pytestmark = [pytest.mark.spark, pytest.mark.faults]
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


def _counts(spark, name):
    return {
        (r[0], r[1]): r[2]
        for r in spark.sql(f"SELECT pickup_location_id, pickup_hour, ride_count FROM {name}").collect()
    }


def _merge_against_appender(spark, own, name, stop_after_first_loss: bool):
    stop = threading.Event()
    handler = _LostRaces(stop if stop_after_first_loss else threading.Event())
    logging.getLogger("nyc_taxi.core.commits").addHandler(handler)
    appender = _Appender(own, stop)
    appender.start()
    try:
        while appender.commits == 0 and appender.error is None and appender.is_alive():
            stop.wait(0.05)  # the other writer is committing before the MERGE starts
        result = upsert_changes(spark, FORECAST_SQL, "actuals_changes", "merge_actuals", staging="recomputed", raw=name)
    except Exception as error:
        result = error
    finally:
        stop.set()
        appender.join(60)
        logging.getLogger("nyc_taxi.core.commits").removeHandler(handler)
    assert appender.error is None, appender.error
    return result, appender.commits, handler.messages


def test_a_merge_that_loses_a_race_is_recomputed_and_nothing_is_lost(spark, race):
    own, name = race
    result, appended, lost = _merge_against_appender(spark, own, name, stop_after_first_loss=True)

    assert lost, "the MERGE never met the other writer's commits: the test did not race"
    assert any(word in lost[0] for word in ("concurrently modified", "conflicting files", "CommitFailedException")), (
        lost[0]
    )
    assert result == len(ZONES) * HOURS  # every zone-hour changed once, counted by the attempt that committed
    counts = _counts(spark, name)
    expected = {(z, START + dt.timedelta(hours=h)): 2 for z in ZONES for h in range(HOURS)}
    expected |= {(900 + i, START + dt.timedelta(hours=h)): 7 for i in range(appended) for h in range(24)}
    assert counts == expected  # the MERGE's rows and every row the other writer appended, each once


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
    counts = _counts(spark, name)
    assert {v for (zone, _), v in counts.items() if zone < 900} == {1}  # no row of the MERGE landed
    assert sum(1 for zone, _ in counts if zone >= 900) == 24 * appended  # the other writer lost nothing


def test_other_errors_are_not_retried(spark):
    calls = []

    def bad_sql():
        calls.append(1)
        spark.sql("SELECT no_such_column FROM range(1)")

    with pytest.raises(Exception, match="no_such_column"):
        commits.retry_on_conflict("a bad query", bad_sql)
    assert calls == [1]


# ---- the whole system: both ingestion DAGs and the training flow at the same time ----

FLOW = (
    Path(__file__).resolve().parents[1] / "metaflow" / "train_model_flow.py"
)  # the flow file, run as Metaflow runs it
PRELOADED, CONCURRENT = (2023, 7), (2023, 8)  # the flow trains on July while August and July's weather load
AS_OF = "2023-07-22T00:00"


def _scenario(state: Path, airflow_db: Path | None = None):
    """A fresh lakehouse with the preloaded month, Airflow's database (a copy of ``airflow_db`` if
    given), and the three jobs' commands."""
    from nyc_taxi.airflow_adapter.environment import airflow_environment, prepare_directories
    from nyc_taxi.core.settings import Settings
    from nyc_taxi.metaflow_adapter.environment import metaflow_environment

    settings = Settings(state_dir=state, profile="local")
    prepare_directories(settings)
    env = {**os.environ, "STATE_DIR": str(state), **airflow_environment(settings), **metaflow_environment(settings)}
    preload = (
        "from nyc_taxi.core.lakehouse import lakehouse\nfrom nyc_taxi.ingest import taxi\n"
        "from nyc_taxi.core.settings import get_settings\nfrom nyc_taxi.core.tables import ensure_tables\n"
        "s = get_settings(); lakehouse(s).create(); ensure_tables(None, s)\n"
        f"taxi.download_published_file(*{PRELOADED}, s); taxi.stage_landed_file(*{PRELOADED}, s); "
        f"taxi.merge_into_raw(*{PRELOADED}, s)\n"
    )
    subprocess.run([sys.executable, "-c", preload], env=env, check=True, capture_output=True, timeout=600)
    if airflow_db:
        shutil.copy(airflow_db, settings.airflow_home / "airflow.db")
    else:
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"], env=env, check=True, capture_output=True, timeout=600
        )
        # As a deployment's DAG processor would have: DAGs and their Assets in the database before any
        # run (two `dags test` processes would otherwise both insert the same new Asset rows).
        subprocess.run(
            [sys.executable, "-m", "airflow", "dags", "reserialize"],
            env=env,
            check=True,
            capture_output=True,
            timeout=600,
        )
    month = "%04d-%02d"
    jobs = {
        "ingest_yellow_taxi_data": [
            sys.executable,
            "-m",
            "airflow",
            "dags",
            "test",
            "ingest_yellow_taxi_data",
            "--conf",
            json.dumps({"month": month % CONCURRENT}),
        ],
        "ingest_weather_data": [
            sys.executable,
            "-m",
            "airflow",
            "dags",
            "test",
            "ingest_weather_data",
            "--conf",
            json.dumps({"month": month % PRELOADED}),
        ],
        "TrainForecastModelFlow": [
            sys.executable,
            str(FLOW),
            "--no-pylint",
            "run",
            "--as_of_datetime",
            AS_OF,
            "--lookback_days",
            "14",
        ],
    }
    return settings, env, jobs


def _succeeded(name: str, process: subprocess.Popen, output: str) -> None:
    assert process.returncode == 0, f"{name}:\n{output[-4000:]}"
    if name.startswith("ingest_"):
        assert "DagRunState.SUCCESS" in output or "state=success" in output.lower(), f"{name}:\n{output[-3000:]}"


def _run(jobs: dict, env: dict, together: bool) -> dict[str, str]:
    """Run the jobs one after another, or all at once; their output by name."""
    outputs = {}
    started = {}
    for name, command in jobs.items():
        started[name] = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if not together:
            outputs[name] = started[name].communicate(timeout=900)[0]
    for name, process in started.items():
        if together:
            outputs[name] = process.communicate(timeout=900)[0]
        _succeeded(name, process, outputs[name])
    return outputs


@pytest.mark.airflow
@pytest.mark.metaflow
def test_both_dags_and_the_flow_at_once_equal_running_them_one_after_another(
    site, tmp_path, table_contents, lineage_events
):
    add_taxi_month(site, *PRELOADED, rows=30_000, seed=71)
    add_taxi_month(site, *CONCURRENT, rows=30_000, seed=72)
    add_weather_month(site, *PRELOADED, seed=73, n_counties=60)

    sequential, env, jobs = _scenario(tmp_path / "sequential")
    fresh_airflow_db = shutil.copy(sequential.airflow_home / "airflow.db", tmp_path / "airflow.db")
    _run(jobs, env, together=False)
    concurrent, env, jobs = _scenario(tmp_path / "concurrent", airflow_db=fresh_airflow_db)
    outputs = _run(jobs, env, together=True)

    expected, got = table_contents(sequential), table_contents(concurrent)
    assert {name: len(rows) for name, rows in got.items()} == {name: len(rows) for name, rows in expected.items()}
    assert all(expected[name] for name in expected), "a table stayed empty: the scenario did not exercise it"
    for name in expected:
        assert got[name] == expected[name], f"{name} differs from the sequential runs'"
    assert lineage_events(concurrent) == lineage_events(sequential)  # no lineage lost or torn
    races = sum(out.count("lost a race") for out in outputs.values())
    print(f"lost races retried while running together: {races}")
