"""AWS clients for the aws profile (boto3; the endpoint can point at a moto server in tests)."""

from __future__ import annotations

import functools
import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nyc_taxi.core.settings import Settings


def client(settings: Settings, service: str):
    import boto3
    import botocore.session

    # The profile is the settings' (AWS_PROFILE names it there too); an empty one means the default
    # credential chain, which botocore, reading AWS_PROFILE itself, would take for a profile named "".
    core = botocore.session.Session(session_vars={"profile": (None, None, None, None)})
    session = boto3.Session(
        botocore_session=core, profile_name=settings.aws_profile or None, region_name=settings.aws_region
    )
    return session.client(service, endpoint_url=settings.aws_endpoint_url)


@functools.cache
def account_id(settings: Settings) -> str:
    return client(settings, "sts").get_caller_identity()["Account"]


def bucket_name(settings: Settings) -> str:
    """The configured bucket, or airflow-metaflow-<first 12 hex of sha256(account id)>."""
    if settings.s3_bucket:
        return settings.s3_bucket
    digest = hashlib.sha256(account_id(settings).encode()).hexdigest()[:12]
    return f"airflow-metaflow-{digest}"


def split_s3(uri: str) -> tuple[str, str]:
    """(bucket, key) of an s3:// or s3a:// URI."""
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key
