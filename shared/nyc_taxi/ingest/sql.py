"""Run the SQL files in sql/: one statement each, ``${name}`` placeholders filled from the registry."""

from __future__ import annotations

import string
from pathlib import Path

SQL_DIR = Path(__file__).parent / "sql"


def render(name: str, **values: object) -> str:
    text = (SQL_DIR / f"{name}.sql").read_text()
    return string.Template(text).substitute({k: str(v) for k, v in values.items()})


def run(spark, name: str, **values: object):
    return spark.sql(render(name, **values))
