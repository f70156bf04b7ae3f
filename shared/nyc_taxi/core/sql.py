"""The project's SQL files: one statement per file, ``${name}`` placeholders filled by the runner.

Each data module keeps its SQL in a ``sql/`` folder beside it: ``SQL = SqlFolder(__file__)``.
"""

from __future__ import annotations

import string
from pathlib import Path


class SqlFolder:
    def __init__(self, module_file: str | Path):
        self.folder = Path(module_file).parent / "sql"

    def path(self, name: str) -> Path:
        path = self.folder / f"{name}.sql"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in self.folder.glob("*.sql")))
            raise FileNotFoundError(f"no SQL file {name}.sql in {self.folder}; there are: {known}")
        return path

    def render(self, name: str, **values: object) -> str:
        return string.Template(self.path(name).read_text()).substitute({k: str(v) for k, v in values.items()})

    def run(self, spark, name: str, **values: object):
        """The statement as a DataFrame (run at once if it writes). Spark's UI and event log name the queries
        run from here on in this thread after the file, so each query can be traced to its SQL file."""
        spark.sparkContext.setJobDescription(f"{self.folder.parent.name}/sql/{name}.sql")
        return spark.sql(self.render(name, **values))

    def aggregates(self, name: str, **values: object) -> dict[str, str]:
        """A one-row aggregate statement's output columns as Spark SQL expressions (name: expression),
        to be computed over other rows: e.g. observed while a write passes over them."""
        import sqlglot

        select = sqlglot.parse_one(self.render(name, **values), read="spark")
        return {column.alias_or_name: column.unalias().sql(dialect="spark") for column in select.expressions}
