"""AWS session, account and bucket naming for the aws profile (boto3; endpoint overridable for moto)."""

from __future__ import annotations

import functools
import hashlib

from nyc_taxi.settings import Settings


def session(settings: Settings):
    import boto3

    return boto3.Session(profile_name=settings.aws_profile or None, region_name=settings.aws_region)


def client(settings: Settings, service: str):
    return session(settings).client(service, endpoint_url=settings.aws_endpoint_url)


@functools.cache
def account_id(settings: Settings) -> str:
    return client(settings, "sts").get_caller_identity()["Account"]


def bucket_name(settings: Settings) -> str:
    """The configured bucket, or airflow-metaflow-<first 12 hex of sha256(account id)>."""
    if settings.s3_bucket:
        return settings.s3_bucket
    digest = hashlib.sha256(account_id(settings).encode()).hexdigest()[:12]
    return f"airflow-metaflow-{digest}"
