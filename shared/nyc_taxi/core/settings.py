"""One settings object for the whole project, read from the environment (and an optional `.env`).

Nothing else in the code reads environment variables for these things: ask ``get_settings()``.
Which lakehouse a profile means (local files + SQLite catalog, or S3 + Glue) is decided once, in
``nyc_taxi.core.lakehouse``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The package is installed editable from <repo>/shared/nyc_taxi/core, so the repository is three levels up.
REPO_ROOT = Path(__file__).resolve().parents[3]

TLC_BASE_URL = "https://d37ci6vzurychx.cloudfront.net"
NOAA_BASE_URL = "https://www.ncei.noaa.gov"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=REPO_ROOT / ".env", env_file_encoding="utf-8", extra="ignore", frozen=True
    )

    profile: Literal["local", "aws", "team"] = Field(
        "local",
        description="Which lakehouse to use: local files and SQLite; S3 and Glue; or a team's services "
        "(PostgreSQL for Airflow and the Iceberg catalog, a Spark cluster: `bash run team up`).",
    )
    state_dir: Path = Field(
        REPO_ROOT / ".state",
        description="Local state: warehouse, catalog, lineage files, Airflow and Metaflow homes.",
    )

    # Lakehouse names: the Iceberg namespace is the Glue database on aws.
    database: str = "nyc_taxi"
    catalog_name: str = Field(
        "lakehouse",
        description="Catalog name for Spark and pyiceberg (they must agree to share the SQLite catalog); "
        "it also names the local lake in lineage, so every clone gives its lake the same identity.",
    )

    # aws profile
    aws_region: str = "us-east-1"
    aws_profile: str | None = Field(
        None, description="Named AWS profile (AWS_PROFILE); unset or empty: AWS's default credential chain."
    )
    s3_bucket: str | None = Field(None, description="Defaults to airflow-metaflow-<hash of the account id>.")
    aws_endpoint_url: str | None = Field(None, description="S3/Glue/STS endpoint override (a moto server in tests).")

    # team profile: a PostgreSQL the team runs (postgresql://user:password@host:port); unset, `bash run
    # team up` starts one under the state directory with a generated password
    postgres_url: SecretStr | None = None
    # and a Redis (redis://:password@host:port/0) as the Celery executor's broker
    redis_url: SecretStr | None = None
    # and object storage over the S3 API (MinIO, S3: its credentials from the AWS credential chain);
    # unset, `team up` runs SeaweedFS on 127.0.0.1 with a generated key pair
    s3_endpoint_url: str | None = None

    # Where the source data comes from: the real public sites by default.
    tlc_base_url: str = TLC_BASE_URL
    noaa_base_url: str = NOAA_BASE_URL

    # Lineage identity. Where lineage is sent is each tool's own setting (lineage/write/destinations.py):
    # OpenLineage's client reads its own (openlineage.yml, OPENLINEAGE_URL, ...); DataHub's are these two.
    datahub_env: str = "PROD"
    datahub_platform_instance: str | None = None
    datahub_gms_url: str | None = Field(None, description="DataHub's GMS (DataHub's own DATAHUB_GMS_URL).")
    datahub_gms_token: SecretStr | None = Field(None, description="Its token (DataHub's own DATAHUB_GMS_TOKEN).")
    datahub_conn_id: str = Field(
        "datahub_rest_default",
        description="The Airflow connection(s) Airflow's tasks ship DataHub records to: the DataHub plugin's "
        "[datahub] conn_id as you set it (the plugin itself writes to the local files; `bash run` hands "
        "your value on under this name).",
    )
    openlineage_namespace: str = Field(
        "nyc_taxi", description="OpenLineage job namespace shared by both orchestrators."
    )
    # Set by whatever started this process (an Airflow task starting the flow), in the form
    # <namespace>/<job name>/<run id> used by OpenLineage integrations (dbt-ol, Airflow's lineage macros).
    openlineage_parent_id: str | None = None
    openlineage_root_parent_id: str | None = None
    # Set with them by the same task: <dag_id>/<task_id>/<run_id>, so DataHub can link the runs too.
    parent_airflow_task: str | None = None
    # The orchestrator's task run a step works for (<dag_id>/<task_id>/<run_id>, the same on every try),
    # recorded with each commit the step makes: a retry finds the commit of a try that was lost after it.
    task_run: str | None = None
    # Shipping the local lineage records to the servers at the end of a task or step: at most this long.
    lineage_ship_seconds: float = Field(3.0, description="Time a task or step may spend shipping lineage at its end.")
    lineage_request_timeout: float = Field(2.0, description="Timeout of one request to a lineage server.")

    landed_version_retention_days: int = Field(
        30, description="How long a landed file's version that the source replaced is kept (to reproduce loads)."
    )

    airflow_port: int = Field(
        8080, description="Airflow's API server (the UI and the tasks' execution API), on 127.0.0.1."
    )
    task_retries: int = Field(
        1,
        description="How often Airflow runs a failed task again (a lost worker, a service coming back); unset "
        "on the team profile: 3, what `bash run chaos` proves its deployment survives with.",
    )
    task_niceness: int = Field(
        10, description="How much lower an Airflow task's CPU priority is than Airflow's own processes (0: the same)."
    )

    # Spark: local[*] unless SPARK_MASTER (or spark-defaults.conf) names a cluster.
    spark_master: str | None = None
    spark_driver_memory: str = "4g"
    spark_shuffle_partitions: int = 4
    spark_ui: bool = Field(False, description="Spark's web UI (port 4040 on 127.0.0.1): off, it costs every start-up")
    spark_extra_packages: str | None = Field(
        None,
        description="Maven coordinates Spark resolves at start (on aws: org.apache.iceberg:iceberg-aws-bundle:1.9.2).",
    )
    spark_server: bool = Field(
        True,
        description="Attach to the warm Spark driver of `bash run spark-server start` when one runs for this "
        "state directory and these Spark settings (false: every process starts its own JVM).",
    )

    @field_validator(
        "aws_profile",
        "s3_bucket",
        "aws_endpoint_url",
        "postgres_url",
        "redis_url",
        "s3_endpoint_url",
        "datahub_platform_instance",
        "datahub_gms_url",
        "openlineage_parent_id",
        "openlineage_root_parent_id",
        "parent_airflow_task",
        "task_run",
        "spark_master",
        "spark_extra_packages",
        mode="before",
    )
    @classmethod
    def _empty_is_none(cls, value):
        return None if value == "" else value

    @model_validator(mode="before")
    @classmethod
    def _team_retries(cls, values):
        """The team profile's deployment retries a task three times unless told otherwise."""
        if isinstance(values, dict) and values.get("profile") == "team" and values.get("task_retries") in (None, ""):
            return {**values, "task_retries": 3}
        return values

    @field_validator("tlc_base_url", "noaa_base_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        return value.rstrip("/")

    # ---- local state (one place for every path under the state directory) ----
    @property
    def catalog_db_path(self) -> Path:
        """SQLite file of the local Iceberg SQL catalog."""
        return self.state_dir / "catalog" / "iceberg_catalog.db"

    @property
    def lineage_dir(self) -> Path:
        return self.state_dir / "lineage"

    @property
    def airflow_home(self) -> Path:
        return self.state_dir / "airflow"

    @property
    def metaflow_home(self) -> Path:
        return self.state_dir / "metaflow"


def state_settings_file(state_dir: Path) -> Path:
    """Settings of one state directory, for the processes that start while it is there (a running
    Airflow's tasks read it at their start): between `.env` and the environment in precedence."""
    return state_dir / "settings.env"


@functools.cache
def get_settings() -> Settings:
    """The process-wide settings (read once): the environment, then the state directory's settings
    file, then `.env` at the repository's root."""
    settings = Settings()
    if state_settings_file(settings.state_dir).is_file():
        return Settings(_env_file=(REPO_ROOT / ".env", state_settings_file(settings.state_dir)))
    return settings
