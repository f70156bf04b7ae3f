"""Every dataset has one identity per profile, and the tools' own translations agree with it."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from pathlib import Path

import pytest
from airflow.sdk import Asset
from datahub_airflow_plugin._airflow_asset_adapter import translate_airflow_asset_to_urn
from datahub_airflow_plugin._datahub_ol_adapter import translate_ol_to_datahub_urn
from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
from openlineage.client.serde import Serde
from openlineage.client.uuid import generate_new_uuid

from nyc_taxi import registry
from nyc_taxi.lineage.spec import validation_errors
from nyc_taxi.settings import REPO_ROOT, Settings

EXPECTED_DATASETS = {
    "yellow_taxi_staging", "yellow_taxi_raw", "weather_staging", "weather_raw",
    "yellow_rides_hourly_actuals", "yellow_rides_hourly_forecast",
    "tlc_yellow_tripdata_files", "noaa_nclimgrid_daily_county_files", "yellow_rides_forecast_model",
}
LINEAGE_DATASETS = [d for d in registry.DATASETS.values() if d.identity(Settings(_env_file=None)).asset_uri]


def _local(**overrides) -> Settings:
    return Settings(_env_file=None, state_dir=Path("/srv/taxi-state"), **overrides)


def test_registry_declares_every_dataset_once():
    assert set(registry.DATASETS) == EXPECTED_DATASETS
    assert len({d.identity(_local()).datahub_urn for d in registry.DATASETS.values()}) == len(EXPECTED_DATASETS)


def test_unknown_dataset_fails_loudly_naming_the_known_ones():
    with pytest.raises(KeyError, match="unknown dataset 'yellow_taxi_rw'.*yellow_taxi_raw"):
        registry.get("yellow_taxi_rw")


@pytest.mark.parametrize("overrides", [{}, {"datahub_platform_instance": "nyc_lake", "datahub_env": "DEV"}],
                         ids=["default", "instance+env"])
def test_table_identities_local(overrides):
    settings = _local(**overrides)
    ident = registry.YELLOW_TAXI_RAW.identity(settings)
    prefix = "nyc_lake." if overrides else ""
    env = overrides.get("datahub_env", "PROD")
    assert ident.datahub_urn == f"urn:li:dataset:(urn:li:dataPlatform:iceberg,{prefix}nyc_taxi.yellow_taxi_raw,{env})"
    assert ident.asset_uri == f"iceberg://{prefix}nyc_taxi.yellow_taxi_raw"
    assert (ident.ol_namespace, ident.ol_name) == ("iceberg://lakehouse", f"{prefix}nyc_taxi.yellow_taxi_raw")
    assert ident.location == "/srv/taxi-state/lake/warehouse/nyc_taxi/yellow_taxi_raw"
    [link] = ident.ol_symlinks
    assert (link.namespace, link.name, link.type) == ("file", ident.location, "LOCATION")
    assert registry.YELLOW_TAXI_RAW.spark_name(settings) == "lakehouse.nyc_taxi.yellow_taxi_raw"


@pytest.mark.parametrize("overrides", [{}, {"datahub_platform_instance": "nyc_lake", "datahub_env": "DEV"}],
                         ids=["default", "instance+env"])
@pytest.mark.parametrize("dataset", LINEAGE_DATASETS, ids=lambda d: d.name)
def test_datahub_plugin_translates_our_asset_and_openlineage_dataset_to_our_urn(dataset, overrides):
    """The seam: DataHub's Airflow plugin, given our Asset or our OpenLineage dataset, lands on our URN."""
    settings = _local(**overrides)
    ident = dataset.identity(settings)
    assert translate_airflow_asset_to_urn(Asset(uri=ident.asset_uri), env=settings.datahub_env) == ident.datahub_urn
    assert translate_ol_to_datahub_urn(ident.openlineage_dataset(), env=settings.datahub_env) == ident.datahub_urn


def test_source_files_identity_and_urls(real_source_defaults):
    settings = _local(tlc_base_url="http://127.0.0.1:8123/")
    files = registry.TLC_YELLOW_TRIP_FILES
    assert files.url(2024, 3, settings) == "http://127.0.0.1:8123/trip-data/yellow_tripdata_2024-03.parquet"
    assert files.landed_path(2024, 3, settings) == "/srv/taxi-state/lake/landing/tlc_yellow_tripdata_files/yellow_tripdata_2024-03.parquet"
    assert registry.NOAA_NCLIMGRID_COUNTY_FILES.url(2024, 2, _local(), var="tmax", status="prelim") == (
        "https://www.ncei.noaa.gov/pub/data/daily-grids/v1-0-0/averages/2024/tmax-202402-cty-prelim.csv")
    assert _local().tlc_base_url == "https://d37ci6vzurychx.cloudfront.net"
    ident = files.identity(settings)
    assert (ident.ol_namespace, ident.ol_name) == ("file", "/srv/taxi-state/lake/landing/tlc_yellow_tripdata_files")
    assert ident.datahub_urn == "urn:li:dataset:(urn:li:dataPlatform:file,/srv/taxi-state/lake/landing/tlc_yellow_tripdata_files,PROD)"


def test_model_identity_is_an_ml_model():
    ident = registry.YELLOW_RIDES_FORECAST_MODEL.identity(_local())
    assert ident.datahub_urn == "urn:li:mlModel:(urn:li:dataPlatform:metaflow,nyc_taxi.yellow_rides_forecast_model,PROD)"
    assert ident.asset_uri is None


@pytest.mark.aws
def test_aws_identities_follow_glue_and_s3_naming(aws_settings):
    account = "123456789012"  # moto's account
    bucket = f"airflow-metaflow-{hashlib.sha256(account.encode()).hexdigest()[:12]}"
    ident = registry.WEATHER_RAW.identity(aws_settings)
    assert ident.location == f"s3://{bucket}/warehouse/nyc_taxi/weather_raw"
    assert ident.datahub_urn == "urn:li:dataset:(urn:li:dataPlatform:iceberg,nyc_taxi.weather_raw,PROD)"
    links = {(s.namespace, s.name, s.type) for s in ident.ol_symlinks}
    assert links == {(f"s3://{bucket}", "warehouse/nyc_taxi/weather_raw", "LOCATION"),
                     (f"arn:aws:glue:eu-west-1:{account}", "table/nyc_taxi/weather_raw", "TABLE")}
    landed = registry.NOAA_NCLIMGRID_COUNTY_FILES.identity(aws_settings)
    assert (landed.ol_namespace, landed.ol_name) == (f"s3://{bucket}", "landing/noaa_nclimgrid_daily_county_files")
    assert landed.datahub_urn == f"urn:li:dataset:(urn:li:dataPlatform:s3,{bucket}/landing/noaa_nclimgrid_daily_county_files,PROD)"
    for dataset in (registry.WEATHER_RAW, registry.NOAA_NCLIMGRID_COUNTY_FILES):
        ident = dataset.identity(aws_settings)
        assert translate_airflow_asset_to_urn(Asset(uri=ident.asset_uri)) == ident.datahub_urn
        assert translate_ol_to_datahub_urn(ident.openlineage_dataset()) == ident.datahub_urn


@pytest.mark.parametrize("profile", ["local", "aws"])
def test_openlineage_datasets_validate_against_the_official_schema(profile, request):
    settings = request.getfixturevalue("aws_settings") if profile == "aws" else _local()
    datasets = [d.identity(settings).openlineage_dataset() for d in registry.DATASETS.values()]
    event = RunEvent(eventType=RunState.COMPLETE, eventTime=dt.datetime.now(dt.timezone.utc).isoformat(),
                     run=Run(runId=str(generate_new_uuid())), job=Job(namespace="nyc_taxi", name="registry_check"),
                     producer="https://github.com/nyc-taxi/lineage-tests", inputs=datasets, outputs=[])
    as_dict = Serde.to_dict(event)
    assert validation_errors(as_dict) == []
    # The check can fail: a symlink without its required type is reported.
    as_dict["inputs"][2]["facets"]["symlinks"]["identifiers"][0].pop("type")
    assert any("'type' is a required property" in e for e in validation_errors(as_dict))


def test_the_registry_is_the_only_place_that_spells_a_table_identity():
    """No URN, Asset URI or qualified table name written out anywhere else in the code."""
    settings = _local()
    spelled = [re.escape(t.identifier(settings)) for t in registry.TABLES.values()] + [r"urn:li:", r"iceberg://"]
    pattern = re.compile("|".join(spelled))
    offenders = []
    for folder in ("airflow", "metaflow", "shared", "infra"):
        for path in (REPO_ROOT / folder).rglob("*"):
            if path.suffix in {".py", ".sql", ".sh", ".cfg", ".toml"} and path.name != "registry.py" and ".venv" not in path.parts:
                offenders += [f"{path.relative_to(REPO_ROOT)}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1)
                              if pattern.search(line)]
    assert offenders == []
