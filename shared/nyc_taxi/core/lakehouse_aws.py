"""The aws profile's lakehouse: an S3 bucket (public access blocked, default encryption, TLS-only) and the
Glue Data Catalog."""

from __future__ import annotations

import json

from nyc_taxi.core import aws, s3a_jars
from nyc_taxi.core.lakehouse_base import (
    DATABASE_COMMENT,
    Lakehouse,
)
from nyc_taxi.core.lakehouse_s3 import S3Objects


class AwsLakehouse(S3Objects, Lakehouse):
    """An S3 bucket and the Glue Data Catalog."""

    profile = "aws"

    @property
    def bucket(self) -> str:
        return aws.bucket_name(self.settings)

    @property
    def root(self) -> str:
        return f"s3://{self.bucket}"

    def logical_name(self, relative: str) -> tuple[str, str]:
        return f"s3://{self.bucket}", relative

    def _s3(self):
        return aws.client(self.settings, "s3")

    def spark_storage_conf(self) -> dict[str, str]:
        """Hadoop's S3 connector for the files Spark reads by path (the landed files): AWS's default
        credential chain (the environment, AWS_PROFILE's profile, a role), the profile's region, and a
        given endpoint (a moto server in the tests) spoken to path-style."""
        conf = {
            "spark.hadoop.fs.s3a.aws.credentials.provider": "com.amazonaws.auth.DefaultAWSCredentialsProviderChain",
            "spark.hadoop.fs.s3a.endpoint.region": self.settings.aws_region,
        }
        if endpoint := self.settings.aws_endpoint_url:
            conf |= {
                "spark.hadoop.fs.s3a.endpoint": endpoint,
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower(),
            }
        return conf

    def spark_class_path(self) -> list[str]:
        return [str(jar) for jar in s3a_jars.jars()]  # Hadoop's S3 connector, from PyPI (`bash run setup`)

    def spark_catalog_conf(self, prefix: str) -> dict[str, str]:
        conf = {
            f"{prefix}.type": "glue",
            f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            f"{prefix}.client.region": self.settings.aws_region,
        }
        if self.settings.aws_endpoint_url:
            endpoint = self.settings.aws_endpoint_url
            conf |= {
                f"{prefix}.glue.endpoint": endpoint,
                f"{prefix}.s3.endpoint": endpoint,
                f"{prefix}.s3.path-style-access": "true",
            }
        return conf

    def pyiceberg_properties(self) -> dict[str, str]:
        region = self.settings.aws_region
        props = {"type": "glue", "glue.region": region, "s3.region": region, "warehouse": self.warehouse}
        if self.settings.aws_profile:
            props["glue.profile-name"] = self.settings.aws_profile
        if self.settings.aws_endpoint_url:
            props |= {"glue.endpoint": self.settings.aws_endpoint_url, "s3.endpoint": self.settings.aws_endpoint_url}
        return props

    def describe(self) -> str:
        return f"{self.root} and Glue database {self.settings.database}"

    def _tls_only_policy(self) -> str:
        return json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "DenyInsecureTransport",
                        "Effect": "Deny",
                        "Principal": "*",
                        "Action": "s3:*",
                        "Resource": [f"arn:aws:s3:::{self.bucket}", f"arn:aws:s3:::{self.bucket}/*"],
                        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                    }
                ],
            }
        )

    def create(self) -> list[str]:
        s3, glue, bucket, region = self._s3(), aws.client(self.settings, "glue"), self.bucket, self.settings.aws_region
        done = []
        if bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
            kwargs = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
            s3.create_bucket(Bucket=bucket, **kwargs)
            done.append(f"created bucket s3://{bucket} in {region}")
        # Applied every time: they are idempotent and keep an existing bucket in the wanted state.
        s3.put_public_access_block(
            Bucket=bucket,
            PublicAccessBlockConfiguration={
                "BlockPublicAcls": True,
                "IgnorePublicAcls": True,
                "BlockPublicPolicy": True,
                "RestrictPublicBuckets": True,
            },
        )
        s3.put_bucket_encryption(
            Bucket=bucket,
            ServerSideEncryptionConfiguration={
                "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}, "BucketKeyEnabled": True}]
            },
        )
        s3.put_bucket_policy(Bucket=bucket, Policy=self._tls_only_policy())
        done.append(f"s3://{bucket}: public access blocked, AES256 default encryption, TLS-only policy")
        try:
            glue.get_database(Name=self.settings.database)
        except glue.exceptions.EntityNotFoundException:
            glue.create_database(
                DatabaseInput={
                    "Name": self.settings.database,
                    "Description": DATABASE_COMMENT,
                    "LocationUri": f"{self.warehouse}/{self.settings.database}",
                }
            )
            done.append(f"created Glue database {self.settings.database!r}")
        return done

    def destroy(self) -> list[str]:
        s3, glue, bucket, database = self._s3(), aws.client(self.settings, "glue"), self.bucket, self.settings.database
        done = []
        try:
            tables = glue.get_tables(DatabaseName=database).get("TableList", [])
            for table in tables:
                glue.delete_table(DatabaseName=database, Name=table["Name"])
            glue.delete_database(Name=database)
            done.append(f"deleted Glue database {database!r} ({len(tables)} tables)")
        except glue.exceptions.EntityNotFoundException:
            pass
        if bucket in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
            for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
                objects = [
                    {"Key": o["Key"], "VersionId": o["VersionId"]}
                    for o in page.get("Versions", []) + page.get("DeleteMarkers", [])
                ]
                if objects:
                    s3.delete_objects(Bucket=bucket, Delete={"Objects": objects})
            s3.delete_bucket(Bucket=bucket)
            done.append(f"deleted bucket s3://{bucket}")
        return done
