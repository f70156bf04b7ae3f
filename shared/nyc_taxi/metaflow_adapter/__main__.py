"""`python -m nyc_taxi.metaflow_adapter <Flow> <metaflow arguments>`: run a flow of the registry with the
project's Metaflow configuration (what `bash run training-flow` and Airflow's train_forecast_model DAG do).

    python -m nyc_taxi.metaflow_adapter TrainForecastModelFlow run --as_of_datetime 2024-02-15T00:00
"""

from __future__ import annotations

import os
import sys

from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.registry import pipeline
from nyc_taxi.core.settings import REPO_ROOT
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


def main(argv: list[str]) -> None:
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    flow = pipeline(argv[0])
    if flow.orchestrator != "metaflow":
        sys.exit(f"{flow.name} is an Airflow DAG, not a Metaflow flow")
    _check_parameters(flow, argv[1:])
    lakehouse().create()
    os.environ.update(metaflow_environment())
    os.makedirs(os.environ["METAFLOW_HOME"], exist_ok=True)
    os.execv(sys.executable, [sys.executable, str(REPO_ROOT / flow.code), "--no-pylint", *argv[1:]])


if __name__ == "__main__":
    main(sys.argv[1:])
