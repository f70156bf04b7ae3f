"""create-infra / destroy-infra for the active profile.

local: the warehouse directory, the SQLite Iceberg catalog and the database namespace.
aws:   the S3 bucket (public access blocked, default encryption, TLS-only policy) and the Glue database.
Both are idempotent and print what they did.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from nyc_taxi import aws
from nyc_taxi.catalog import load_catalog
from nyc_taxi.settings import Settings, get_settings


def create_local(settings: Settings) -> list[str]:
    done = []
    for path in (Path(settings.warehouse), Path(settings.landing), settings.lineage_dir):
        if not path.exists():
            path.mkdir(parents=True)
            done.append(f"created directory {path}")
    catalog_existed = settings.catalog_db_path.exists()
    catalog = load_catalog(settings)  # creates the catalog tables in the SQLite file
    if not catalog_existed:
        done.append(f"created Iceberg SQL catalog {settings.catalog_name!r} at {settings.catalog_db_path}")
    if (settings.database,) not in catalog.list_namespaces():
        catalog.create_namespace(settings.database, {"comment": "NYC taxi demand forecasting"})
        done.append(f"created namespace {settings.database!r}")
    return done


def destroy_local(settings: Settings) -> list[str]:
    done = []
    lake = Path(settings.lake_root)
    for path in (lake, settings.catalog_db_path.parent):
        if path.exists():
            shutil.rmtree(path)
            done.append(f"removed {path}")
    return done


def _tls_only_policy(bucket: str) -> str:
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }],
    })


def create_aws(settings: Settings) -> list[str]:
    s3, glue = aws.client(settings, "s3"), aws.client(settings, "glue")
    bucket = aws.bucket_name(settings)
    done = []
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if bucket not in existing:
        kwargs = {} if settings.aws_region == "us-east-1" else {
            "CreateBucketConfiguration": {"LocationConstraint": settings.aws_region}}
        s3.create_bucket(Bucket=bucket, **kwargs)
        done.append(f"created bucket s3://{bucket} in {settings.aws_region}")
    # Applied every time: they are idempotent and keep an existing bucket in the wanted state.
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={
        "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True})
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={
        "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}, "BucketKeyEnabled": True}]})
    s3.put_bucket_policy(Bucket=bucket, Policy=_tls_only_policy(bucket))
    done.append(f"s3://{bucket}: public access blocked, AES256 default encryption, TLS-only policy")
    try:
        glue.get_database(Name=settings.database)
    except glue.exceptions.EntityNotFoundException:
        glue.create_database(DatabaseInput={
            "Name": settings.database,
            "Description": "NYC taxi demand forecasting",
            "LocationUri": f"{settings.warehouse}/{settings.database}",
        })
        done.append(f"created Glue database {settings.database!r}")
    return done


def destroy_aws(settings: Settings) -> list[str]:
    s3, glue = aws.client(settings, "s3"), aws.client(settings, "glue")
    bucket = aws.bucket_name(settings)
    done = []
    try:
        tables = glue.get_tables(DatabaseName=settings.database).get("TableList", [])
        for table in tables:
            glue.delete_table(DatabaseName=settings.database, Name=table["Name"])
        glue.delete_database(Name=settings.database)
        done.append(f"deleted Glue database {settings.database!r} ({len(tables)} tables)")
    except glue.exceptions.EntityNotFoundException:
        pass
    if bucket in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
        paginator = s3.get_paginator("list_object_versions")
        for page in paginator.paginate(Bucket=bucket):
            objects = [{"Key": o["Key"], "VersionId": o["VersionId"]} for o in page.get("Versions", []) + page.get("DeleteMarkers", [])]
            if objects:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": objects})
        s3.delete_bucket(Bucket=bucket)
        done.append(f"deleted bucket s3://{bucket}")
    return done


def create(settings: Settings | None = None) -> list[str]:
    settings = settings or get_settings()
    return create_local(settings) if settings.is_local else create_aws(settings)


def destroy(settings: Settings | None = None) -> list[str]:
    settings = settings or get_settings()
    return destroy_local(settings) if settings.is_local else destroy_aws(settings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="infra", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["create", "destroy"])
    parser.add_argument("--yes", action="store_true", help="destroy without asking")
    args = parser.parse_args(argv)
    settings = get_settings()
    target = settings.lake_root if settings.is_local else f"s3://{aws.bucket_name(settings)} and Glue database {settings.database}"
    if args.action == "destroy" and not args.yes:
        if not sys.stdin.isatty():
            print(f"refusing to destroy {target} without confirmation: pass --yes", file=sys.stderr)
            return 2
        if input(f"Destroy {target} (profile {settings.profile})? Type 'yes': ").strip() != "yes":
            print("nothing destroyed")
            return 1
    done = create(settings) if args.action == "create" else destroy(settings)
    print(f"[{settings.profile}] " + ("\n".join(done) if done else f"nothing to {args.action}: already in place"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
