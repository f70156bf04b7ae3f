"""Run the project's SQL files (ingest/sql/, forecast/sql/): one statement each, ``${name}``
placeholders filled from the registry. File names are unique across the folders."""

from __future__ import annotations

import string
from pathlib import Path

SQL_DIRS = (Path(__file__).parent / "ingest" / "sql", Path(__file__).parent / "forecast" / "sql")


def render(name: str, **values: object) -> str:
    [path] = [d / f"{name}.sql" for d in SQL_DIRS if (d / f"{name}.sql").is_file()]
    text = path.read_text()
    return string.Template(text).substitute({k: str(v) for k, v in values.items()})


def run(spark, name: str, **values: object):
    return spark.sql(render(name, **values))
