"""Every forecast kept, by model and origin, and scored once its hours have happened (forecast/forecasts.py and scores.py:
write_forecasts and score_forecasts, through the flow's own step functions on Spark and Iceberg).

Months of their own (2015-04 and 2015-05): the session's other modules write forecasts to the same tables, so
every assertion is about this module's origins. The scores are compared with DuckDB over the Parquet files of
the very snapshots each score names, never with the code that computed them."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest
from expected_loads import duckdb_scores

from nyc_taxi.core import datasets as d

pytestmark = pytest.mark.spark
APRIL, MAY = (2015, 4), (2015, 5)
SEASONAL, WEATHER = "seasonal_naive", "weather_adjusted"
# (model, origin, horizon hours): two models at two origins, the seasonal one at two more, two of its origins
# forecasting one day each, and one whose horizon runs past the last loaded day (June is not loaded): scored
# over the hours that have happened
FORECASTS = (
    (SEASONAL, dt.datetime(2015, 5, 8), 24),
    (WEATHER, dt.datetime(2015, 5, 8), 24),
    (SEASONAL, dt.datetime(2015, 5, 14), 48),
    (WEATHER, dt.datetime(2015, 5, 14), 48),
    (SEASONAL, dt.datetime(2015, 5, 15), 48),  # its first day also forecast from the 14th
    (SEASONAL, dt.datetime(2015, 5, 30), 72),
)
ORIGINS = {as_of for _, as_of, _ in FORECASTS}


def _forecast(
    model: str, as_of: dt.datetime, horizon: int, version: str, lookback: int = 14, lost: tuple[str, ...] = ()
):
    """The flow's steps from its actuals to its written forecasts, as the flow calls them, and their lineage as
    the flow's recorder records it (``lost``: the steps whose records were lost)."""
    from nyc_taxi.forecast import steps

    counted = steps.compute_actuals(as_of, lookback, horizon)
    data = steps.training_data(as_of, lookback, horizon, model)
    trained = steps.train(data, model, version=version)
    forecasts = steps.predict(trained, data, as_of, horizon)
    written = steps.write_forecasts(forecasts)
    parameters = {"model": model, "as_of_datetime": as_of.isoformat(timespec="minutes")}
    parameters |= {"lookback_days": str(lookback), "predict_horizon_hours": str(horizon)}
    reports = {"compute_actuals": counted, "write_forecasts_to_table": written}
    _record_flow_run(version, parameters, {step: r for step, r in reports.items() if step not in lost})
    return forecasts


def _record_flow_run(version: str, parameters: dict[str, str], reports: dict) -> None:
    """Each step's start and end as the flow's recorder records them from the entries the step spools, the last
    ending the flow run: the backtest judges a score's staleness from what its run's lineage says it read."""
    import dataclasses
    import time

    from nyc_taxi.lineage.write.report import report_to_dict
    from nyc_taxi.metaflow_adapter import recorder

    flow, run_id, _, task_id = version.split("/")
    for n, (step, report) in enumerate(reports.items()):
        now = int(time.time() * 1000)
        context = recorder.StepContext(
            flow, run_id, step, task_id, now, [], n == len(reports) - 1, n == 0,
            {"model": parameters["model"]}, parameters, None, None, None, None, None,
        )  # fmt: skip
        recorder.record({"kind": "started", "context": dataclasses.asdict(context)})
        finished = {"report": report_to_dict(report), "error": None, "ended_ms": now + 1}
        recorder.record({"kind": "finished", "context": dataclasses.asdict(context), **finished})


def _backtest_row(settings, origin: dt.datetime) -> str:
    """The row of ``origin`` that `bash run backtest --no-run --origins 1` prints for it."""
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nyc_taxi.cli.backtest",
            "--no-run",
            "--origins",
            "1",
            "--last",
            f"{origin:%Y-%m-%dT%H:%M}",
        ],
        env={**os.environ, "STATE_DIR": str(settings.state_dir)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    [row] = [line for line in done.stdout.splitlines() if line.startswith(f"{origin:%Y-%m-%d %H:%M}")]
    return row.rstrip()


def _rows(table: d.Table, snapshot_id: int | None = None) -> list[dict]:
    from nyc_taxi.core.catalog import load_table

    return load_table(table).scan(snapshot_id=snapshot_id).to_arrow().to_pylist()


def _ours(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["as_of_datetime"] in ORIGINS]


def _key(row: dict) -> tuple:
    return tuple(row[c] for c in d.YELLOW_RIDES_HOURLY_FORECAST.primary_key)


@pytest.fixture(scope="module")
def kept(spark, site):
    """April and May 2015 loaded (trips and weather), the four forecasts written, then scored."""
    from nyc_taxi.core.tables import ensure_tables
    from nyc_taxi.forecast import steps
    from nyc_taxi.ingest import taxi, weather
    from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month

    ensure_tables()
    files = [add_taxi_month(site, *month, rows=20_000, seed=month[1] + 70) for month in (APRIL, MAY)]
    for month in (APRIL, MAY):
        add_weather_month(site, *month, seed=month[1] + 70, n_counties=40)
        for load in (taxi.download_published_file, taxi.stage_landed_file, taxi.merge_into_raw):
            load(*month)
        for load in (weather.download_published_files, weather.stage_landed_files, weather.merge_into_raw):
            load(*month)
    written = {
        (model, as_of): _forecast(model, as_of, horizon, f"TrainForecastModelFlow/{n}/train_forecasting_model/1")
        for n, (model, as_of, horizon) in enumerate(FORECASTS, start=1)
    }
    scores = steps.score_forecasts()
    return SimpleNamespace(files=files, written=written, scores=scores)


def test_every_model_and_origin_is_kept_and_a_rerun_replaces_only_its_own_rows(kept):
    from nyc_taxi.core.catalog import load_table

    before = {_key(r): r for r in _ours(_rows(d.YELLOW_RIDES_HOURLY_FORECAST))}
    for (model, as_of), forecasts in kept.written.items():
        ours = {(z, h): r["predicted_ride_count"] for (m, o, z, h), r in before.items() if (m, o) == (model, as_of)}
        assert ours == forecasts.values, f"{model} as of {as_of}: the table holds what the run forecast"
    assert {(m, o) for m, o, _, _ in before} == {(m, o) for m, o, _ in FORECASTS}

    table = load_table(d.YELLOW_RIDES_HOURLY_FORECAST)
    snapshots = len(table.snapshots())
    # the seasonal model at the first origin again: another version, a shorter horizon
    rerun = _forecast(SEASONAL, dt.datetime(2015, 5, 8), 12, "TrainForecastModelFlow/9/train_forecasting_model/1")
    table.refresh()
    assert len(table.snapshots()) == snapshots + 1, "one commit"
    after = {_key(r): r for r in _ours(_rows(d.YELLOW_RIDES_HOURLY_FORECAST))}
    mine = lambda key: key[:2] == (SEASONAL, dt.datetime(2015, 5, 8))  # noqa: E731
    assert {k: v for k, v in after.items() if not mine(k)} == {k: v for k, v in before.items() if not mine(k)}
    replaced = {(k[2], k[3]): r for k, r in after.items() if mine(k)}
    assert {key: r["predicted_ride_count"] for key, r in replaced.items()} == rerun.values
    assert {r["model_version"] for r in replaced.values()} == {"TrainForecastModelFlow/9/train_forecasting_model/1"}


def test_the_latest_forecast_of_a_model_per_hour_is_its_latest_origins(kept, spark):
    """forecast/sql/latest_forecasts.sql, the documented query, against the rows chosen in Python."""
    from nyc_taxi.core.naming import spark_table
    from nyc_taxi.forecast.tables import SQL

    rows = _rows(d.YELLOW_RIDES_HOURLY_FORECAST)
    for model in (SEASONAL, WEATHER):
        newest: dict = {}
        for r in rows:
            key = (r["pickup_location_id"], r["forecast_hour"])
            if r["model_name"] == model and (key not in newest or r["as_of_datetime"] > newest[key]["as_of_datetime"]):
                newest[key] = r
        got = SQL.run(spark, "latest_forecasts", forecast=spark_table(d.YELLOW_RIDES_HOURLY_FORECAST), model_name=model)
        assert {
            (r.pickup_location_id, r.forecast_hour): (r.as_of_datetime, r.predicted_ride_count) for r in got.collect()
        } == {key: (r["as_of_datetime"], r["predicted_ride_count"]) for key, r in newest.items()}
        if model == SEASONAL:  # the 15th was forecast from the 14th and the 15th: the 15th's is the latest
            hour, origins = dt.datetime(2015, 5, 15, 3), {}
            for r in rows:
                if r["model_name"] == model and r["forecast_hour"] == hour:
                    origins.setdefault(r["pickup_location_id"], set()).add(r["as_of_datetime"])
            both = {zone for zone, seen in origins.items() if len(seen) == 2}
            assert both, "zones forecast from both origins"
            assert {
                r.as_of_datetime for r in got.collect() if r.forecast_hour == hour and r.pickup_location_id in both
            } == {dt.datetime(2015, 5, 15)}


def test_every_score_equals_duckdb_over_the_snapshots_it_names(kept):
    scores = _ours(_rows(d.YELLOW_RIDES_FORECAST_SCORES))
    assert {(r["model_name"], r["as_of_datetime"]) for r in scores} == {(m, o) for m, o, _ in FORECASTS}
    for score in scores:
        independent = duckdb_scores(score["forecast_snapshot_id"], score["actuals_snapshot_id"])
        expected = independent[(score["model_name"], score["as_of_datetime"])]
        for figure, value in expected.items():
            assert score[figure] == (pytest.approx(value, rel=1e-9) if isinstance(value, float) else value), figure
    # the horizon that runs into June, not loaded: two of its three days scored
    [late] = [s for s in scores if s["as_of_datetime"] == dt.datetime(2015, 5, 30)]
    assert late["coverage"] == pytest.approx(2 / 3) and late["last_hour"] == dt.datetime(2015, 6, 1, 23)


def test_a_whole_score_equals_one_computed_from_the_trip_files(kept):
    """The forecasts scored over their whole horizon, against the rides counted here from the published TLC
    files (pyarrow): not from the actuals table the scores read."""
    from expected_loads import expected_actuals

    from nyc_taxi.forecast import steps

    steps.score_forecasts()  # the forecasts as the tests before left them (a re-run shortened one)
    scores = {(r["model_name"], r["as_of_datetime"]): r for r in _ours(_rows(d.YELLOW_RIDES_FORECAST_SCORES))}
    forecasts = _ours(_rows(d.YELLOW_RIDES_HOURLY_FORECAST))
    checked = 0
    for (model, as_of), score in scores.items():
        if score["coverage"] != 1:
            continue
        mine = {
            (r["pickup_location_id"], r["forecast_hour"]): r["predicted_ride_count"]
            for r in forecasts
            if (r["model_name"], r["as_of_datetime"]) == (model, as_of)
        }
        rides = expected_actuals(kept.files, min(h for _, h in mine), max(h for _, h in mine) + dt.timedelta(hours=1))
        errors = [abs(f - rides.get(key, 0)) for key, f in mine.items()]
        actual = sum(rides.get(key, 0) for key in mine)
        assert (score["forecast_zone_hours"], score["actual_rides"]) == (len(mine), actual), (model, as_of)
        assert score["predicted_rides"] == pytest.approx(sum(mine.values()), rel=1e-9)
        assert score["mae"] == pytest.approx(sum(errors) / len(errors), rel=1e-9)
        assert score["wape"] == pytest.approx(sum(errors) / actual, rel=1e-9)
        assert score["bias"] == pytest.approx((sum(mine.values()) - actual) / len(mine), rel=1e-9, abs=1e-12)
        checked += 1
    assert checked == len(FORECASTS) - 1  # all but the one reaching June


def test_the_scores_are_checked_and_scoring_again_what_has_not_changed_commits_nothing(kept):
    from nyc_taxi.core.catalog import current_snapshot_id
    from nyc_taxi.forecast import steps

    checks = {r.check: r for r in kept.scores.report.outputs[0].checks}
    assert set(checks) == {c.name for c in d.YELLOW_RIDES_FORECAST_SCORES.checks}
    assert checks["horizon_happened"].status == "warn" and checks["horizon_happened"].failing >= 1
    steps.score_forecasts()  # up to date with what the tests before changed
    before = current_snapshot_id(d.YELLOW_RIDES_FORECAST_SCORES)
    again = steps.score_forecasts()
    assert again.report.outputs[0].committed is False
    assert current_snapshot_id(d.YELLOW_RIDES_FORECAST_SCORES) == before
    assert len([r for r in again.rows if r["as_of_datetime"] in ORIGINS]) == len(FORECASTS)


def test_the_runs_card_shows_its_score(kept):
    from nyc_taxi.forecast import steps

    forecasts = kept.written[(SEASONAL, dt.datetime(2015, 5, 14))]
    evaluation = steps.evaluate(forecasts, 48, kept.scores)
    score = kept.scores.of(SEASONAL, dt.datetime(2015, 5, 14))
    # per zone (Python, over the actuals the scores read), over the same zone-hours as the score (Spark SQL):
    # the zones' absolute errors add up to the whole forecast's
    per_zone = evaluation.metrics["per_zone"]
    assert sum(z["mae"] * z["hours"] for z in per_zone.values()) == pytest.approx(
        score["mae"] * score["scored_zone_hours"]
    )


def test_backtest_no_run_compares_the_models_only_where_both_were_scored_over_the_same_whole_horizon(kept, settings):
    """`bash run backtest --no-run`: at the 14th both models forecast the same 48 hours, all of them scored, and
    the lower WAPE (DuckDB's, over the tables' files now) wins; at the 7th neither forecast; at the 8th the
    seasonal model was re-run with a 12-hour horizon (the first test) and the weather model has 24: their
    WAPEs are shown, and not compared."""
    import os
    import subprocess
    import sys

    from expected_loads import duckdb_scores

    from nyc_taxi.forecast import steps

    steps.score_forecasts()  # the forecasts as the tests before left them

    def backtest(*arguments: str) -> dict[str, str]:
        done = subprocess.run(
            [sys.executable, "-m", "nyc_taxi.cli.backtest", "--no-run", *arguments],
            env={**os.environ, "STATE_DIR": str(settings.state_dir)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return {line[:16]: line.rstrip() for line in done.stdout.splitlines() if line.startswith("2015-05-")} | {
            "": done.stdout
        }

    scores = duckdb_scores()
    printed = backtest("--origins", "2", "--last", "2015-05-14T00:00")
    assert (
        printed["2015-05-07 00:00"].endswith("not comparable: not every model scored")
        and printed["2015-05-07 00:00"].count("not scored") == 2
    )
    row, origin = printed["2015-05-14 00:00"], dt.datetime(2015, 5, 14)
    for model in (SEASONAL, WEATHER):
        assert scores[(model, origin)]["coverage"] == 1
        assert f"{scores[(model, origin)]['wape']:.1%} ({scores[(model, origin)]['mae']:.2f})" in row, row
    winner = min((SEASONAL, WEATHER), key=lambda m: scores[(m, origin)]["wape"])
    assert row.endswith(winner), row
    assert f"wins: {SEASONAL} {int(winner == SEASONAL)} of 1, {WEATHER} {int(winner == WEATHER)} of 1" in printed[""]

    eighth = dt.datetime(2015, 5, 8)
    assert {scores[(m, eighth)]["last_hour"] for m in (SEASONAL, WEATHER)} == {
        eighth + dt.timedelta(hours=11),
        eighth + dt.timedelta(hours=23),
    }
    row = backtest("--origins", "1", "--last", "2015-05-08T00:00")["2015-05-08 00:00"]
    assert row.endswith("not comparable: other hours") and f"{scores[(WEATHER, eighth)]['wape']:.1%}" in row, row
    # the weather model's scores are an upper bound, said under the table
    assert f"* {WEATHER}: an upper bound" in printed[""]


def test_a_score_read_earlier_never_replaces_one_read_later_and_a_forecast_gone_loses_its_score(kept, spark):
    """A run that read the tables before the score the table holds was read, with other figures, changes
    nothing: neither its comparison (score_changes.sql) nor its MERGE, should another run have committed in
    between (merge_scores.sql checks again). A forecast deleted from the forecast table loses its score at
    the next scoring; the others keep theirs."""
    from nyc_taxi.core.naming import spark_table
    from nyc_taxi.forecast import steps
    from nyc_taxi.forecast.tables import SQL

    scores = d.YELLOW_RIDES_FORECAST_SCORES
    steps.score_forecasts()
    held = {(r["model_name"], r["as_of_datetime"]): r for r in _rows(scores)}
    mine = held[(SEASONAL, dt.datetime(2015, 5, 14))]
    older = {**mine, "mae": mine["mae"] + 1.0, "scored_at": mine["scored_at"] - dt.timedelta(hours=1)}
    schema = ", ".join(f"{c.name} {c.type}" for c in scores.columns)
    spark.createDataFrame([tuple(older[c] for c in scores.column_names)], schema).createOrReplaceTempView("older")
    read_at_us = int(older["scored_at"].timestamp() * 1_000_000)
    target = spark_table(scores)
    assert SQL.run(spark, "score_changes", staging="older", raw=target, read_at_us=read_at_us).count() == 0
    spark.sql(
        "SELECT *, model_name AS change_model, as_of_datetime AS change_origin, 'changed' AS change FROM older"
    ).createOrReplaceTempView("older_changes")
    SQL.run(spark, "merge_scores", changes="older_changes", raw=target, read_at_us=read_at_us)
    assert {(r["model_name"], r["as_of_datetime"]): r for r in _rows(scores)} == held

    gone = (SEASONAL, dt.datetime(2015, 5, 15))
    spark.sql(
        f"DELETE FROM {spark_table(d.YELLOW_RIDES_HOURLY_FORECAST)} "
        f"WHERE model_name = '{gone[0]}' AND as_of_datetime = TIMESTAMP_NTZ'{gone[1]:%Y-%m-%d %H:%M:%S}'"
    )
    steps.score_forecasts()
    after = {(r["model_name"], r["as_of_datetime"]) for r in _rows(scores)}
    assert after == set(held) - {gone}


def test_two_models_trained_on_other_lookbacks_are_not_ranked(kept, settings):
    """The weather model forecasts the 14th again, trained on 21 days where the seasonal model was trained on
    14: their scores are over the same 48 hours, and not compared; the scores keep each lookback."""
    from nyc_taxi.forecast import steps

    origin = dt.datetime(2015, 5, 14)
    _forecast(WEATHER, origin, 48, "TrainForecastModelFlow/10/train_forecasting_model/1", lookback=21)
    steps.score_forecasts()
    scores = {(r["model_name"], r["as_of_datetime"]): r for r in _ours(_rows(d.YELLOW_RIDES_FORECAST_SCORES))}
    assert (scores[(SEASONAL, origin)]["lookback_days"], scores[(WEATHER, origin)]["lookback_days"]) == (14, 21)
    row = _backtest_row(settings, origin)
    assert row.endswith("not comparable: other lookbacks"), row


def test_a_score_whose_runs_reading_of_raw_the_lineage_lost_is_not_known_fresh_and_not_ranked(kept, settings):
    """Both models forecast the 21st; the lineage of the seasonal run's compute_actuals was lost (its recorder
    killed), though the rest of its run was recorded: what its staleness is judged from is not known, so its
    score is marked and the origin not ranked, where the same runs fully recorded would be."""
    from nyc_taxi.forecast import steps

    origin = dt.datetime(2015, 5, 21)
    _forecast(SEASONAL, origin, 24, "TrainForecastModelFlow/11/train_forecasting_model/1", lost=("compute_actuals",))
    _forecast(WEATHER, origin, 24, "TrainForecastModelFlow/12/train_forecasting_model/1")
    steps.score_forecasts()

    row = _backtest_row(settings, origin)
    assert row.endswith("not comparable: a score not known fresh") and row.count("?") == 1, row  # the seasonal one
    _forecast(SEASONAL, origin, 24, "TrainForecastModelFlow/13/train_forecasting_model/1")  # recorded whole
    steps.score_forecasts()
    row = _backtest_row(settings, origin)
    assert row.endswith((SEASONAL, WEATHER, "tie")) and "?" not in row, row  # ranked
