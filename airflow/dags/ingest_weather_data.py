"""
### Ingest NOAA nClimGrid-Daily weather for New York City's counties

Daily: the current month's `-prelim` files change every day and earlier months are final
(`-scaled`). Download the four county files (prcp, tavg, tmax, tmin) of the run's month, keep New
York City's five counties, stage one row per county and day, and MERGE into `weather_raw` (an
Airflow Asset), where final values overwrite preliminary ones.
"""

import pendulum
from airflow.sdk import DAG, Param, task

from nyc_taxi import registry
from nyc_taxi.airflow_tasks import DEFAULT_ARGS, IngestStepOperator
from nyc_taxi.ingest import weather

with DAG(
    dag_id="ingest_weather_data",
    description="NOAA nClimGrid-Daily county weather for NYC: download, stage, MERGE into raw",
    schedule="@daily",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params={"month": Param(None, type=["null", "string"], description="YYYY-MM to load; empty: the run's data interval")},
    tags=["ingestion", "weather", "spark", "iceberg"],
    doc_md=__doc__,
) as dag:

    @task
    def create_tables():
        """Create the staging and raw tables from the registry if they do not exist."""
        from nyc_taxi.spark import get_spark
        from nyc_taxi.tables import ensure_tables

        ensure_tables(get_spark(), [registry.WEATHER_STAGING, registry.WEATHER_RAW])

    download_and_stage_data = IngestStepOperator(
        task_id="download_and_stage_data",
        step=weather.download_and_stage,
        reads=[registry.NOAA_NCLIMGRID_COUNTY_FILES],
        writes=[registry.WEATHER_STAGING],
    )
    merge_upsert_staging_into_raw_weather = IngestStepOperator(
        task_id="merge_upsert_staging_into_raw_weather",
        step=weather.merge_into_raw,
        reads=[registry.WEATHER_STAGING],
        writes=[registry.WEATHER_RAW],
    )

    create_tables() >> download_and_stage_data >> merge_upsert_staging_into_raw_weather
