"""The place each test runs its flows in (places.py): a folder of its own, a home of its own (no
~/.datahubenv or ~/.openlineage of the machine), OpenLineage's file transport as the user's setting."""

from __future__ import annotations

import os

import pytest
from places import FLOWS, Place


@pytest.fixture
def place(tmp_path, monkeypatch) -> Place:
    # Metaflow's client, in this process, finds the runs the Runner started there, as that user
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("USERNAME", "tester")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "USERNAME": "tester",
        "METAFLOW_LINEAGE_DIR": str(tmp_path / "outbox"),
        "OPENLINEAGE__TRANSPORT__TYPE": "file",
        "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(tmp_path / "openlineage-events.jsonl"),
        "OPENLINEAGE__TRANSPORT__APPEND": "true",
        "PYTHONPATH": str(FLOWS),
    }
    # nothing of the machine's own settings reaches the flows: each test gives the ones it means
    for name in list(os.environ):
        if name.startswith(("METAFLOW_", "DATAHUB_", "OPENLINEAGE")):
            monkeypatch.delenv(name)
    return Place(tmp_path, env)
