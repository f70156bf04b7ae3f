"""
### Train the forecast model when new taxi data lands

Scheduled on the `yellow_taxi_raw` Asset: every merge that committed a new snapshot starts a run,
which starts `TrainForecastModelFlow` (Metaflow) as its child. The flow's lineage names this task
run as its parent and this DAG run as its root, in OpenLineage and in DataHub: the hop from Airflow
to Metaflow is in the lineage.

Without `as_of_datetime` the forecast starts right after the month the triggering merge loaded;
trigger with `{"as_of_datetime": "2024-02-15T00:00", "model": "weather_adjusted"}` for a backtest
(and `lookback_days`, `predict_horizon_hours`: what `bash run lineage --stale --rerun` passes on).
"""

import pendulum
from airflow.sdk import DAG

from nyc_taxi.airflow_adapter.operators import DEFAULT_ARGS, RunFlowOperator, asset, params
from nyc_taxi.core import datasets as d
from nyc_taxi.core.jobs import TRAIN_FORECAST_MODEL as JOBS
from nyc_taxi.core.jobs import TRAINING_FLOW
from nyc_taxi.metaflow_adapter.environment import metaflow_environment


def flow_parameters(context) -> dict[str, str]:
    """The flow's parameters: the run's params, the forecast origin from the triggering merge if not given."""
    chosen = context["params"]
    as_of = chosen.get("as_of_datetime")
    if not as_of:
        months = [
            event.extra.get("month")
            for events in context["triggering_asset_events"].values()
            for event in events
            if event.extra.get("month")
        ]
        if not months:
            raise ValueError("no as_of_datetime given and no merge triggered this run: say which hour to forecast from")
        year, month = map(int, max(months).split("-"))
        as_of = f"{year + month // 12:04d}-{month % 12 + 1:02d}-01T00:00"
    return {
        "as_of_datetime": as_of,
        "model": chosen["model"],
        "lookback_days": str(chosen["lookback_days"]),
        "predict_horizon_hours": str(chosen["predict_horizon_hours"]),
    }


with DAG(
    dag_id=JOBS.name,
    description=JOBS.description,
    schedule=[asset(d.YELLOW_TAXI_RAW)],
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    # one training at a time: two over one window can both add its new actuals: Spark runs an
    # insert-only MERGE as a plain append, which Iceberg commits without checking for the other's rows
    max_active_runs=1,
    default_args=DEFAULT_ARGS,  # a retry resumes the flow run an earlier try left unfinished
    params=params(JOBS),  # as_of_datetime empty: the start of the month after the one the merge loaded
    tags=["metaflow", "forecast"],
    doc_md=__doc__,
) as dag:
    run_training_flow = RunFlowOperator(
        job=JOBS.run_training_flow, flow=TRAINING_FLOW, arguments=flow_parameters, environment=metaflow_environment
    )
