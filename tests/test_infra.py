"""create-infra / destroy-infra: local for real, aws against a moto server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nyc_taxi.core import aws
from nyc_taxi.core.catalog import load_catalog
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.settings import Settings


def test_local_create_is_idempotent_and_destroy_removes_everything(tmp_path):
    settings = Settings(_env_file=None, state_dir=tmp_path)
    lake = lakehouse(settings)
    done = lake.create()
    assert any("created namespace 'nyc_taxi'" in line for line in done)
    assert Path(lake.warehouse).is_dir() and settings.catalog_db_path.is_file()
    assert ("nyc_taxi",) in load_catalog(settings).list_namespaces()
    assert lake.create() == []  # second run: nothing to do
    lake.destroy()
    assert not Path(lake.root).exists() and not settings.catalog_db_path.exists()


def test_destroy_without_a_terminal_refuses_without_yes(tmp_path):
    env = {"STATE_DIR": str(tmp_path), "PROFILE": "local", "PATH": "/usr/bin:/bin"}
    lakehouse(Settings(_env_file=None, state_dir=tmp_path)).create()
    result = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.infra", "destroy"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "--yes" in result.stderr
    assert (tmp_path / "lake").is_dir()
    result = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.infra", "destroy", "--yes"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0 and not (tmp_path / "lake").exists()


def test_clean_says_what_it_removes_and_without_a_terminal_refuses_without_yes(tmp_path):
    """What `clean` removes, named first: the state directory, and a team deployment's PostgreSQL data
    (kept under its own user's home when run as root, outside the state directory) even when the state's
    own record of the deployment is gone. Without a terminal and without --yes: nothing removed."""
    from nyc_taxi_proving.deployment import services

    state = tmp_path / "state"
    env = {"STATE_DIR": str(state), "PROFILE": "local", "PATH": "/usr/bin:/bin"}
    settings = Settings(_env_file=None, state_dir=state)
    lakehouse(settings).create()
    postgres = services.data_directories(settings)[0]
    (postgres / "base").mkdir(parents=True)  # a deployment's database, left behind
    clean = [sys.executable, "-m", "nyc_taxi_proving.cli.clean"]
    result = subprocess.run(clean, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert result.returncode == 2 and "pass --yes" in result.stderr, result.stderr
    assert f"{state}: the lake, the catalog" in result.stdout, result.stdout
    assert postgres.is_relative_to(state) or f"{postgres}: the team deployment's service data" in result.stdout
    assert (state / "lake").is_dir() and (postgres / "base").is_dir()
    result = subprocess.run([*clean, "--yes"], env=env, capture_output=True, text=True)
    assert result.returncode == 0 and f"removed {state}" in result.stdout, result.stdout + result.stderr
    assert not state.exists() and not postgres.exists()
    result = subprocess.run(clean, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert result.returncode == 0 and "nothing to remove" in result.stdout


@pytest.mark.parametrize("profile", ["local", pytest.param("aws", marks=pytest.mark.aws)])
def test_a_shared_data_file_is_the_target_tables_own_copy(profile, tmp_path, request):
    """What a new month's append relies on (core/appends.py): deleting the staged file leaves raw's."""
    if profile == "aws":  # a bucket of its own, without create()'s TLS-only policy: moto serves plain HTTP
        aws_settings = request.getfixturevalue("aws_settings")
        settings = aws_settings.model_copy(update={"s3_bucket": f"share-{os.urandom(6).hex()}"})
        aws.client(settings, "s3").create_bucket(
            Bucket=settings.s3_bucket, CreateBucketConfiguration={"LocationConstraint": settings.aws_region}
        )
    else:
        settings = Settings(_env_file=None, state_dir=tmp_path)
        lakehouse(settings).create()
    lake = lakehouse(settings)
    staged = f"{lake.warehouse}/nyc_taxi/staging/data/day=2024-01-01/00000-0.parquet"
    shared = f"{lake.warehouse}/nyc_taxi/raw/data/day=2024-01-01/00000-0.parquet"
    local = tmp_path / "upload" / "00000-0.parquet"
    local.parent.mkdir()
    content = b"PAR1" + os.urandom(4096) + b"PAR1"
    local.write_bytes(content)
    lake.publish(local, staged)
    assert lake.share(staged, shared) is True
    assert lake.share(staged, shared) is False  # there already (shared by an earlier write): kept as it is
    lake.remove(staged)
    assert not lake.exists(staged) and lake.exists(shared)
    with lake.local_copy(shared) as copy:
        assert copy.read_bytes() == content


@pytest.mark.aws
def test_aws_create_secures_the_bucket_and_creates_the_glue_database(aws_settings):
    s3, glue = aws.client(aws_settings, "s3"), aws.client(aws_settings, "glue")
    bucket = aws.bucket_name(aws_settings)
    assert bucket == "airflow-metaflow-" + hashlib.sha256(b"123456789012").hexdigest()[:12]

    lake = lakehouse(aws_settings)
    done = lake.create()
    assert f"created bucket s3://{bucket} in eu-west-1" in done and "created Glue database 'nyc_taxi'" in done
    block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert block == {
        "BlockPublicAcls": True,
        "IgnorePublicAcls": True,
        "BlockPublicPolicy": True,
        "RestrictPublicBuckets": True,
    }
    rule = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    assert policy["Statement"][0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert s3.get_bucket_location(Bucket=bucket)["LocationConstraint"] == "eu-west-1"
    database = glue.get_database(Name="nyc_taxi")["Database"]
    assert database["LocationUri"] == f"s3://{bucket}/warehouse/nyc_taxi"

    again = lake.create()  # idempotent: nothing new created
    assert not any(line.startswith("created") for line in again)

    # The TLS-only policy is enforced: moto answers plain HTTP writes with 403.
    with pytest.raises(s3.exceptions.ClientError, match="Forbidden"):
        s3.put_object(Bucket=bucket, Key="landing/x.parquet", Body=b"PAR1")
    glue.create_table(DatabaseName="nyc_taxi", TableInput={"Name": "weather_raw"})
    done = lake.destroy()
    assert done == ["deleted Glue database 'nyc_taxi' (1 tables)", f"deleted bucket s3://{bucket}"]
    assert bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}
    assert lake.destroy() == []


@pytest.mark.aws
def test_aws_keys_are_used_and_never_written_or_printed(moto_endpoint, tmp_path):
    """`bash run create-infra` on the aws profile signs its S3, Glue and STS calls with the keys in the
    environment (moto checks the signatures' form); neither key is in its output or anything it wrote."""
    import secrets

    keys = {"AWS_ACCESS_KEY_ID": "AKIA" + secrets.token_hex(8).upper(), "AWS_SECRET_ACCESS_KEY": secrets.token_hex(20)}
    env = {
        "PATH": "/usr/bin:/bin",
        "PROFILE": "aws",
        "AWS_PROFILE": "",
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": moto_endpoint,
        "STATE_DIR": str(tmp_path / "state"),
        **keys,
    }
    created = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.infra", "create"], env=env, capture_output=True, text=True, timeout=300
    )
    assert created.returncode == 0, created.stderr[-3000:]
    assert "created Glue database 'nyc_taxi'" in created.stdout + created.stderr  # the keys did their work
    destroyed = subprocess.run(
        [sys.executable, "-m", "nyc_taxi.cli.infra", "destroy", "--yes"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert destroyed.returncode == 0, destroyed.stderr[-3000:]
    output = created.stdout + created.stderr + destroyed.stdout + destroyed.stderr
    assert [name for name, value in keys.items() if value in output] == []
    written = [
        p for p in tmp_path.rglob("*") if p.is_file() and any(v.encode() in p.read_bytes() for v in keys.values())
    ]
    assert written == []


def test_a_forecast_table_of_the_old_key_is_refused_until_destroy_infra_drops_it(tmp_path):
    """A forecast table written when its key was (zone, hour): a later origin replaced the hours an earlier one
    forecast, so its rows are parts of forecasts that look whole. Its writers refuse it (every writer ensures its
    tables first), naming the command that drops it; that command asks first, drops the table and its files,
    and the next writer creates it under the registry's key."""
    import dataclasses
    import datetime as dt

    import pyarrow as pa

    from nyc_taxi.core import datasets as d
    from nyc_taxi.core.catalog import load_table
    from nyc_taxi.core.tables import PRIMARY_KEY_PROPERTY, KeyChanged, ensure_tables, iceberg_schema

    settings = Settings(_env_file=None, state_dir=tmp_path)
    lakehouse(settings).create()
    forecast = d.YELLOW_RIDES_HOURLY_FORECAST
    ensure_tables([dataclasses.replace(forecast, primary_key=("pickup_location_id", "forecast_hour"))], settings)
    row = {
        "pickup_location_id": 1,
        "forecast_hour": dt.datetime(2024, 2, 15, 3),
        "predicted_ride_count": 1.5,
        "model_name": "weather_adjusted",
        "model_version": "TrainForecastModelFlow/7/train_forecasting_model/4",
        "as_of_datetime": dt.datetime(2024, 2, 15),
        "created_at": dt.datetime(2024, 3, 1, tzinfo=dt.UTC),
    }
    load_table(forecast, settings).append(pa.Table.from_pylist([row], schema=iceberg_schema(forecast).as_arrow()))
    files = {p for p in tmp_path.rglob("*.parquet") if forecast.name in str(p)}
    assert files
    with pytest.raises(KeyChanged) as refused:
        ensure_tables([forecast], settings)
    said = str(refused.value)
    assert "written under the key (pickup_location_id, forecast_hour)" in said, said
    assert f"`bash run destroy-infra --table {forecast.name}`" in said, said
    assert load_table(forecast, settings).scan().to_arrow().num_rows == 1  # refused: nothing changed

    env = {"STATE_DIR": str(tmp_path), "PROFILE": "local", "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "nyc_taxi.cli.infra", "destroy", "--table", forecast.name]
    asked = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert asked.returncode == 2 and "--yes" in asked.stderr and files <= set(tmp_path.rglob("*.parquet"))
    done = subprocess.run([*command, "--yes"], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and f"dropped {forecast.name}," in done.stdout, done.stderr
    assert not files & set(tmp_path.rglob("*.parquet"))  # its data files went with it
    ensure_tables([forecast], settings)
    table = load_table(forecast, settings)
    assert table.properties[PRIMARY_KEY_PROPERTY] == "model_name,as_of_datetime,pickup_location_id,forecast_hour"
    assert table.scan().to_arrow().num_rows == 0


@pytest.mark.aws
@pytest.mark.spark
def test_the_aws_profiles_spark_reads_a_landed_file_through_hadoops_s3_connector(moto_endpoint, tmp_path):
    """On the aws profile Spark reads the landed files by their s3a:// path: Hadoop's S3 connector on its
    class path (the jars `bash run setup` takes from PyPI), AWS's default credential chain (here the keys in
    the environment, no AWS_PROFILE), a given endpoint path-style. The rows are pyarrow's own count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ["HOME"],
        "PROFILE": "aws",
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": moto_endpoint,
        "S3_BUCKET": f"landing-{os.urandom(6).hex()}",
        "STATE_DIR": str(tmp_path / "state"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"],
    }
    settings = Settings(
        _env_file=None,
        profile="aws",
        aws_endpoint_url=moto_endpoint,
        aws_region="eu-west-1",
        s3_bucket=env["S3_BUCKET"],
        state_dir=tmp_path / "state",
    )
    aws.client(settings, "s3").create_bucket(
        Bucket=settings.s3_bucket, CreateBucketConfiguration={"LocationConstraint": settings.aws_region}
    )
    lake = lakehouse(settings)
    pq.write_table(pa.table({"trip": list(range(1234))}), tmp_path / "month.parquet")
    location = lake.location("landing/tlc/month.parquet")
    lake.publish(tmp_path / "month.parquet", location)
    # the session's configuration for this profile but its Glue catalog, which needs Iceberg's AWS bundle
    # that no registry reachable here carries (docs/operations.md): the storage settings and class path
    probe = """
from pyspark.sql import SparkSession
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.settings import get_settings
from nyc_taxi.core.spark_jvm import session_conf
conf = session_conf(get_settings())
builder = SparkSession.builder
for key, value in conf.items():
    if not key.startswith("spark.sql.catalog.") and key != "spark.sql.defaultCatalog":
        builder = builder.config(key, value)
path = lakehouse().spark_path(LOCATION)
print(path, builder.getOrCreate().read.parquet(path).count())
""".replace("LOCATION", repr(location))
    read = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert read.returncode == 0, read.stderr[-4000:]
    assert read.stdout.split()[-2:] == [f"s3a://{settings.s3_bucket}/landing/tlc/month.parquet", "1234"]


def test_team_up_goes_on_without_the_drivers_class_archive_when_it_cannot_be_built(tmp_path, monkeypatch):
    """The archive only makes drivers start sooner: a JVM that refuses to write it (or a jar missing) is
    said, with the JVM's own last word, and `up` goes on; the drivers start without it."""
    from nyc_taxi.core import spark_jvm
    from nyc_taxi_proving.deployment import services

    settings = Settings(_env_file=None, profile="team", state_dir=tmp_path)
    refused = subprocess.CalledProcessError(1, ["java"], stderr=b"...\nUnrecognized VM option 'ArchiveClassesAtExit'\n")
    for error, word in (
        (refused, "Unrecognized VM option 'ArchiveClassesAtExit'"),
        (FileNotFoundError("no jar"), "no jar"),
        (ImportError("no module named pyspark"), "no module named pyspark"),
    ):

        def fails(_settings, error=error):
            raise error

        monkeypatch.setattr(spark_jvm, "build_class_archive", fails)
        said = services.drivers_class_archive(settings)
        assert said == f"Spark drivers' class-data-sharing archive: none, building it failed: {word}"
