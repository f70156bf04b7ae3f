"""One settings object for the whole project, read from the environment (and an optional `.env`).

Two profiles:
- ``local`` (default): everything lives under a git-ignored state directory in the repository:
  an Iceberg warehouse directory and an Iceberg SQL catalog on SQLite that Spark's JdbcCatalog and
  pyiceberg's SqlCatalog share.
- ``aws``: an S3 bucket and the Glue Data Catalog.

Nothing else in the code reads environment variables for these things: ask ``get_settings()``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The package is installed editable from <repo>/shared/nyc_taxi, so the repository is two levels up.
REPO_ROOT = Path(__file__).resolve().parents[2]

TLC_BASE_URL = "https://d37ci6vzurychx.cloudfront.net"
NOAA_BASE_URL = "https://www.ncei.noaa.gov"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=REPO_ROOT / ".env", env_file_encoding="utf-8", extra="ignore", frozen=True
    )

    profile: Literal["local", "aws"] = Field("local", description="Which lakehouse to use.")
    state_dir: Path = Field(REPO_ROOT / ".state", description="Local state: warehouse, catalog, lineage files, Airflow and Metaflow homes.")

    # Lakehouse names: the Iceberg namespace is the Glue database on aws.
    database: str = "nyc_taxi"
    catalog_name: str = Field("lakehouse", description="Catalog name for Spark and pyiceberg (they must agree to share the SQLite catalog).")

    # aws profile
    aws_region: str = "us-east-1"
    aws_profile: str | None = Field("sandbox", description="Named AWS profile; empty to use the default credential chain.")
    s3_bucket: str | None = Field(None, description="Defaults to airflow-metaflow-<hash of the account id>.")
    aws_endpoint_url: str | None = Field(None, description="S3/Glue/STS endpoint override (a moto server in tests).")

    # Where the source data comes from: the real public sites by default.
    tlc_base_url: str = TLC_BASE_URL
    noaa_base_url: str = NOAA_BASE_URL

    # Lineage identity and destinations.
    datahub_env: str = "PROD"
    datahub_platform_instance: str | None = None
    datahub_gms_url: str | None = None
    datahub_token: SecretStr | None = None
    openlineage_url: str | None = None
    openlineage_api_key: SecretStr | None = None
    openlineage_namespace: str = Field("nyc_taxi", description="OpenLineage job namespace shared by both orchestrators.")

    # Spark: local[*] unless SPARK_MASTER (or spark-defaults.conf) names a cluster.
    spark_master: str | None = None
    spark_driver_memory: str = "4g"
    spark_shuffle_partitions: int = 4
    spark_extra_packages: str | None = Field(
        None,
        description="Maven coordinates Spark resolves at start (on aws: org.apache.iceberg:iceberg-aws-bundle:1.9.2).",
    )

    @field_validator("aws_profile", "s3_bucket", "aws_endpoint_url", "datahub_platform_instance",
                     "datahub_gms_url", "openlineage_url", "spark_master", "spark_extra_packages", mode="before")
    @classmethod
    def _empty_is_none(cls, value):
        return None if value == "" else value

    @field_validator("tlc_base_url", "noaa_base_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        return value.rstrip("/")

    # ---- derived locations (one place for every path) ----
    @property
    def is_local(self) -> bool:
        return self.profile == "local"

    @property
    def catalog_db_path(self) -> Path:
        """SQLite file of the local Iceberg SQL catalog."""
        return self.state_dir / "catalog" / "iceberg_catalog.db"

    @property
    def lake_root(self) -> str:
        """Root of the lake: a local directory or s3://bucket."""
        if self.is_local:
            return (self.state_dir / "lake").as_posix()
        from nyc_taxi import aws

        return f"s3://{aws.bucket_name(self)}"

    @property
    def warehouse(self) -> str:
        return f"{self.lake_root}/warehouse"

    @property
    def landing(self) -> str:
        """Where downloaded source files land before they are loaded."""
        return f"{self.lake_root}/landing"

    @property
    def lineage_dir(self) -> Path:
        return self.state_dir / "lineage"

    @property
    def airflow_home(self) -> Path:
        return self.state_dir / "airflow"

    @property
    def metaflow_home(self) -> Path:
        return self.state_dir / "metaflow"


@functools.cache
def get_settings() -> Settings:
    """The process-wide settings (read once)."""
    return Settings()
