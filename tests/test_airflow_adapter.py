"""The Airflow adapter's reading of the DataHub plugin's configuration equals the plugin's own (a private
module of the plugin: if the plugin changes it, this fails, not the lineage quietly)."""

from __future__ import annotations

import pytest
from plugin_internals import get_lineage_config

from nyc_taxi.airflow_adapter.datahub_connection import plugin_connection, plugin_emitter


@pytest.mark.parametrize(
    "environment",
    [
        {},  # the project's configuration (conftest applies it)
        {"AIRFLOW__DATAHUB__ENABLED": "False"},
        {"AIRFLOW__DATAHUB__CONN_ID": "datahub_file, datahub_rest_default"},
        {"AIRFLOW__DATAHUB__CONN_ID": None, "AIRFLOW__DATAHUB__ENABLED": None},  # the plugin's defaults
    ],
)
def test_the_plugin_connection_is_read_as_the_plugin_reads_it(monkeypatch, environment):
    for name, value in environment.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    theirs = get_lineage_config()
    assert plugin_connection() == (theirs.enabled, theirs._datahub_connection_ids)


def test_the_emitter_is_the_one_the_plugin_would_make():
    theirs = get_lineage_config().make_emitter_hook().make_emitter()
    ours = plugin_emitter()
    assert type(ours) is type(theirs)
    assert ours._filename == theirs._filename  # the same record file


def test_no_emitter_when_the_plugin_is_off(monkeypatch):
    monkeypatch.setenv("AIRFLOW__DATAHUB__ENABLED", "False")
    assert plugin_emitter() is None
