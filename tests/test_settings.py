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
    assert s.aws_profile is None  # AWS's default credential chain


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
        datahub_gms_token="very-secret-token",
        postgres_url="postgresql://team:very-secret-db@db.internal:5432",
        redis_url="redis://:very-secret-broker@cache.internal:6379/0",
    )
    for secret in ("very-secret-token", "very-secret-db", "very-secret-broker"):
        assert secret not in repr(s) and secret not in str(s.model_dump())
    assert s.datahub_gms_token.get_secret_value() == "very-secret-token"


def test_the_state_directorys_settings_file_is_read_when_a_process_starts_and_the_environment_wins(
    monkeypatch, tmp_path, real_source_defaults
):
    """A running Airflow's tasks read <state>/settings.env at their start: what a state directory sets
    there reaches them without restarting Airflow; a variable of the process's own environment wins."""
    from nyc_taxi.core.settings import get_settings, state_settings_file

    monkeypatch.setenv("STATE_DIR", str(tmp_path))
    state_settings_file(tmp_path).write_text(
        "TLC_BASE_URL=http://127.0.0.1:4321\nNOAA_BASE_URL=http://127.0.0.1:4321\n"
    )
    get_settings.cache_clear()
    try:
        assert get_settings().tlc_base_url == "http://127.0.0.1:4321"
        monkeypatch.setenv("NOAA_BASE_URL", "http://127.0.0.1:9")
        get_settings.cache_clear()
        assert (get_settings().tlc_base_url, get_settings().noaa_base_url) == (
            "http://127.0.0.1:4321",
            "http://127.0.0.1:9",
        )
        state_settings_file(tmp_path).unlink()
        monkeypatch.delenv("NOAA_BASE_URL")
        get_settings.cache_clear()
        assert get_settings().tlc_base_url == TLC_BASE_URL
    finally:
        get_settings.cache_clear()


def test_the_team_scheduler_queues_no_more_tasks_than_its_celery_workers_take_at_once(tmp_path):
    """Airflow's parallelism on the team profile equals the Celery workers' slots in supervisord.conf: a task
    waiting for a free worker is not 'queued', so the queued timeout only fails a task whose message was lost."""
    import configparser
    import re

    from nyc_taxi.airflow_adapter.environment import airflow_environment
    from nyc_taxi_proving.deployment.supervisor import CONFIG, program_names

    parser = configparser.RawConfigParser()
    parser.read(CONFIG)
    concurrency = int(re.search(r"--concurrency (\d+)", parser.get("program:airflow-worker", "command"))[1])
    workers = [name for name in program_names() if name.startswith("airflow-worker-")]
    env = airflow_environment(Settings(_env_file=None, profile="team", state_dir=tmp_path))
    assert int(env["AIRFLOW__CORE__PARALLELISM"]) == len(workers) * concurrency == 2
