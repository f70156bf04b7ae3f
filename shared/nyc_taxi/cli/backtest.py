"""`bash run backtest`: every model over N weekly forecast origins, through the DAG and flow a user triggers
(``train_forecast_model`` starts TrainForecastModelFlow; on the team profile the scheduler runs it), then
the comparison of their scores: WAPE by origin and model, and which model wins how often
(``core/comparison.py``). Each run's last step scores every kept forecast, so the table is the scores
table as the runs left it.

    bash run backtest --origins 4 --last 2024-02-15T00:00
    bash run backtest --no-run          # the comparison of what the scores table holds, nothing run
"""

from __future__ import annotations

import argparse
import datetime as dt
import json

from nyc_taxi.core import comparison, jobs
from nyc_taxi.core.datasets import YELLOW_TAXI_RAW
from nyc_taxi.core.settings import get_settings
from nyc_taxi.forecast.origins import latest_origin, weekly_origins

MAX_ORIGINS = 52  # a year of weekly origins: each is a DAG run per model


def dag_runs(origins: list[dt.datetime], models: list[str], lookback_days: int, horizon_hours: int) -> list[str]:
    """The ``train_forecast_model`` runs, origin by origin, every model at each."""
    return [
        f"{jobs.TRAIN_FORECAST_MODEL.name}:"
        + json.dumps(
            {
                jobs.AS_OF_DATETIME.name: f"{origin:%Y-%m-%dT%H:%M}",
                jobs.MODEL.name: model,
                jobs.LOOKBACK_DAYS.name: lookback_days,
                jobs.PREDICT_HORIZON_HOURS.name: horizon_hours,
            }
        )
        for origin in origins
        for model in models
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bash run backtest", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--origins", type=int, default=4, help=f"weekly forecast origins (default 4, at most {MAX_ORIGINS})"
    )
    parser.add_argument(
        "--last",
        help="the last origin, New York local YYYY-MM-DDTHH:MM (default: the latest midnight whose horizon raw holds)",
    )
    parser.add_argument(
        "--models",
        default=",".join(jobs.MODEL.choices),
        help=f"comma-separated (default {','.join(jobs.MODEL.choices)})",
    )
    parser.add_argument("--lookback_days", type=int, default=jobs.LOOKBACK_DAYS.default)
    parser.add_argument("--predict_horizon_hours", type=int, default=jobs.PREDICT_HORIZON_HOURS.default)
    parser.add_argument("--no-run", action="store_true", help="only print the comparison of the scores kept")
    args = parser.parse_args(argv)
    if not 1 <= args.origins <= MAX_ORIGINS:
        parser.error(f"--origins must be between 1 and {MAX_ORIGINS} (a year of weekly origins), not {args.origins}")
    try:
        models = list(dict.fromkeys(jobs.MODEL.check(m.strip()) for m in args.models.split(",") if m.strip()))
        lookback, horizon = (
            jobs.LOOKBACK_DAYS.check(args.lookback_days),
            jobs.PREDICT_HORIZON_HOURS.check(args.predict_horizon_hours),
        )
        last = dt.datetime.fromisoformat(jobs.AS_OF_DATETIME.check(args.last)) if args.last else None
    except ValueError as bad:
        parser.error(str(bad))
    settings = get_settings()
    if last is None:
        latest = latest_origin(horizon, settings)
        if latest is None:
            parser.error(f"{YELLOW_TAXI_RAW.name} holds no month yet: load some, or give --last")
        last = latest[0]
    origins = weekly_origins(last, args.origins)
    if not args.no_run:
        from nyc_taxi.cli import dag_run_results

        specs = dag_runs(origins, models, lookback, horizon)
        print(f"{len(specs)} runs of {jobs.TRAIN_FORECAST_MODEL.name}, oldest origin first:", flush=True)
        try:
            for result in dag_run_results.run(specs, settings, "the backtest"):
                print("\n".join(f"  {line}" for line in dag_run_results.describe(result, settings)), flush=True)
        except RuntimeError as failed:
            raise SystemExit(str(failed)) from None
    print(comparison.render(comparison.compare(settings, origins, tuple(models), *staleness(settings))))


def staleness(settings) -> tuple[set, frozenset[str]]:
    """The scores `bash run lineage --stale` calls stale (from the lineage's records; the sources not asked),
    and the flow runs that judgement read: a score of another run's is not known fresh."""
    from nyc_taxi.lineage.read import stale
    from nyc_taxi.lineage.read.runs import Runs

    runs = Runs.read(settings)
    return stale.check(settings, runs=runs).scores(), stale.flow_runs(runs)


if __name__ == "__main__":
    main()
