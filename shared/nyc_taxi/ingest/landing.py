"""The lake's landing area: a local directory or an S3 prefix. Files appear there whole or not at all."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from nyc_taxi.settings import Settings, get_settings


def _split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key


def exists(location: str, settings: Settings | None = None) -> bool:
    if location.startswith("s3://"):
        from nyc_taxi import aws

        bucket, key = _split_s3(location)
        found = aws.client(settings or get_settings(), "s3").list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
        return any(o["Key"] == key for o in found.get("Contents", []))
    return Path(location).is_file()


@contextmanager
def local_copy(location: str, settings: Settings | None = None) -> Iterator[Path]:
    """A local path to read the landed file from (the file itself when local)."""
    if not location.startswith("s3://"):
        yield Path(location)
        return
    from nyc_taxi import aws

    bucket, key = _split_s3(location)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(key).name
        aws.client(settings or get_settings(), "s3").download_file(bucket, key, str(path))
        yield path


def publish(local_file: Path, location: str, settings: Settings | None = None) -> None:
    """Move a validated local file to its landing location atomically (rename, or one S3 PUT)."""
    if location.startswith("s3://"):
        from nyc_taxi import aws

        bucket, key = _split_s3(location)
        aws.client(settings or get_settings(), "s3").upload_file(str(local_file), bucket, key)
        return
    target = Path(location)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(local_file, target.with_suffix(target.suffix + ".part"))
    os.replace(target.with_suffix(target.suffix + ".part"), target)


def spark_path(location: str) -> str:
    """How Spark reads a landed file: s3a:// for S3 (Hadoop's connector), the path otherwise."""
    return "s3a://" + location.split("://", 1)[1] if location.startswith("s3://") else location
