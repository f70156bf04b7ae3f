"""Backtests compare like with like (core/comparison.py): two models' scores of an origin are ranked only
when both are over their whole horizon, the same hours and zones, trained on the same lookback, and neither
is stale; the table says why an origin is not compared, marks a stale score, and says that the weather
model's scores are an upper bound. The scores of a real run: test_forecast_scores.py."""

from __future__ import annotations

import datetime as dt

from nyc_taxi.core import comparison
from nyc_taxi.core.jobs import UPPER_BOUND

ORIGIN = dt.datetime(2024, 2, 15)
SEASONAL, WEATHER = "seasonal_naive", "weather_adjusted"
RUNS = {SEASONAL: "TrainForecastModelFlow/7", WEATHER: "TrainForecastModelFlow/8"}  # the flow run of each score


def _score(model: str, wape: float, **changed) -> dict:
    return {
        "model_name": model,
        "as_of_datetime": ORIGIN,
        "first_hour": ORIGIN,
        "last_hour": ORIGIN + dt.timedelta(hours=23),
        "forecast_zone_hours": 24 * 200,
        "scored_zone_hours": 24 * 200,
        "coverage": 1.0,
        "wape": wape,
        "mae": wape * 2,
        "actual_rides": 1000,
        "lookback_days": 28,
        "zone_set": "a" * 64,
        "model_version": f"{RUNS[model]}/train_forecasting_model/3",
        **changed,
    }


def test_two_scores_alike_are_ranked_and_each_difference_stops_it_with_its_reason():
    alike = comparison.of_rows([_score(SEASONAL, 0.5), _score(WEATHER, 0.4)])
    assert alike.why_not(ORIGIN) is None and alike.winner(ORIGIN) == WEATHER
    for changed, reason in (
        ({"lookback_days": 14}, "other lookbacks"),
        ({"lookback_days": None}, "other lookbacks"),
        ({"zone_set": "b" * 64}, "other zones"),
        ({"last_hour": ORIGIN + dt.timedelta(hours=11)}, "other hours"),
        ({"coverage": 0.5}, "part of its hours"),
    ):
        compared = comparison.of_rows([_score(SEASONAL, 0.5), _score(WEATHER, 0.4, **changed)])
        assert compared.why_not(ORIGIN) == reason and compared.winner(ORIGIN) is None, changed
        assert compared.wins() == {SEASONAL: 0, WEATHER: 0, comparison.TIE: 0}
        assert f"not comparable: {reason}" in comparison.render(compared)
    # the same count of zone-hours over other zones is not the same zones
    other = comparison.of_rows([_score(SEASONAL, 0.5), _score(WEATHER, 0.4, zone_set="c" * 64)])
    assert other.why_not(ORIGIN) == "other zones"


def test_a_stale_score_is_marked_and_not_ranked():
    stale = comparison.of_rows([_score(SEASONAL, 0.5), _score(WEATHER, 0.4)], stale={(WEATHER, ORIGIN)})
    assert stale.why_not(ORIGIN) == "a stale score" and stale.winner(ORIGIN) is None
    [row] = [line for line in comparison.render(stale).splitlines() if line.startswith("2024-02-15")]
    assert "40.0% (0.80) stale" in row and row.endswith("not comparable: a stale score")


def test_a_score_whose_run_the_lineage_does_not_record_is_said_not_known_fresh():
    """Staleness is judged from the flow runs the lineage records: a score of a run it does not record (made
    with OpenLineage off) is marked, never passed as fresh; with every run recorded, nothing is marked."""
    rows = [_score(SEASONAL, 0.5), _score(WEATHER, 0.4)]
    runs = frozenset(RUNS.values())
    assert not comparison.of_rows(rows, judged_runs=runs).unjudged
    assert "?" not in comparison.render(comparison.of_rows(rows, judged_runs=runs))
    part = comparison.of_rows(rows, judged_runs=runs - {RUNS[WEATHER]})
    assert part.unjudged == {(WEATHER, ORIGIN)}
    text = comparison.render(part)
    [row] = [line for line in text.splitlines() if line.startswith("2024-02-15")]
    assert "40.0% (0.80) ?" in row and "? whether the score is stale is not known" in text
    assert row.endswith("not comparable: a score not known fresh") and part.wins()[WEATHER] == 0
    assert not comparison.of_rows(rows).unjudged  # staleness not asked: nothing said either way


def test_the_weather_models_scores_are_said_to_be_an_upper_bound_where_they_are_shown():
    compared = comparison.of_rows([_score(SEASONAL, 0.5), _score(WEATHER, 0.4)])
    text = comparison.render(compared)
    assert f"{WEATHER}*" in text.splitlines()[1] and f"* {WEATHER}: {UPPER_BOUND[WEATHER]}" in text
    [line] = [f for f in comparison.featured(compared) if f.startswith(WEATHER)]
    assert line.endswith(f"({UPPER_BOUND[WEATHER]})")
    assert not [f for f in comparison.featured(compared) if f.startswith(SEASONAL) and "upper bound" in f]
