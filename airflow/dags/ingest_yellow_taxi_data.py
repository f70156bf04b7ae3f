"""
### Ingest NYC TLC yellow taxi trips

Monthly: download the month's `yellow_tripdata_YYYY-MM.parquet` (only if the TLC published a new
version of it), stage it with Spark into `yellow_taxi_staging`, and MERGE it into `yellow_taxi_raw`.
A merge that commits a snapshot emits an event of the `yellow_taxi_raw` Asset (which starts
`train_forecast_model`); a re-run that changes nothing emits none.
Trigger with `{"month": "2024-01"}` to load a given month; a month TLC has not published yet is skipped.
"""

import pendulum
from airflow.sdk import DAG

from nyc_taxi.airflow_adapter.operators import DEFAULT_ARGS, CreateTablesOperator, IngestStepOperator, params
from nyc_taxi.core import datasets as d
from nyc_taxi.core.jobs import INGEST_YELLOW_TAXI_DATA as JOBS
from nyc_taxi.ingest import taxi

with DAG(
    dag_id=JOBS.name,
    description=JOBS.description,
    schedule="@monthly",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # one staging table: months load one at a time
    default_args=DEFAULT_ARGS,
    params=params(JOBS),
    tags=["ingestion", "taxi", "spark", "iceberg"],
    doc_md=__doc__,
) as dag:
    create_tables = CreateTablesOperator(job=JOBS.create_tables, tables=[d.YELLOW_TAXI_STAGING, d.YELLOW_TAXI_RAW])
    download = IngestStepOperator(job=JOBS.download_published_files, step=taxi.download_published_file)
    stage = IngestStepOperator(job=JOBS.stage_landed_files, step=taxi.stage_landed_file)
    merge = IngestStepOperator(job=JOBS.merge_upsert_staging_into_raw_yellow, step=taxi.merge_into_raw)

    create_tables >> download >> stage >> merge
