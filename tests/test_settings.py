"""One settings object: defaults, environment overrides, and clear errors for bad values."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.settings import NOAA_BASE_URL, TLC_BASE_URL, Settings


def test_defaults_are_the_local_profile_and_the_real_sources(tmp_path, real_source_defaults):
    s = Settings(_env_file=None, state_dir=tmp_path)
    assert s.profile == "local" and s.database == "nyc_taxi"
    assert s.tlc_base_url == TLC_BASE_URL == "https://d37ci6vzurychx.cloudfront.net"
    assert s.noaa_base_url == NOAA_BASE_URL == "https://www.ncei.noaa.gov"
    assert lakehouse(s).warehouse == f"{tmp_path}/lake/warehouse"
    assert s.catalog_db_path == tmp_path / "catalog" / "iceberg_catalog.db"
    assert s.aws_profile == "sandbox"


def test_environment_overrides(monkeypatch, tmp_path):
    monkeypatch.setenv("TLC_BASE_URL", "http://127.0.0.1:9999/")
    monkeypatch.setenv("DATAHUB_PLATFORM_INSTANCE", "")
    monkeypatch.setenv("SPARK_MASTER", "spark://127.0.0.1:7077")
    s = Settings(_env_file=None, state_dir=tmp_path)
    assert s.tlc_base_url == "http://127.0.0.1:9999"
    assert s.datahub_platform_instance is None
    assert s.spark_master == "spark://127.0.0.1:7077"


def test_dotenv_file_is_read(tmp_path, real_source_defaults):
    env_file = tmp_path / ".env"
    env_file.write_text("NOAA_BASE_URL=http://127.0.0.1:1234\nDATAHUB_ENV=DEV\n")
    s = Settings(_env_file=env_file, state_dir=tmp_path)
    assert (s.noaa_base_url, s.datahub_env) == ("http://127.0.0.1:1234", "DEV")


def test_unknown_profile_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("PROFILE", "gcp")
    with pytest.raises(ValidationError, match="(?s)profile.*'local', 'aws' or 'team'"):
        Settings(_env_file=None)


def test_secrets_are_not_printed(tmp_path):
    s = Settings(
        _env_file=None,
        state_dir=tmp_path,
        datahub_token="very-secret-token",
        postgres_url="postgresql://team:very-secret-db@db.internal:5432",
        redis_url="redis://:very-secret-broker@cache.internal:6379/0",
    )
    for secret in ("very-secret-token", "very-secret-db", "very-secret-broker"):
        assert secret not in repr(s) and secret not in str(s.model_dump())
    assert s.datahub_token.get_secret_value() == "very-secret-token"
