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
@pytest.mark.guards
def test_the_plugin_connection_is_read_as_the_plugin_reads_it(monkeypatch, environment):
    for name, value in environment.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    theirs = get_lineage_config()
    assert plugin_connection() == (theirs.enabled, theirs._datahub_connection_ids)


@pytest.mark.guards
def test_the_emitter_is_the_one_the_plugin_would_make():
    theirs = get_lineage_config().make_emitter_hook().make_emitter()
    ours = plugin_emitter()
    assert type(ours) is type(theirs)
    assert ours._filename == theirs._filename  # the same record file


def test_no_emitter_when_the_plugin_is_off(monkeypatch):
    monkeypatch.setenv("AIRFLOW__DATAHUB__ENABLED", "False")
    assert plugin_emitter() is None


def test_a_local_airflow_writer_waits_out_a_lock_held_longer_than_sqlites_default(tmp_path):
    """On the local profile, Airflow's processes share one SQLite file. A writer that meets a lock held
    longer than SQLite's default 5 s waits for it (the API server answered a Trigger with a 500
    "database is locked" on a busy machine); through both of Airflow's engines, sync and async."""
    import os
    import re
    import sqlite3
    import subprocess
    import sys
    import time

    from nyc_taxi.airflow_adapter.environment import airflow_environment, prepare_directories
    from nyc_taxi.core.settings import Settings

    settings = Settings(state_dir=tmp_path, profile="local")
    prepare_directories(settings)
    database = settings.airflow_home / "airflow.db"
    with sqlite3.connect(database) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE written (engine TEXT)")
    # each write starts once the test holds the lock (a line on stdin), and says how long it waited
    writes = (
        "import asyncio, time\n"
        "from sqlalchemy import text\n"
        "from airflow import settings\n"
        "settings.engine, settings.async_engine\n"
        "print('ready')\n"
        "input()\n"
        "started = time.monotonic()\n"
        "with settings.engine.begin() as c:\n"
        "    c.execute(text(\"INSERT INTO written VALUES ('sync')\"))\n"
        "print('waited', round(time.monotonic() - started, 1))\n"
        "input()\n"
        "async def write():\n"
        "    async with settings.async_engine.begin() as c:\n"
        "        await c.execute(text(\"INSERT INTO written VALUES ('async')\"))\n"
        "started = time.monotonic()\n"
        "asyncio.run(write())\n"
        "print('waited', round(time.monotonic() - started, 1))\n"
    )
    env = {**os.environ, "STATE_DIR": str(tmp_path), **airflow_environment(settings)}
    writer = subprocess.Popen(
        [sys.executable, "-u", "-c", writes], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )

    def said(word: str) -> str:
        out = ""
        while word not in out and writer.poll() is None:  # Airflow may log lines of its own first
            out += writer.stdout.readline()
        return out

    said("ready")
    holder = sqlite3.connect(database, isolation_level=None)
    out = ""
    for _ in ("sync", "async"):
        holder.execute("BEGIN IMMEDIATE")  # the write lock, as a long scheduler transaction holds it
        writer.stdin.write("\n")
        writer.stdin.flush()
        time.sleep(10)  # twice SQLite's default: a writer starting late still waits past it
        holder.execute("COMMIT")
        out += said("waited")
    assert writer.wait(timeout=60) == 0
    waited = [float(seconds) for seconds in re.findall(r"^waited (\S+)$", out, flags=re.M)]
    assert len(waited) == 2 and waited[0] >= 6 and waited[1] >= 6, waited  # beyond SQLite's default 5 s
    with sqlite3.connect(database) as db:
        assert sorted(r[0] for r in db.execute("SELECT engine FROM written")) == ["async", "sync"]


@pytest.mark.airflow
def test_lineage_replay_ships_to_a_datahub_connection_kept_in_airflows_metadata_database(tmp_path, airflow_state):
    """A `datahub_rest_default` connection made as a user makes one in the UI or with `airflow connections
    add` is kept in the metadata database, which a process outside any task does not ask through
    ``BaseHook``: `bash run lineage-replay` finds it there, with its token."""
    import json
    import os
    import subprocess
    import sys

    from nyc_taxi.airflow_adapter.environment import airflow_environment
    from nyc_taxi.core.settings import Settings

    settings = Settings(state_dir=tmp_path / "state", profile="local")
    airflow_state(settings)
    env = {**os.environ, "STATE_DIR": str(settings.state_dir), **airflow_environment(settings)}
    env = {k: v for k, v in env.items() if not k.startswith("AIRFLOW_CONN_DATAHUB_REST")}
    added = [
        *(sys.executable, "-m", "airflow", "connections", "add", "datahub_rest_default"),
        *("--conn-type", "datahub-rest", "--conn-host", "http://127.0.0.1:9", "--conn-password", "t-9"),
    ]
    subprocess.run(added, env=env, check=True, capture_output=True, timeout=300)
    probe = (
        "import json\nfrom nyc_taxi.airflow_adapter.datahub_connection import shipping_targets\n"
        "from nyc_taxi.core.settings import Settings\n"
        "said = {way: [(t.url, t.token) for t in shipping_targets(Settings(), metadata_database=way == 'cli')]"
        " for way in ('cli', 'hook')}\nprint(json.dumps(said))"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {"cli": [["http://127.0.0.1:9", "t-9"]], "hook": []}, said
