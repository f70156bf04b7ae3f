"""
### Ingest NOAA nClimGrid-Daily weather for New York City's counties

Daily: the current month's `-prelim` files change every day and earlier months are final
(`-scaled`). Download the four county files (prcp, tavg, tmax, tmin) of the run's month, keep New
York City's five counties, stage one row per county and day, and MERGE into `weather_raw` (an
Airflow Asset), where final values overwrite preliminary ones.
"""

import pendulum
from airflow.sdk import DAG, Param

from nyc_taxi import registry
from nyc_taxi.airflow_tasks import DEFAULT_ARGS, ingestion_tasks
from nyc_taxi.ingest import weather

with DAG(
    dag_id="ingest_weather_data",
    description="NOAA nClimGrid-Daily county weather for NYC: download, stage, MERGE into raw",
    schedule="@daily",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # one staging table
    default_args=DEFAULT_ARGS,
    params={"month": Param(None, type=["null", "string"], description="YYYY-MM to load; empty: the run's data interval")},
    tags=["ingestion", "weather", "spark", "iceberg"],
    doc_md=__doc__,
) as dag:
    ingestion_tasks(steps=weather, source=registry.NOAA_NCLIMGRID_COUNTY_FILES, staging=registry.WEATHER_STAGING,
                    raw=registry.WEATHER_RAW, merge_task_id="merge_upsert_staging_into_raw_weather")
