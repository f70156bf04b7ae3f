"""`python -m nyc_taxi.metaflow_adapter <Flow> <metaflow arguments>`: run a flow of the registry with the
project's Metaflow configuration (what `bash run training-flow` and Airflow's train_forecast_model DAG do).

    python -m nyc_taxi.metaflow_adapter TrainForecastModelFlow run --as_of_datetime 2024-02-15T00:00
    python -m nyc_taxi.metaflow_adapter TrainForecastModelFlow run    # at the latest origin raw holds
"""

from __future__ import annotations

import os
import sys

from nyc_taxi.core import jobs
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.registry import pipeline
from nyc_taxi.core.settings import REPO_ROOT, get_settings
from nyc_taxi.metaflow_adapter.environment import metaflow_environment


def _check_parameters(flow, arguments: list[str]) -> None:
    """Each declared parameter given on the command line (``--name value`` or ``--name=value``) as its
    declaration accepts it: a bad value stops here with one line, before Metaflow starts a run."""
    declared = {f"--{p.name}": p for p in flow.parameters}
    for i, argument in enumerate(arguments):
        name, _, value = argument.partition("=")
        if name in declared and (value or i + 1 < len(arguments)):
            try:
                declared[name].check(value or arguments[i + 1])
            except ValueError as bad:
                sys.exit(f"error: {bad}")


def _given(name: str, arguments: list[str]) -> str | None:
    """The value of ``--name`` on a command line (``--name value`` or ``--name=value``), if given."""
    for i, argument in enumerate(arguments):
        flag, equals, value = argument.partition("=")
        if flag == f"--{name}":
            return value if equals else (arguments[i + 1] if i + 1 < len(arguments) else None)
    return None


def with_an_origin(arguments: list[str]) -> list[str]:
    """A `run` without ``--as_of_datetime`` trains at the latest origin whose horizon raw holds (the rule
    of `bash run backtest`'s default), and says which; a run given one, or another command, is as given."""
    from nyc_taxi.forecast.origins import latest_origin

    name = jobs.AS_OF_DATETIME.name
    if arguments[:1] != ["run"] or _given(name, arguments) is not None:
        return arguments
    horizon = int(_given(jobs.PREDICT_HORIZON_HOURS.name, arguments) or jobs.PREDICT_HORIZON_HOURS.default)
    latest = latest_origin(horizon, get_settings())
    if latest is None:
        sys.exit(f"error: no --{name} given, and yellow_taxi_raw holds no month to choose one from: load a month first")
    origin, month = latest
    print(
        f"--{name} not given: training at {origin:%Y-%m-%dT%H:%M}, the latest origin whose {horizon} hours "
        f"raw holds (its latest month {month})",
        file=sys.stderr,
        flush=True,
    )
    return [*arguments, f"--{name}", f"{origin:%Y-%m-%dT%H:%M}"]


def main(argv: list[str]) -> None:
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    flow = pipeline(argv[0])
    if flow.orchestrator != "metaflow":
        sys.exit(f"{flow.name} is an Airflow DAG, not a Metaflow flow")
    _check_parameters(flow, argv[1:])
    lakehouse().create()
    arguments = with_an_origin(argv[1:]) if jobs.AS_OF_DATETIME in flow.parameters else argv[1:]
    os.environ.update(metaflow_environment())
    os.execv(sys.executable, [sys.executable, str(REPO_ROOT / flow.code), "--no-pylint", *arguments])


if __name__ == "__main__":
    main(sys.argv[1:])
