"""The forecasting flow's data work, one function per step, each in the module of its idea. Each returns what it
computed and a report of what it read and wrote (``.report``), so the flow only calls functions:

- ``compute_actuals`` (``actuals.py``): the window's hourly rides per zone, judged day by day (``window.py``),
  counting again only what raw changed (``coverage.py``);
- ``training_data`` and ``train`` (``training.py``): the actuals (and rain) of the window, the model fitted;
- ``predict`` and ``write_forecasts`` (``forecasts.py``): the horizon's forecasts, MERGEd into their table;
- ``score_forecasts`` and ``evaluate`` (``scores.py``): every kept forecast scored, the run's on its card.
"""

from __future__ import annotations

from nyc_taxi.core import jobs
from nyc_taxi.forecast.actuals import compute_actuals
from nyc_taxi.forecast.forecasts import predict, write_forecasts
from nyc_taxi.forecast.scores import evaluate, score_forecasts
from nyc_taxi.forecast.training import train, training_data

__all__ = [
    "check_configuration",
    "compute_actuals",
    "evaluate",
    "predict",
    "score_forecasts",
    "train",
    "training_data",
    "write_forecasts",
]


def check_configuration(model_name: str, lookback_days: int, horizon_hours: int) -> None:
    """The run's parameters as the declarations accept them (the DAG's form and the command line check
    them first; a run started another way is checked here)."""
    for declared, value in (
        (jobs.MODEL, model_name),
        (jobs.LOOKBACK_DAYS, lookback_days),
        (jobs.PREDICT_HORIZON_HOURS, horizon_hours),
    ):
        declared.check(value)
