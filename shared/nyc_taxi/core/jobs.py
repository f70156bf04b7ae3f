"""Every job of the project, declared once: the Airflow DAGs and their tasks, the Metaflow flow and
its steps, and which datasets each one reads and writes.

The DAG files and the flow take their ids and names from here, and the lineage code names jobs
(OpenLineage ``<dag>.<task>`` / ``<Flow>.<step>``, DataHub DataFlows and DataJobs) from here. What a
run *really* read and wrote is reported by the run itself; these declarations are what the job is
meant to do (the lineage a task announces when it starts).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from nyc_taxi.core import datasets as d
from nyc_taxi.core.datasets import Dataset


@dataclass(frozen=True)
class Job:
    """An Airflow task or a Metaflow step."""

    name: str
    description: str
    reads: tuple[Dataset, ...] = ()
    writes: tuple[Dataset, ...] = ()
    pipeline: str = ""  # filled in by the pipeline that holds the job

    @property
    def qualified_name(self) -> str:
        """``<dag>.<task>`` / ``<Flow>.<step>``: the OpenLineage job name both tools use."""
        return f"{self.pipeline}.{self.name}"


@dataclass(frozen=True)
class Pipeline:
    """An Airflow DAG or a Metaflow flow: its jobs by name (``pipeline.<job name>``)."""

    name: str
    orchestrator: Literal["airflow", "metaflow"]
    description: str
    code: str  # the DAG or flow file, relative to the repository
    jobs: tuple[Job, ...] = field(default=())

    def __post_init__(self):
        object.__setattr__(self, "jobs", tuple(replace(job, pipeline=self.name) for job in self.jobs))

    def __getattr__(self, name: str) -> Job:
        for job in self.__dict__.get("jobs", ()):
            if job.name == name:
                return job
        raise AttributeError(
            f"{self.__dict__.get('name')!r} has no job {name!r}; "
            f"its jobs: {', '.join(j.name for j in self.__dict__.get('jobs', ()))}"
        )

    @property
    def job_names(self) -> list[str]:
        return [job.name for job in self.jobs]


def _ingestion_dag(
    name: str, description: str, landed: d.LandedFiles, staging: d.Table, raw: d.Table, merge_task: str
) -> Pipeline:
    """Both ingestion DAGs have one shape: create the tables, download, stage, merge."""
    return Pipeline(
        name,
        "airflow",
        description,
        f"airflow/dags/{name}.py",
        jobs=(
            Job("create_tables", f"Create {staging.name} and {raw.name} from the registry if they do not exist"),
            Job(
                "download_published_files",
                f"Fetch the month's {landed.published.name} files, check them, land them",
                reads=(landed.published,),
                writes=(landed,),
            ),
            Job(
                "stage_landed_files",
                f"Cast the landed month to {staging.name} (Spark)",
                reads=(landed,),
                writes=(staging,),
            ),
            Job(
                merge_task,
                f"MERGE the changed rows of {staging.name} into {raw.name} (Spark)",
                reads=(staging,),
                writes=(raw,),
            ),
        ),
    )


INGEST_YELLOW_TAXI_DATA = _ingestion_dag(
    "ingest_yellow_taxi_data",
    "NYC TLC yellow taxi trips: download, stage, MERGE into raw",
    d.TLC_YELLOW_TRIPDATA_LANDED,
    d.YELLOW_TAXI_STAGING,
    d.YELLOW_TAXI_RAW,
    merge_task="merge_upsert_staging_into_raw_yellow",
)
INGEST_WEATHER_DATA = _ingestion_dag(
    "ingest_weather_data",
    "NOAA nClimGrid-Daily county weather for NYC: download, stage, MERGE into raw",
    d.NOAA_NCLIMGRID_DAILY_COUNTY_LANDED,
    d.WEATHER_STAGING,
    d.WEATHER_RAW,
    merge_task="merge_upsert_staging_into_raw_weather",
)
TRAIN_FORECAST_MODEL = Pipeline(
    "train_forecast_model",
    "airflow",
    "Runs TrainForecastModelFlow when yellow_taxi_raw has a new snapshot; the flow's runs are this task's children",
    "airflow/dags/train_forecast_model.py",
    jobs=(Job("run_training_flow", "Start TrainForecastModelFlow with this task run as its OpenLineage parent"),),
)
TRAINING_FLOW = Pipeline(
    "TrainForecastModelFlow",
    "metaflow",
    "Hourly yellow taxi demand per zone: actuals, model, forecasts",
    "metaflow/train_model_flow.py",
    jobs=(
        Job("start", "Check the configuration"),
        Job(
            "compute_actuals",
            "Hourly rides per zone (Spark SQL), MERGEd into the actuals table",
            reads=(d.YELLOW_TAXI_RAW,),
            writes=(d.YELLOW_RIDES_HOURLY_ACTUALS,),
        ),
        Job(
            "prepare_training_data",
            "The lookback window of actuals (and daily rain for the weather model)",
            reads=(d.YELLOW_RIDES_HOURLY_ACTUALS,),
        ),
        Job(
            "train_forecasting_model",
            "Fit the chosen model",
            reads=(d.YELLOW_RIDES_HOURLY_ACTUALS,),
            writes=(d.YELLOW_RIDES_FORECAST_MODEL,),
        ),
        Job("predict", "A forecast for every zone and hour of the horizon", reads=(d.YELLOW_RIDES_FORECAST_MODEL,)),
        Job(
            "write_forecasts_to_table",
            "MERGE the forecasts into the forecast table (Spark)",
            reads=(d.YELLOW_RIDES_FORECAST_MODEL,),
            writes=(d.YELLOW_RIDES_HOURLY_FORECAST,),
        ),
        Job("evaluate", "MAE and WAPE where the forecast hours have actuals", reads=(d.YELLOW_RIDES_HOURLY_ACTUALS,)),
        Job("end", "Done"),
    ),
)

PIPELINES: dict[str, Pipeline] = {
    p.name: p for p in (INGEST_YELLOW_TAXI_DATA, INGEST_WEATHER_DATA, TRAIN_FORECAST_MODEL, TRAINING_FLOW)
}
JOBS: dict[str, Job] = {job.qualified_name: job for p in PIPELINES.values() for job in p.jobs}
