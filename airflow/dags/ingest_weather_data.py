"""
### Ingest NOAA nClimGrid-Daily weather for New York City's counties

Daily: the current month's `-prelim` files change every day and earlier months are final
(`-scaled`). Download the four county files (prcp, tavg, tmax, tmin) of the run's month (only the
ones NOAA changed since they landed), keep New York City's five counties, stage one row per county
and day, and MERGE into `weather_raw`, where final values overwrite preliminary ones.
"""

import pendulum
from airflow.sdk import DAG

from nyc_taxi.airflow_adapter.operators import DEFAULT_ARGS, CreateTablesOperator, IngestStepOperator, params
from nyc_taxi.core import datasets as d
from nyc_taxi.core.jobs import INGEST_WEATHER_DATA as JOBS
from nyc_taxi.ingest import weather

with DAG(
    dag_id=JOBS.name,
    description=JOBS.description,
    schedule="@daily",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # one staging table
    default_args=DEFAULT_ARGS,
    params=params(JOBS),
    tags=["ingestion", "weather", "spark", "iceberg"],
    doc_md=__doc__,
) as dag:
    create_tables = CreateTablesOperator(job=JOBS.create_tables, tables=[d.WEATHER_STAGING, d.WEATHER_RAW])
    download = IngestStepOperator(job=JOBS.download_published_files, step=weather.download_published_files)
    stage = IngestStepOperator(job=JOBS.stage_landed_files, step=weather.stage_landed_files)
    merge = IngestStepOperator(job=JOBS.merge_upsert_staging_into_raw_weather, step=weather.merge_into_raw)

    create_tables >> download >> stage >> merge
