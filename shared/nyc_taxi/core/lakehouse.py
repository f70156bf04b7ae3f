"""The lakehouse of a profile, chosen in one place: ``lakehouse(settings)``.

A ``Lakehouse`` knows where the data lives (the lake root, its warehouse and landing area), how to
read and write files there, how Spark and pyiceberg reach its Iceberg catalog, and how to create
and remove it. Everything else asks it instead of looking at the profile. Each profile's is a file of its own:

- ``local`` (default, ``lakehouse_local``): a directory under the state directory and an Iceberg SQL catalog on SQLite
  that Spark's JdbcCatalog and pyiceberg's SqlCatalog share.
- ``team`` (``lakehouse_team``): a bucket behind the S3 API (SeaweedFS on this machine, or a given endpoint) and the
  Iceberg JDBC catalog on PostgreSQL, reached by a Spark standalone cluster (``nyc_taxi.core.team``).
- ``aws`` (``lakehouse_aws``): an S3 bucket (public access blocked, default encryption, TLS-only) and the Glue Data Catalog.
"""

from __future__ import annotations

import functools

from nyc_taxi.core.lakehouse_aws import AwsLakehouse
from nyc_taxi.core.lakehouse_base import Lakehouse
from nyc_taxi.core.lakehouse_local import LocalLakehouse
from nyc_taxi.core.lakehouse_team import TeamLakehouse
from nyc_taxi.core.settings import Settings, get_settings

PROFILES: dict[str, type[Lakehouse]] = {"local": LocalLakehouse, "aws": AwsLakehouse, "team": TeamLakehouse}


@functools.cache
def _for(settings: Settings) -> Lakehouse:
    return PROFILES[settings.profile](settings)


def lakehouse(settings: Settings | None = None) -> Lakehouse:
    """The lakehouse of the active profile (the one place where the profile is looked at)."""
    return _for(settings or get_settings())
