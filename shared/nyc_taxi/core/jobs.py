"""Every job of the project, declared once: the Airflow DAGs and their tasks, the Metaflow flow and
its steps, and which datasets each one reads and writes.

The DAG files and the flow take their ids and names from here, and the lineage code names jobs
(OpenLineage ``<dag>.<task>`` / ``<Flow>.<step>``, DataHub DataFlows and DataJobs) from here. What a
run *really* read and wrote is reported by the run itself; these declarations are what the job is
meant to do (the lineage a task announces when it starts).
"""

from __future__ import annotations

import datetime as dt
import re
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
class Parameter:
    """A run parameter, declared once: the DAG's Param (its trigger form) and the flow's Parameter (its
    command line) are made from it, so a run started either way has the same default and accepts the
    same values."""

    name: str
    description: str
    default: str | int | None = None  # None: no default (a DAG may derive it: the run's month, the merge's)
    kind: type = str
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    pattern: str | None = None  # a regular expression the whole value matches
    form: str = ""  # the pattern as a person reads it, with an example

    def check(self, value):
        """``value`` as the parameter's kind; a ValueError that says what it accepts otherwise."""
        if self.kind is int:
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ValueError(f"{self.name} must be a whole number, not {value!r}") from None
            if (self.minimum is not None and value < self.minimum) or (
                self.maximum is not None and value > self.maximum
            ):
                bounds = (
                    f"at least {self.minimum}" if self.maximum is None else f"between {self.minimum} and {self.maximum}"
                )
                raise ValueError(f"{self.name} must be {bounds}, not {value}")
            return value
        value = str(value)
        if self.choices and value not in self.choices:
            raise ValueError(f"{self.name} must be one of {', '.join(self.choices)}, not {value!r}")
        if self.pattern and not re.fullmatch(self.pattern, value):
            raise ValueError(f"{self.name} {value!r} is not {self.form}")
        return value


MONTH = Parameter(
    "month",
    "The month to load, YYYY-MM; empty: the run's own month (its data interval)",
    pattern=r"\d{4}-(0[1-9]|1[0-2])",
    form="a month YYYY-MM (e.g. 2024-01)",
)
AS_OF_DATETIME = Parameter(
    "as_of_datetime",
    "Forecast origin, New York local time: training uses the hours before it, forecasts start at it",
    pattern=r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d(:[0-5]\d)?",
    form="a New York local time YYYY-MM-DDTHH:MM, without an offset (e.g. 2024-02-15T00:00)",
)


def parse_as_of(text: str) -> dt.datetime:
    """A forecast origin as every reader takes it: `YYYY-MM-DDTHH:MM` New York local wall-clock time
    (``AS_OF_DATETIME``), truncated to the hour (the flow forecasts from it; the scores name it)."""
    try:
        value = dt.datetime.fromisoformat(AS_OF_DATETIME.check(text))
    except ValueError as bad:
        raise ValueError(str(bad) if "is not" in str(bad) else f"as_of_datetime {text!r}: {bad}") from None
    return value.replace(minute=0, second=0, microsecond=0)


MODEL = Parameter(
    "model",
    "seasonal_naive, or weather_adjusted (also reads weather_raw)",
    default="seasonal_naive",
    choices=("seasonal_naive", "weather_adjusted"),
)
# What a model's scores mean, said wherever they are shown (the backtest's table, the site's Backtests page,
# the evaluation card, the model's metrics in DataHub): a model that saw what its origin could not know.
UPPER_BOUND = {
    "weather_adjusted": "an upper bound: it forecasts with the rain observed on each horizon day, which no "
    "forecast made at its origin knows",
}
LOOKBACK_DAYS = Parameter("lookback_days", "Days of actuals to train on", default=28, kind=int, minimum=7)
PREDICT_HORIZON_HOURS = Parameter(
    "predict_horizon_hours", "Hours to forecast", default=24, kind=int, minimum=1, maximum=336
)
TRAINING_PARAMETERS = (AS_OF_DATETIME, MODEL, LOOKBACK_DAYS, PREDICT_HORIZON_HOURS)


@dataclass(frozen=True)
class Pipeline:
    """An Airflow DAG or a Metaflow flow: its jobs by name (``pipeline.<job name>``)."""

    name: str
    orchestrator: Literal["airflow", "metaflow"]
    description: str
    code: str  # the DAG or flow file, relative to the repository
    jobs: tuple[Job, ...] = field(default=())
    parameters: tuple[Parameter, ...] = ()

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

    @property
    def reads(self) -> set[Dataset]:
        return {dataset for job in self.jobs for dataset in job.reads}

    @property
    def writes(self) -> set[Dataset]:
        return {dataset for job in self.jobs for dataset in job.writes}

    def runs_beside(self, other: Pipeline) -> bool:
        """Whether a run of this pipeline may run at the same time as one of ``other``: another pipeline,
        neither writing what the other reads or writes. A pipeline whose jobs declare no dataset (a DAG
        whose work is a flow's) runs beside none."""
        if other is self or not (self.writes and other.writes):
            return False
        return not (self.writes & (other.reads | other.writes) or other.writes & self.reads)


def _ingestion_dag(
    name: str, description: str, landed: d.LandedFiles, staging: d.Table, raw: d.Table, merge_task: str
) -> Pipeline:
    """Both ingestion DAGs have one shape: create the tables, download, stage, merge."""
    return Pipeline(
        name,
        "airflow",
        description,
        f"airflow/dags/{name}.py",
        parameters=(MONTH,),
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
    parameters=TRAINING_PARAMETERS,
)
TRAINING_FLOW = Pipeline(
    "TrainForecastModelFlow",
    "metaflow",
    "Hourly yellow taxi demand per zone: actuals, model, forecasts",
    "metaflow/train_model_flow.py",
    parameters=TRAINING_PARAMETERS,
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
            reads=(d.YELLOW_RIDES_HOURLY_ACTUALS, d.WEATHER_RAW),
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
        Job(
            "evaluate",
            "Score every kept forecast whose hours have actuals (Spark), MERGEd into the scores table; this run's on its card",
            reads=(d.YELLOW_RIDES_HOURLY_FORECAST, d.YELLOW_RIDES_HOURLY_ACTUALS),
            writes=(d.YELLOW_RIDES_FORECAST_SCORES,),
        ),
        Job("end", "Done"),
    ),
)

PIPELINES: dict[str, Pipeline] = {
    p.name: p for p in (INGEST_YELLOW_TAXI_DATA, INGEST_WEATHER_DATA, TRAIN_FORECAST_MODEL, TRAINING_FLOW)
}
JOBS: dict[str, Job] = {job.qualified_name: job for p in PIPELINES.values() for job in p.jobs}
