"""Every dataset and job has one identity per profile, and the tools' own translations agree with it."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from pathlib import Path

import pytest
from airflow.sdk import Asset
from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
from openlineage.client.serde import Serde
from openlineage.client.uuid import generate_new_uuid
from plugin_internals import translate_airflow_asset_to_urn, translate_ol_to_datahub_urn

from nyc_taxi.core import datasets as d
from nyc_taxi.core import jobs, registry
from nyc_taxi.core.naming import identity, landed_location, published_url, spark_table
from nyc_taxi.core.settings import REPO_ROOT, Settings
from nyc_taxi.lineage.spec import validation_errors

EXPECTED_DATASETS = {
    "tlc_yellow_tripdata_published",
    "tlc_yellow_tripdata_landed",
    "noaa_nclimgrid_daily_county_published",
    "noaa_nclimgrid_daily_county_landed",
    "yellow_taxi_staging",
    "yellow_taxi_raw",
    "weather_staging",
    "weather_raw",
    "yellow_rides_hourly_actuals",
    "yellow_rides_hourly_forecast",
    "yellow_rides_forecast_model",
    "yellow_rides_forecast_scores",
}
NOT_A_MODEL = [dataset for dataset in d.DATASETS.values() if not isinstance(dataset, d.Model)]


def _local(**overrides) -> Settings:
    return Settings(_env_file=None, state_dir=Path("/srv/taxi-state"), **overrides)


def test_registry_declares_every_dataset_once():
    assert set(d.DATASETS) == EXPECTED_DATASETS
    assert len({identity(x, _local()).datahub_urn for x in d.DATASETS.values()}) == len(EXPECTED_DATASETS)


def test_unknown_dataset_fails_loudly_naming_the_known_ones():
    with pytest.raises(KeyError, match="unknown dataset 'yellow_taxi_rw'.*yellow_taxi_raw"):
        registry.get("yellow_taxi_rw")


@pytest.mark.parametrize(
    "overrides", [{}, {"datahub_platform_instance": "nyc_lake", "datahub_env": "DEV"}], ids=["default", "instance+env"]
)
def test_table_identities_local(overrides):
    settings = _local(**overrides)
    ident = identity(d.YELLOW_TAXI_RAW, settings)
    prefix = "nyc_lake." if overrides else ""
    env = overrides.get("datahub_env", "PROD")
    assert ident.datahub_urn == f"urn:li:dataset:(urn:li:dataPlatform:iceberg,{prefix}nyc_taxi.yellow_taxi_raw,{env})"
    assert ident.asset_uri == f"iceberg://{prefix}nyc_taxi.yellow_taxi_raw"
    assert (ident.ol_namespace, ident.ol_name) == ("iceberg://lakehouse", f"{prefix}nyc_taxi.yellow_taxi_raw")
    assert ident.location == "/srv/taxi-state/lake/warehouse/nyc_taxi/yellow_taxi_raw"
    [link] = ident.ol_symlinks
    assert (link.namespace, link.name, link.type) == ("file", ident.location, "LOCATION")
    assert spark_table(d.YELLOW_TAXI_RAW, settings) == "lakehouse.nyc_taxi.yellow_taxi_raw"


@pytest.mark.parametrize(
    "overrides", [{}, {"datahub_platform_instance": "nyc_lake", "datahub_env": "DEV"}], ids=["default", "instance+env"]
)
@pytest.mark.parametrize("dataset", NOT_A_MODEL, ids=lambda x: x.name)
@pytest.mark.guards
def test_datahub_plugin_translates_our_asset_and_openlineage_dataset_to_our_urn(dataset, overrides):
    """The seam: DataHub's Airflow plugin, given our Asset or our OpenLineage dataset, lands on our URN."""
    settings = _local(**overrides)
    ident = identity(dataset, settings)
    if ident.asset_uri:
        assert translate_airflow_asset_to_urn(Asset(uri=ident.asset_uri), env=settings.datahub_env) == ident.datahub_urn
    assert translate_ol_to_datahub_urn(ident.openlineage_dataset(), env=settings.datahub_env) == ident.datahub_urn


def test_published_files_are_named_by_their_url_and_landed_files_by_the_lake(real_source_defaults):
    settings = _local(tlc_base_url="http://127.0.0.1:8123/")
    published, landed = d.TLC_YELLOW_TRIPDATA_PUBLISHED, d.TLC_YELLOW_TRIPDATA_LANDED
    assert (
        published_url(published, 2024, 3, settings) == "http://127.0.0.1:8123/trip-data/yellow_tripdata_2024-03.parquet"
    )
    assert landed_location(landed, 2024, 3, settings) == (
        "/srv/taxi-state/lake/landing/tlc_yellow_tripdata_landed/yellow_tripdata_2024-03.parquet"
    )
    assert published_url(d.NOAA_NCLIMGRID_DAILY_COUNTY_PUBLISHED, 2024, 2, _local(), var="tmax", status="prelim") == (
        "https://www.ncei.noaa.gov/pub/data/daily-grids/v1-0-0/averages/2024/tmax-202402-cty-prelim.csv"
    )
    assert _local().tlc_base_url == "https://d37ci6vzurychx.cloudfront.net"

    public = identity(published, _local())
    assert (public.ol_namespace, public.ol_name) == (
        "https://d37ci6vzurychx.cloudfront.net",
        "/trip-data/yellow_tripdata_*.parquet",
    )
    assert public.datahub_urn == "urn:li:dataset:(urn:li:dataPlatform:https,/trip-data/yellow_tripdata_*.parquet,PROD)"
    # a fixture server on 127.0.0.1 is one source whatever port it listens on this time
    fixture = identity(published, settings)
    assert (fixture.ol_namespace, fixture.ol_name) == ("http://127.0.0.1", "/trip-data/yellow_tripdata_*.parquet")
    other_port = identity(published, _local(tlc_base_url="http://127.0.0.1:40123"))
    assert (other_port.datahub_urn, other_port.ol_namespace, other_port.ol_name) == (
        fixture.datahub_urn,
        fixture.ol_namespace,
        fixture.ol_name,
    )
    assert (
        identity(published, _local(tlc_base_url="https://mirror.example.org:8443")).ol_namespace
        == "https://mirror.example.org:8443"
    )
    noaa = identity(d.NOAA_NCLIMGRID_DAILY_COUNTY_PUBLISHED, _local())
    assert (noaa.ol_namespace, noaa.ol_name) == (
        "https://www.ncei.noaa.gov",
        "/pub/data/daily-grids/v1-0-0/averages/*/*-cty-*.csv",
    )

    ident = identity(landed, settings)
    assert (ident.ol_namespace, ident.ol_name) == ("file://lakehouse", "/landing/tlc_yellow_tripdata_landed")
    assert (
        ident.datahub_urn
        == "urn:li:dataset:(urn:li:dataPlatform:file,lakehouse/landing/tlc_yellow_tripdata_landed,PROD)"
    )
    assert ident.asset_uri == "file://lakehouse/landing/tlc_yellow_tripdata_landed"
    [link] = ident.ol_symlinks
    assert (link.namespace, link.name, link.type) == (
        "file",
        "/srv/taxi-state/lake/landing/tlc_yellow_tripdata_landed",
        "LOCATION",
    )


def test_a_clone_elsewhere_gives_every_dataset_the_same_node():
    here, there = _local(), Settings(_env_file=None, state_dir=Path("/home/someone/else/.state"))
    for dataset in d.DATASETS.values():
        a, b = identity(dataset, here), identity(dataset, there)
        assert (a.datahub_urn, a.ol_namespace, a.ol_name, a.asset_uri) == (
            b.datahub_urn,
            b.ol_namespace,
            b.ol_name,
            b.asset_uri,
        )


def test_model_identity_is_an_ml_model():
    ident = identity(d.YELLOW_RIDES_FORECAST_MODEL, _local())
    assert (
        ident.datahub_urn == "urn:li:mlModel:(urn:li:dataPlatform:metaflow,nyc_taxi.yellow_rides_forecast_model,PROD)"
    )
    assert ident.asset_uri is None


def test_jobs_are_declared_once_with_their_qualified_names():
    assert set(jobs.PIPELINES) == {
        "ingest_yellow_taxi_data",
        "ingest_weather_data",
        "train_forecast_model",
        "TrainForecastModelFlow",
    }
    assert jobs.INGEST_YELLOW_TAXI_DATA.merge_upsert_staging_into_raw_yellow.qualified_name == (
        "ingest_yellow_taxi_data.merge_upsert_staging_into_raw_yellow"
    )
    assert registry.job("TrainForecastModelFlow.compute_actuals").reads == (d.YELLOW_TAXI_RAW,)
    with pytest.raises(AttributeError, match="has no job 'compute_actual'.*compute_actuals"):
        jobs.TRAINING_FLOW.compute_actual  # noqa: B018
    for pipeline in jobs.PIPELINES.values():
        assert (REPO_ROOT / pipeline.code).is_file(), pipeline.code


def test_runs_go_together_only_where_their_dags_share_no_dataset_a_months_two_loads_do():
    """``dag_runs`` triggers a run together with the runs given just before it when their DAGs share no
    dataset: a month's taxi and weather loads write their own tables; a DAG's next run, the training DAG
    (its work is its flow's: it declares none) and a DAG the project does not declare wait."""
    from nyc_taxi.airflow_adapter.dag_runs import together

    taxi, weather, train = (
        p.name for p in (jobs.INGEST_YELLOW_TAXI_DATA, jobs.INGEST_WEATHER_DATA, jobs.TRAIN_FORECAST_MODEL)
    )
    specs = [
        f'{taxi}:{{"month": "2024-01"}}',
        f'{weather}:{{"month": "2024-01"}}',
        f'{weather}:{{"month": "2024-02"}}',
        f'{taxi}:{{"month": "2024-02"}}',
        f"{train}:{{}}",
        train,
        "not_declared",
        taxi,
    ]
    groups = together(specs)
    assert [[dag for dag, _ in group] for group in groups] == [
        [taxi, weather],
        [weather, taxi],
        [train],
        [train],
        ["not_declared"],
        [taxi],
    ]
    assert groups[1] == [(weather, {"month": "2024-02"}), (taxi, {"month": "2024-02"})]
    # what a pipeline reads counts as much as what it writes
    reader = jobs.Pipeline(
        "reads_taxi_raw",
        "airflow",
        "",
        "x",
        jobs=(jobs.Job("j", "", reads=(d.YELLOW_TAXI_RAW,), writes=(d.YELLOW_RIDES_HOURLY_ACTUALS,)),),
    )
    assert not reader.runs_beside(jobs.INGEST_YELLOW_TAXI_DATA)
    assert not jobs.INGEST_YELLOW_TAXI_DATA.runs_beside(reader)
    assert reader.runs_beside(jobs.INGEST_WEATHER_DATA) and jobs.INGEST_WEATHER_DATA.runs_beside(reader)


@pytest.mark.aws
def test_aws_identities_follow_glue_and_s3_naming(aws_settings):
    account = "123456789012"  # moto's account
    bucket = f"airflow-metaflow-{hashlib.sha256(account.encode()).hexdigest()[:12]}"
    ident = identity(d.WEATHER_RAW, aws_settings)
    assert ident.location == f"s3://{bucket}/warehouse/nyc_taxi/weather_raw"
    assert ident.datahub_urn == "urn:li:dataset:(urn:li:dataPlatform:iceberg,nyc_taxi.weather_raw,PROD)"
    links = {(s.namespace, s.name, s.type) for s in ident.ol_symlinks}
    assert links == {
        (f"s3://{bucket}", "warehouse/nyc_taxi/weather_raw", "LOCATION"),
        (f"arn:aws:glue:eu-west-1:{account}", "table/nyc_taxi/weather_raw", "TABLE"),
    }
    landed = identity(d.NOAA_NCLIMGRID_DAILY_COUNTY_LANDED, aws_settings)
    assert (landed.ol_namespace, landed.ol_name) == (f"s3://{bucket}", "landing/noaa_nclimgrid_daily_county_landed")
    assert (
        landed.datahub_urn
        == f"urn:li:dataset:(urn:li:dataPlatform:s3,{bucket}/landing/noaa_nclimgrid_daily_county_landed,PROD)"
    )
    assert landed.ol_symlinks == ()  # on S3 the logical and the physical name are one
    for dataset in (d.WEATHER_RAW, d.NOAA_NCLIMGRID_DAILY_COUNTY_LANDED):
        ident = identity(dataset, aws_settings)
        assert translate_airflow_asset_to_urn(Asset(uri=ident.asset_uri)) == ident.datahub_urn
        assert translate_ol_to_datahub_urn(ident.openlineage_dataset()) == ident.datahub_urn


@pytest.mark.parametrize("profile", ["local", "aws"])
def test_openlineage_datasets_validate_against_the_official_schema(profile, request):
    settings = request.getfixturevalue("aws_settings") if profile == "aws" else _local()
    datasets = [identity(x, settings).openlineage_dataset() for x in d.DATASETS.values()]
    event = RunEvent(
        eventType=RunState.COMPLETE,
        eventTime=dt.datetime.now(dt.UTC).isoformat(),
        run=Run(runId=str(generate_new_uuid())),
        job=Job(namespace="nyc_taxi", name="registry_check"),
        producer="https://github.com/nyc-taxi/lineage-tests",
        inputs=datasets,
        outputs=[],
    )
    as_dict = Serde.to_dict(event)
    assert validation_errors(as_dict) == []
    # The check can fail: a symlink without its required type is reported.
    with_symlinks = next(i for i in as_dict["inputs"] if i.get("facets", {}).get("symlinks"))
    with_symlinks["facets"]["symlinks"]["identifiers"][0].pop("type")
    assert any("'type' is a required property" in e for e in validation_errors(as_dict))


def test_only_the_naming_rules_spell_an_identity():
    """No URN, Asset URI or qualified table name written out anywhere else in the code (the Metaflow lineage
    package is not this project's: its caller names the datasets, and its tests spell what it must emit)."""
    settings = _local()
    spelled = [re.escape(f"{settings.database}.{t.name}") for t in d.TABLES.values()] + [r"urn:li:", r"iceberg://"]
    pattern = re.compile("|".join(spelled))
    offenders = []
    for folder in ("airflow", "metaflow", "shared", "infra"):
        for path in (REPO_ROOT / folder).rglob("*"):
            if (
                path.suffix in {".py", ".sql", ".sh", ".cfg", ".toml"}
                and path.name != "naming.py"
                and ".venv" not in path.parts
                and "metaflow_lineage" not in path.parts
            ):
                offenders += [
                    f"{path.relative_to(REPO_ROOT)}:{n}"
                    for n, line in enumerate(path.read_text().splitlines(), 1)
                    if pattern.search(line)
                ]
    assert offenders == []
