"""The forecasting flow's data work, one function per step, each in the module of its idea. Each returns what it
computed and a report of what it read and wrote (``.report``), so the flow only calls functions:

- ``compute_actuals`` (``actuals.py``): the window's hourly rides per zone, judged day by day (``window.py``),
  counting again only what raw changed (``coverage.py``);
- ``training_data`` and ``train`` (``training.py``): the actuals (and rain) of the window, the model fitted;
- ``predict`` and ``write_forecasts`` (``forecasts.py``): the horizon's forecasts, MERGEd into their table;
- ``score_forecasts`` and ``evaluate`` (``scores.py``): every kept forecast scored, the run's on its card.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from nyc_taxi.core import jobs

if TYPE_CHECKING:
    from nyc_taxi.forecast.actuals import compute_actuals
    from nyc_taxi.forecast.forecasts import predict, write_forecasts
    from nyc_taxi.forecast.scores import evaluate, score_forecasts
    from nyc_taxi.forecast.training import train, training_data

# Each step is a process of its own that imports the flow's file, and so this module; so does the card's
# render. A function's module (and with it pyarrow, the catalog, Spark's) is imported when a step first asks
# for the function (PEP 562), so `start`, `end` and the card import none of them (the flow's file alone:
# 0.39 s against 0.56 s, `python -X importtime`).
_MODULE_OF = {
    "compute_actuals": "actuals",
    "training_data": "training",
    "train": "training",
    "predict": "forecasts",
    "write_forecasts": "forecasts",
    "score_forecasts": "scores",
    "evaluate": "scores",
}

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


def __getattr__(name: str):
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"nyc_taxi.forecast.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
