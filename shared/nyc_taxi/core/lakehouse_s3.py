"""A lake's files behind the S3 API (the team profile's bucket, or AWS's): read, written, listed and removed."""

from __future__ import annotations

import datetime as dt
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nyc_taxi.core import aws


class S3Objects:
    """A lake's files as objects behind the S3 API (boto3): the aws profile's bucket, the team profile's."""

    def _s3(self): ...

    def storage_name(self, location: str) -> tuple[str, str]:
        bucket, key = aws.split_s3(location)
        return f"s3://{bucket}", key

    def exists(self, location: str) -> bool:
        bucket, key = aws.split_s3(location)
        found = self._s3().list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
        return any(o["Key"] == key for o in found.get("Contents", []))

    @contextmanager
    def local_copy(self, location: str) -> Iterator[Path]:
        bucket, key = aws.split_s3(location)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(key).name
            self._s3().download_file(bucket, key, str(path))
            yield path

    def publish(self, local_file: Path, location: str) -> None:
        bucket, key = aws.split_s3(location)
        self._s3().upload_file(str(local_file), bucket, key)  # one PUT: whole or not at all

    def remove(self, location: str) -> None:
        bucket, key = aws.split_s3(location)
        self._s3().delete_object(Bucket=bucket, Key=key)

    def listing(self, folder: str) -> list[tuple[str, dt.datetime]]:
        bucket, prefix = aws.split_s3(folder)
        scheme, found = folder.split("://", 1)[0], []
        for page in (
            self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix.rstrip("/") + "/")
        ):
            found += [(f"{scheme}://{bucket}/{o['Key']}", o["LastModified"]) for o in page.get("Contents", [])]
        return found

    def share(self, location: str, target: str) -> bool:
        if self.exists(target):
            return False
        bucket, key = aws.split_s3(location)
        target_bucket, target_key = aws.split_s3(target)
        # S3 copies server-side: no bytes pass through this process (boto3 goes multipart above 8 MB)
        self._s3().copy({"Bucket": bucket, "Key": key}, target_bucket, target_key)
        return True

    def spark_path(self, location: str) -> str:
        return "s3a://" + location.split("://", 1)[1]  # Hadoop's S3 connector
