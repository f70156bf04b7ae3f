"""Each tool's own settings, as a user of that tool has them, win over the project's defaults: Airflow's
``AIRFLOW__…`` variables and airflow.cfg, OpenLineage's ``openlineage.yml`` and variables, DataHub's
variables and ``~/.datahubenv``, Metaflow's configuration and profile. The example files of docs/examples/
are read here as a user would use them. Whole runs with these settings: test_faults.py (a DAG run),
test_training_flow.py (flow runs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nyc_taxi.airflow_adapter.environment import (
    PROJECT_SET,
    REQUIRED,
    SENSITIVE,
    airflow_environment,
    airflow_process_environment,
    not_used,
    replaced,
    users_airflow_settings,
)
from nyc_taxi.core.settings import REPO_ROOT, Settings
from nyc_taxi.lineage.write.destinations import datahub_target, openlineage_targets
from nyc_taxi.metaflow_adapter.environment import metaflow_environment

EXAMPLES = REPO_ROOT / "docs" / "examples"


def _settings(tmp_path: Path, **values) -> Settings:
    return Settings(_env_file=None, state_dir=tmp_path / "state", **values)


# ---- Airflow ------------------------------------------------------------------------------------------


def test_a_users_airflow_setting_wins_over_a_project_default_and_a_required_one_does_not(tmp_path):
    settings = _settings(tmp_path)
    env = airflow_environment(settings, {"AIRFLOW__CORE__PARALLELISM": "8", "AIRFLOW__CORE__EXECUTOR": "X"})
    assert "AIRFLOW__CORE__PARALLELISM" not in env  # the user's 8 stays, as Airflow reads it
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"  # the profile's services
    assert not_used(settings, {"AIRFLOW__CORE__EXECUTOR": "X"}) == [
        f"AIRFLOW__CORE__EXECUTOR ([core] executor) is the project's: {REQUIRED['AIRFLOW__CORE__EXECUTOR']}"
    ]
    # a _CMD form is a setting only where Airflow reads one, its sensitive settings: elsewhere it ignores it
    env = airflow_environment(settings, {"AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG_CMD": "echo 3"})
    assert env["AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG"] == "2"  # the project's, as Airflow would have it
    assert users_airflow_settings({"AIRFLOW__CORE__FERNET_KEY_CMD": "cat key"}) == {"AIRFLOW__CORE__FERNET_KEY": None}


def test_an_airflow_cfg_in_airflows_default_home_is_said_unread(tmp_path):
    """A quick start's ~/airflow/airflow.cfg: the project's Airflow home is the state directory's, and `bash run`
    says the file is not read (and how to name one that is)."""
    settings = _settings(tmp_path)
    (tmp_path / "airflow").mkdir()
    assert not_used(settings, {"HOME": str(tmp_path)}) == []
    (tmp_path / "airflow" / "airflow.cfg").write_text("[core]\nload_examples = True\n")
    (said,) = not_used(settings, {"HOME": str(tmp_path)})
    assert (
        said.startswith(f"{tmp_path}/airflow/airflow.cfg (Airflow's default home) is not read")
        and "AIRFLOW_CONFIG" in said
    )
    config = {"HOME": str(tmp_path), "AIRFLOW_CONFIG": str(tmp_path / "airflow" / "airflow.cfg")}
    assert not_used(settings, config) == []  # named: read, and its settings win


def test_the_settings_airflow_reads_in_a_cmd_form_are_airflows_sensitive_ones():
    from airflow.configuration import conf

    assert conf.sensitive_config_values == SENSITIVE


def test_the_airflow_cfg_airflow_config_names_wins_over_a_project_default(tmp_path):
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text("[core]\nparallelism = 16\nload_examples = True\n[scheduler]\nfoo = bar\n")
    env = airflow_environment(_settings(tmp_path), {"AIRFLOW_CONFIG": str(cfg)})
    assert "AIRFLOW__CORE__PARALLELISM" not in env and "AIRFLOW__CORE__LOAD_EXAMPLES" not in env
    assert env["AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG"] == "2"  # the cfg does not say: the project's


def test_the_projects_own_settings_of_an_earlier_state_directory_are_not_taken_for_a_users(tmp_path):
    """An environment the project's settings were applied to (the test session's, a task's) is read again
    for another state directory or profile: what the project set there is replaced, not kept as a user's."""
    first = airflow_environment(_settings(tmp_path / "a"), {})
    assert PROJECT_SET in first
    again = airflow_environment(_settings(tmp_path / "b", airflow_port=8099), first)
    assert again["AIRFLOW__API__PORT"] == "8099" and again["AIRFLOW__CORE__PARALLELISM"] == "4"
    assert again["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith(f"{tmp_path}/b/state/airflow/airflow.db")
    # the team profile reads its database URL from a file: the local profile's URL, set before, goes
    team = _settings(tmp_path / "c", profile="team")
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" in replaced(team, first)
    whole = airflow_process_environment(team, {**first, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_SECRET": "x"})
    assert (
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in whole and "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_SECRET" not in whole
    )
    assert whole["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD"].startswith("cat ")


def test_a_users_lineage_destinations_in_airflow_are_handed_to_both_tools(tmp_path):
    settings = _settings(tmp_path)
    yml = tmp_path / "openlineage.yml"
    yml.write_text("transport:\n  type: console\n")
    env = airflow_environment(
        settings,
        {"AIRFLOW__OPENLINEAGE__CONFIG_PATH": str(yml), "AIRFLOW__DATAHUB__CONN_ID": "my_datahub,other"},
    )
    # Airflow's own records go to the local files; where the user sends them is handed on
    assert json.loads(env["AIRFLOW__OPENLINEAGE__TRANSPORT"])["type"] == "file"
    assert env["AIRFLOW__OPENLINEAGE__CONFIG_PATH"] == "" and env["AIRFLOW__DATAHUB__CONN_ID"] == "datahub_file"
    assert env["OPENLINEAGE_CONFIG"] == str(yml) and env["DATAHUB_CONN_ID"] == "my_datahub,other"
    # a transport given in Airflow's setting is written where OpenLineage's client of both tools reads it
    transport = {"type": "http", "url": "http://127.0.0.1:9/x"}
    env = airflow_environment(settings, {"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport)})
    written = Path(env["OPENLINEAGE_CONFIG"])
    assert yaml.safe_load(written.read_text()) == {"transport": transport} and written.stat().st_mode & 0o077 == 0
    assert airflow_environment(settings, {"AIRFLOW__OPENLINEAGE__DISABLED": "True"})["OPENLINEAGE_DISABLED"] == "true"
    # one that cannot be read stops `bash run` with its reason, before anything runs without it
    with pytest.raises(ValueError, match=r"\[openlineage\] transport .* is not JSON"):
        airflow_environment(settings, {"AIRFLOW__OPENLINEAGE__TRANSPORT": "http://127.0.0.1:9"})
    # a host that ships to another's receiver (across hosts) is handed none of them, and holds no file of it
    elsewhere = _settings(tmp_path / "worker")
    given = {"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport)}
    assert "OPENLINEAGE_CONFIG" not in airflow_process_environment(elsewhere, given, lineage=False)
    assert not (elsewhere.lineage_dir / written.name).exists()


def test_a_lineage_destination_in_a_cmd_form_is_no_setting_as_airflow_reads_none(tmp_path):
    """[openlineage] transport is not one of Airflow's sensitive settings: Airflow ignores its _CMD form,
    and the project neither runs the command nor hands anything on."""
    ran = tmp_path / "ran"
    env = airflow_environment(_settings(tmp_path), {"AIRFLOW__OPENLINEAGE__TRANSPORT_CMD": f"touch {ran}"})
    assert "OPENLINEAGE_CONFIG" not in env and not ran.exists()


def test_the_example_airflow_cfg_is_read_as_it_says(tmp_path):
    cfg = EXAMPLES / "airflow.cfg"
    env = airflow_environment(_settings(tmp_path), {"AIRFLOW_CONFIG": str(cfg)})
    parser = __import__("configparser").RawConfigParser()
    parser.read(cfg)
    assert env["OPENLINEAGE_CONFIG"] == parser.get("openlineage", "config_path")
    assert env["DATAHUB_CONN_ID"] == parser.get("datahub", "conn_id")
    assert not_used(_settings(tmp_path), {"AIRFLOW_CONFIG": str(cfg)}) == []  # nothing of it is replaced


def test_the_required_settings_are_the_ones_docs_operations_lists():
    text = (REPO_ROOT / "docs" / "operations.md").read_text()
    listed = {name for name in REQUIRED if f"`{name}`" in text}
    assert listed == set(REQUIRED), sorted(set(REQUIRED) - listed)


# ---- OpenLineage --------------------------------------------------------------------------------------


def test_openlineage_targets_are_what_openlineages_client_reads(tmp_path, monkeypatch):
    for name in ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG", "OPENLINEAGE_DISABLED", "OPENLINEAGE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.openlineage of the machine's
    monkeypatch.chdir(tmp_path)
    assert openlineage_targets() == []  # nothing configured: nothing shipped (the client would print)
    monkeypatch.setenv("OPENLINEAGE_URL", "http://127.0.0.1:5000")
    monkeypatch.setenv("OPENLINEAGE_API_KEY", "k-123")
    monkeypatch.setenv("OPENLINEAGE_ENDPOINT", "api/v2/lineage")
    (target,) = openlineage_targets()
    assert target.config == {
        "type": "http",
        "url": "http://127.0.0.1:5000",
        "endpoint": "api/v2/lineage",
        "auth": {"type": "api_key", "apiKey": "k-123"},
    }
    assert "k-123" not in target.label and target.label == "http://127.0.0.1:5000/api/v2/lineage"
    monkeypatch.delenv("OPENLINEAGE_URL")
    # ./openlineage.yml, a composite: each member a target of its own (its own ledger)
    (tmp_path / "openlineage.yml").write_text(
        yaml.safe_dump(
            {
                "transport": {
                    "type": "composite",
                    "transports": {
                        "marquez": {"type": "http", "url": "http://127.0.0.1:5000"},
                        "copy": {"type": "file", "log_file_path": str(tmp_path / "copy.jsonl"), "append": True},
                    },
                }
            }
        )
    )
    targets = openlineage_targets()
    assert sorted(t.config["type"] for t in targets) == ["file", "http"] and len({t.key for t in targets}) == 2
    keys = [t.key for t in targets]
    for target in targets:
        target.transport(5.0)  # built, as shipping builds it: the ledger's name is what it was
    assert [t.key for t in targets] == keys
    for disabled in ("true", "1", "T"):  # as Airflow's provider reads it
        monkeypatch.setenv("OPENLINEAGE_DISABLED", disabled)
        assert openlineage_targets() == []


def test_a_ledger_is_named_by_the_server_not_by_its_key_or_timeout():
    from nyc_taxi.lineage.write.destinations import OpenLineageTarget

    plain = OpenLineageTarget({"type": "http", "url": "http://127.0.0.1:5000"}, "x")
    keyed = {"type": "http", "url": "http://127.0.0.1:5000", "auth": {"type": "api_key", "apiKey": "new"}}
    assert OpenLineageTarget(keyed | {"timeout": 9, "name": "marquez"}, "y").key == plain.key
    assert OpenLineageTarget({"type": "http", "url": "http://127.0.0.1:5001"}, "x").key != plain.key
    assert OpenLineageTarget({**plain.config, "endpoint": "api/v2/lineage"}, "x").key != plain.key
    # the same server as OPENLINEAGE_URL names it (its default endpoint spelled out) and as a file may
    assert (
        OpenLineageTarget({**plain.config, "endpoint": "api/v1/lineage", "url": plain.config["url"] + "/"}, "z").key
        == plain.key
    )
    kafka = {"type": "kafka", "topic": "lineage", "config": {"bootstrap.servers": "b:9092", "sasl.password": "a"}}
    rotated = {**kafka, "config": {**kafka["config"], "sasl.password": "b"}}
    assert OpenLineageTarget(kafka, "k").key == OpenLineageTarget(rotated, "k").key
    assert OpenLineageTarget({**kafka, "topic": "other"}, "k").key != OpenLineageTarget(kafka, "k").key


def test_a_ledger_kept_by_the_server_s_url_alone_is_taken_over_so_an_upgrade_sends_nothing_again(tmp_path):
    """Before ledgers were named by the transport, an OPENLINEAGE_URL server's was named by its URL alone:
    the same server's ledger now takes it over (its records stay sent); another endpoint's does not."""
    import hashlib

    from nyc_taxi.lineage.write.delivery import OpenLineageServer
    from nyc_taxi.lineage.write.destinations import OpenLineageTarget

    settings, url = _settings(tmp_path), "http://127.0.0.1:5000/"
    old = (
        settings.lineage_dir
        / "delivery"
        / f"openlineage-{hashlib.sha256(url.rstrip('/').encode()).hexdigest()[:12]}_ledger.json"
    )
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps({"airflow_events.jsonl": {"head": "h", "shipped": 7}}))
    other = OpenLineageServer(settings, OpenLineageTarget({"type": "http", "url": url, "endpoint": "api/v2/x"}, "x"))
    assert not other.ledger_path.exists() and old.exists()
    same = OpenLineageServer(settings, OpenLineageTarget({"type": "http", "url": url}, "OPENLINEAGE_URL"))
    assert json.loads(same.ledger_path.read_text())["airflow_events.jsonl"]["shipped"] == 7 and not old.exists()


def test_a_transport_that_cannot_be_built_stops_its_own_shipping_and_not_datahubs(tmp_path, monkeypatch):
    """A Kafka transport where OpenLineage's Kafka library is not installed: its events stay pending with
    the reason, and DataHub's records are shipped all the same."""
    import builtins

    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.metadata.schema_classes import StatusClass
    from lineage_receiver import Receiver

    from nyc_taxi.lineage.write import delivery
    from nyc_taxi.lineage.write.outbox import Outbox

    config = tmp_path / "openlineage.yml"
    kafka = {"type": "kafka", "topic": "lineage", "config": {"bootstrap.servers": "127.0.0.1:9"}}
    config.write_text(yaml.safe_dump({"transport": kafka}))
    monkeypatch.setenv("OPENLINEAGE_CONFIG", str(config))
    real_import = builtins.__import__

    def without_kafka(name, *args, **kwargs):
        if name.startswith("confluent_kafka"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_kafka)
    server = Receiver(tmp_path / "receiver.jsonl").start("ok")
    try:
        settings = _settings(tmp_path, datahub_gms_url=server.url)
        event = {"eventType": "COMPLETE", "eventTime": "2024-01-01T00:00:00Z", "producer": "x", "schemaURL": "x"}
        event |= {"run": {"runId": "0190e2a4-0000-7000-8000-000000000000"}, "job": {"namespace": "n", "name": "j"}}
        outbox = Outbox(settings, "airflow")
        outbox.add_events([event])
        urn = "urn:li:dataset:(urn:li:dataPlatform:iceberg,nyc_taxi.raw_trips,PROD)"
        outbox.add_records([MetadataChangeProposalWrapper(entityUrn=urn, aspect=StatusClass(removed=False))])
        shipments = {s.server: s for s in delivery.ship(settings).shipments}
        assert shipments["openlineage"].pending == 1 and "confluent_kafka" in shipments["openlineage"].error
        assert shipments["datahub"].sent == 1 and shipments["datahub"].error is None
    finally:
        server.stop()


def test_the_example_openlineage_yml_is_shipped_to_as_it_says(tmp_path, monkeypatch):
    from lineage_receiver import OPENLINEAGE_PATH, Receiver

    from nyc_taxi.lineage.write import delivery
    from nyc_taxi.lineage.write.outbox import Outbox

    example = yaml.safe_load((EXAMPLES / "openlineage.yml").read_text())
    server = Receiver(tmp_path / "receiver.jsonl").start("ok")
    try:
        example["transport"]["url"] = server.url  # where the user's Marquez would be
        config = tmp_path / "openlineage.yml"
        config.write_text(yaml.safe_dump(example))
        monkeypatch.setenv("OPENLINEAGE_CONFIG", str(config))
        settings = _settings(tmp_path)
        event = {"eventType": "COMPLETE", "eventTime": "2024-01-01T00:00:00Z", "producer": "x", "schemaURL": "x"}
        event |= {"run": {"runId": "0190e2a4-0000-7000-8000-000000000000"}, "job": {"namespace": "n", "name": "j"}}
        Outbox(settings, "airflow").add_events([event])
        assert [s.sent for s in delivery.ship(settings).shipments] == [1]
        (request,) = server.requests()
        assert request["path"] == OPENLINEAGE_PATH and request["headers"]["Authorization"] == (
            f"Bearer {example['transport']['auth']['apiKey']}"
        )
        assert delivery.ship(settings).sent == 0  # once
    finally:
        server.stop()


# ---- DataHub ------------------------------------------------------------------------------------------


def _datahub_target_in(home: Path, **env: str) -> dict | None:
    """datahub_target as a process with this home and environment sees it (DataHub reads ~ at import)."""
    probe = (
        "import json\nfrom nyc_taxi.core.settings import Settings\n"
        "from nyc_taxi.lineage.write.destinations import datahub_target\n"
        "t = datahub_target(Settings(_env_file=None))\n"
        "print(json.dumps(t and {'url': t.url, 'token': t.token, 'origin': t.origin}))"
    )
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(home), "STATE_DIR": str(home / "state"), **env}
    done = subprocess.run([sys.executable, "-c", probe], env=clean, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_datahub_is_found_as_datahubs_cli_finds_it(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    assert _datahub_target_in(home) is None
    (home / ".datahubenv").write_text(yaml.safe_dump({"gms": {"server": "http://gms.internal:8080", "token": "t-1"}}))
    assert _datahub_target_in(home) == {
        "url": "http://gms.internal:8080",
        "token": "t-1",
        "origin": str(home / ".datahubenv"),
    }
    assert _datahub_target_in(home, DATAHUB_SKIP_CONFIG="true") is None
    # DataHub's variables first, as its CLI reads them
    found = _datahub_target_in(home, DATAHUB_GMS_URL="http://other:8080", DATAHUB_GMS_TOKEN="t-2")
    assert found == {"url": "http://other:8080", "token": "t-2", "origin": "DATAHUB_GMS_URL"}
    found = _datahub_target_in(home, DATAHUB_GMS_HOST="h", DATAHUB_GMS_PORT="9002", DATAHUB_GMS_PROTOCOL="https")
    assert found["url"] == "https://h:9002"


def test_a_datahub_connection_in_the_environment_is_read_as_airflow_reads_it_by_both_tools(tmp_path, monkeypatch):
    """The DataHub plugin's connection given as an AIRFLOW_CONN_ variable (JSON, or Airflow's URI forms): a flow
    run by hand reads it without Airflow as Airflow does (host, port, password, extra), before DataHub's own
    settings, so both tools ship to the same server. Without a password, DATAHUB_GMS_TOKEN is its token, in
    Airflow's tasks too, unless DATAHUB_GMS_URL (or _HOST and _PORT) names another server: that token is never sent
    elsewhere."""
    from airflow.models.connection import Connection

    from nyc_taxi.airflow_adapter.datahub_connection import shipping_targets
    from nyc_taxi.lineage.write.destinations import connection_target

    bare = _settings(tmp_path)
    for uri in (
        "datahub-rest://http%3A%2F%2Fgms.example%3A8080",
        "datahub-rest://:t0k%40n@http%3A%2F%2Fgms%3A8080",
        "datahub-rest://:tok@gms:8080?timeout_sec=5&extra_headers=%7B%22X-A%22%3A+%221%22%7D",
        "datahub-rest://https://:tok@gms.example?__extra__=%7B%22disable_ssl_verification%22%3A+true%7D",
        "datahub_rest://gms:8080",
        "http://gms:8080",
        json.dumps(
            {"conn_type": "datahub-rest", "host": "http://gms", "port": 9, "extra": {"ca_certificate_path": "/c"}}
        ),
    ):
        airflows = Connection.from_json(uri, conn_id="c") if uri.startswith("{") else Connection(conn_id="c", uri=uri)
        ours = connection_target(uri, "c", bare)
        if airflows.conn_type.replace("-", "_") != "datahub_rest" or not airflows.host:
            assert ours is None, uri
            continue
        host = f"{airflows.host}:{airflows.port}" if airflows.port else airflows.host
        assert (ours.url, ours.token, ours.extra) == (host, airflows.password, airflows.extra_dejson), uri
    connection = {"conn_type": "datahub-rest", "host": "http://gms:8080"}
    monkeypatch.setenv("AIRFLOW_CONN_DATAHUB_REST_DEFAULT", json.dumps(connection))
    settings = _settings(tmp_path, datahub_gms_url="http://gms:8080/", datahub_gms_token="t-1")
    target = datahub_target(settings)
    assert (target.url, target.token, target.origin) == (
        "http://gms:8080",
        "t-1",
        "the Airflow connection datahub_rest_default",
    )
    [airflows] = shipping_targets(settings, environment_only=True)
    assert (airflows.url, airflows.token) == (target.url, "t-1")
    elsewhere = _settings(tmp_path, datahub_gms_url="http://other:8080", datahub_gms_token="t-1")
    assert (
        datahub_target(elsewhere).token is None and shipping_targets(elsewhere, environment_only=True)[0].token is None
    )
    assert datahub_target(_settings(tmp_path, datahub_gms_token="t-1")).token == "t-1"  # no other server named
    monkeypatch.setenv("DATAHUB_GMS_HOST", "other")  # another server named DataHub's other way
    monkeypatch.setenv("DATAHUB_GMS_PORT", "8080")
    assert datahub_target(_settings(tmp_path, datahub_gms_token="t-1")).token is None
    monkeypatch.setenv("DATAHUB_GMS_HOST", "gms")
    assert datahub_target(_settings(tmp_path, datahub_gms_token="t-1")).token == "t-1"


def test_a_connections_extra_reaches_the_emitter_as_the_plugin_hands_it_on():
    """A connection's extra (headers, TLS settings) is given to DataHub's emitter, as the plugin gives it; the
    shipper's own timeouts and headers stay its own."""
    from nyc_taxi.lineage.write.delivery import datahub_emitter
    from nyc_taxi.lineage.write.destinations import DataHubTarget

    extra = {"extra_headers": {"X-Tenant": "a"}, "disable_ssl_verification": True, "timeout_sec": 99}
    emitter = datahub_emitter(DataHubTarget("https://gms:8443", "t", extra=extra), 5, {"X-Record": "1"})
    session = emitter._session  # the emitter's requests session: what every request it sends carries
    assert session.headers["X-Tenant"] == "a" and session.headers["X-Record"] == "1" and session.verify is False
    emitter.close()


def test_the_api_server_is_started_without_any_datahub_connection_by_its_supervisord_command(tmp_path, monkeypatch):
    """Airflow 3's execution API hands any connection the API server reads to any task's token: control's API
    server, started by supervisord's command line as supervisord splits it, has no DataHub connection (the one
    the user's ``[datahub] conn_id`` names, hyphenated as Airflow allows, and every connection of a DataHub type
    by any name, as JSON or a URI), and every other connection and setting."""
    import re
    import shlex

    from nyc_taxi_proving.deployment.inherited import not_the_api_servers

    monkeypatch.setenv("AIRFLOW__DATAHUB__CONN_ID", "their-datahub")
    datahubs = {
        "AIRFLOW_CONN_THEIR-DATAHUB": "http://gms:8080",  # named: whatever its form
        "AIRFLOW_CONN_DATAHUB_REST_DEFAULT": json.dumps({"conn_type": "datahub-rest", "host": "http://gms"}),
        "AIRFLOW_CONN_MY_DATAHUB": json.dumps({"conn_type": "datahub_rest", "password": "secret"}),
        "AIRFLOW_CONN_DATAHUB_KAFKA_DEFAULT": "datahub-kafka://broker:9092",
        "AIRFLOW_CONN__TEAM_A___DATAHUB": "datahub_rest://:token@gms:8080",  # a team's, as Airflow names it
        "AIRFLOW_CONN__TEAM_A___THEIR-DATAHUB": "http://gms:8080",  # a team's copy of the named one
        "AIRFLOW_CONN_GMS": json.dumps({"uri": "datahub-rest://:token@gms:8080"}),  # JSON holding a URI
    }
    others = {
        "AIRFLOW_CONN_DATAHUB_RESTORE": "postgres://u:p@db:5432/restore",
        "AIRFLOW_CONN_BROKEN": "{not json",
        "AIRFLOW_CONN_LIST": "[1, 2]",
        "AIRFLOW_CONN_WAREHOUSE": json.dumps({"uri": "postgres://u:p@db:5432/w"}),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    environment = {**others, **datahubs, "PATH": os.environ["PATH"]}
    arguments = not_the_api_servers(_settings(tmp_path), environment)
    command = next(
        line.split("=", 1)[1]
        for line in (REPO_ROOT / "shared/nyc_taxi_proving/nyc_taxi_proving/deployment/supervisord.conf")
        .read_text()
        .splitlines()
        if line.startswith("command=") and line.endswith("-m airflow api-server")
    )
    expanded = re.sub(r"%\(ENV_(\w+)\)s", lambda m: {"NOT_THE_API_SERVERS": arguments, "PYTHON": "PY"}[m[1]], command)
    argv = shlex.split(expanded)
    assert argv[argv.index("PY") :] == ["PY", "-m", "airflow", "api-server"]
    listing = "import json, os; print(json.dumps(dict(os.environ)))"
    started = subprocess.run(
        [*argv[: argv.index("PY")], sys.executable, "-c", listing], env=environment, capture_output=True, text=True
    )
    assert started.returncode == 0, started.stderr
    seen = json.loads(started.stdout)
    assert [name for name in datahubs if name in seen] == [] and {k: seen.get(k) for k in others} == others


def test_datahub_settings_in_the_process_settings(tmp_path):
    target = datahub_target(_settings(tmp_path, datahub_gms_url="http://127.0.0.1:1", datahub_gms_token="s"))
    assert (target.url, target.token) == ("http://127.0.0.1:1", "s") and "s" not in repr(target)


# ---- Metaflow -----------------------------------------------------------------------------------------


def test_metaflow_takes_the_users_configuration_and_profile_and_the_project_fills_the_rest(tmp_path):
    settings = _settings(tmp_path)
    home = tmp_path / "metaflowconfig"
    home.mkdir()
    bare = metaflow_environment(settings, {"METAFLOW_HOME": str(home)})
    assert bare["METAFLOW_DEFAULT_METADATA"] == "local" and bare["METAFLOW_DATASTORE_SYSROOT_LOCAL"] == str(
        settings.metaflow_home
    )
    shutil.copyfile(EXAMPLES / "metaflow-config.json", home / "config_team.json")
    theirs = json.loads((home / "config_team.json").read_text())
    env = metaflow_environment(settings, {"METAFLOW_HOME": str(home), "METAFLOW_PROFILE": "team"})
    assert not set(theirs) & set(env), set(theirs) & set(env)  # every setting of theirs stays theirs
    assert "METAFLOW_USER" in env  # what they do not say, the project's
    # a variable wins over both, as Metaflow reads it
    env = metaflow_environment(settings, {"METAFLOW_HOME": str(home), "METAFLOW_DEFAULT_DATASTORE": "local"})
    assert "METAFLOW_DEFAULT_DATASTORE" not in env
    env = metaflow_environment(settings, {"METAFLOW_HOME": str(home), "METAFLOW_ARTIFACT_LOCALROOT": str(tmp_path)})
    assert "METAFLOW_ARTIFACT_LOCALROOT" not in env
    with pytest.raises(RuntimeError, match="METAFLOW_PROFILE=nope"):
        metaflow_environment(settings, {"METAFLOW_HOME": str(home), "METAFLOW_PROFILE": "nope"})
    # read again in an environment the project's settings were applied to: the project's are not a user's
    again = metaflow_environment(_settings(tmp_path / "b"), {"METAFLOW_HOME": str(home), **bare})
    assert again["METAFLOW_DATASTORE_SYSROOT_LOCAL"] == str(tmp_path / "b" / "state" / "metaflow")


def test_metaflows_s3_datastore_downloads_into_the_state_directory_not_the_working_directory(tmp_path, moto_endpoint):
    """Metaflow's S3 datastore downloads an artifact into a temporary directory under
    METAFLOW_ARTIFACT_LOCALROOT, the working directory by default: a step killed mid-transfer would leave
    `metaflow.s3.*` in the clone. With the project's settings (and a user's own S3 datastore) Metaflow
    itself downloads into the state directory."""
    import boto3

    settings = _settings(tmp_path)
    home, work = tmp_path / "metaflowconfig", tmp_path / "work"
    home.mkdir(), work.mkdir()
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(Bucket="theirs")
    theirs = {"METAFLOW_DEFAULT_DATASTORE": "s3", "METAFLOW_DATASTORE_SYSROOT_S3": "s3://theirs/metaflow"}
    env = metaflow_environment(settings, {"METAFLOW_HOME": str(home), **theirs})
    transfer = (  # a save and a load through Metaflow's own S3 datastore, then through a bare S3() as a step's
        "from metaflow import S3\n"  # code would use it; each load's local file, while open
        "from metaflow.plugins.datastores.s3_storage import S3Storage\n"
        "storage = S3Storage('s3://theirs/metaflow')\n"
        "storage.save_bytes(iter([('a/b', b'x')]), overwrite=True)\n"
        "with storage.load_bytes(['a/b']) as loaded:\n"
        "    print(*[path for _, path, _ in loaded])\n"
        "with S3(s3root='s3://theirs/step') as s3:\n"
        "    s3.put('c', 'y')\n"
        "    print(s3.get('c').path)\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("METAFLOW_")}
    ran = subprocess.run(
        [sys.executable, "-c", transfer],
        cwd=work,
        env={**clean, **env, **theirs, "METAFLOW_HOME": str(home), "METAFLOW_S3_ENDPOINT_URL": moto_endpoint},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    by_datastore, by_bare_s3 = map(Path, ran.stdout.split())
    for downloaded in (by_datastore, by_bare_s3):
        assert downloaded.parent.name.startswith("metaflow.s3.") and downloaded.parent.parent == (
            settings.state_dir / "metaflow-tmp"
        ), downloaded
    assert not list(work.iterdir())


def test_a_users_own_datastore_gets_none_of_the_projects_bucket_settings(tmp_path, monkeypatch):
    """The team profile keeps artifacts in its bucket (an endpoint, a credentials file): a user whose Metaflow
    configuration names a datastore of their own keeps it whole, without the bucket's endpoint or keys."""
    from nyc_taxi.metaflow_adapter import environment

    bucket = {
        "METAFLOW_DEFAULT_DATASTORE": "s3",
        "METAFLOW_DATASTORE_SYSROOT_S3": "s3://team/metaflow",
        "METAFLOW_S3_ENDPOINT_URL": "http://127.0.0.1:8333",
        "AWS_SHARED_CREDENTIALS_FILE": "/state/team/s3-credentials",
    }
    monkeypatch.setattr(environment, "_datastore", lambda settings: bucket)
    home = tmp_path / "metaflowconfig"
    home.mkdir()
    assert bucket.items() <= metaflow_environment(_settings(tmp_path), {"METAFLOW_HOME": str(home)}).items()
    (home / "config.json").write_text(json.dumps({"METAFLOW_S3_RETRY_COUNT": "9"}))  # a tuning: the bucket stays
    assert bucket.items() <= metaflow_environment(_settings(tmp_path), {"METAFLOW_HOME": str(home)}).items()
    theirs = {"METAFLOW_DEFAULT_DATASTORE": "s3", "METAFLOW_DATASTORE_SYSROOT_S3": "s3://theirs/metaflow"}
    (home / "config.json").write_text(json.dumps(theirs))
    env = metaflow_environment(_settings(tmp_path), {"METAFLOW_HOME": str(home)})
    assert not set(bucket) & set(env) and env["METAFLOW_DEFAULT_METADATA"] == "local", env
