"""
### Ingest NYC TLC yellow taxi trips

Monthly: download the month's `yellow_tripdata_YYYY-MM.parquet`, stage it with Spark into
`yellow_taxi_staging`, and MERGE it into `yellow_taxi_raw` (an Airflow Asset).
Trigger with `{"month": "2024-01"}` to load a given month; a month TLC has not published yet is skipped.
"""

import pendulum
from airflow.sdk import DAG, Param

from nyc_taxi import registry
from nyc_taxi.airflow_tasks import DEFAULT_ARGS, ingestion_tasks
from nyc_taxi.ingest import taxi

with DAG(
    dag_id="ingest_yellow_taxi_data",
    description="NYC TLC yellow taxi trips: download, stage, MERGE into raw",
    schedule="@monthly",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # one staging table: months load one at a time
    default_args=DEFAULT_ARGS,
    params={"month": Param(None, type=["null", "string"], description="YYYY-MM to load; empty: the run's data interval")},
    tags=["ingestion", "taxi", "spark", "iceberg"],
    doc_md=__doc__,
) as dag:
    ingestion_tasks(steps=taxi, source=registry.TLC_YELLOW_TRIP_FILES, staging=registry.YELLOW_TAXI_STAGING,
                    raw=registry.YELLOW_TAXI_RAW, merge_task_id="merge_upsert_staging_into_raw_yellow")
