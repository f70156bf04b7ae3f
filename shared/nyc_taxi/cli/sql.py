"""`bash run sql`: Spark SQL on the active profile's Iceberg catalog, to look at any table.

    bash run sql "SELECT count(*) FROM yellow_taxi_raw"
    bash run sql "SELECT * FROM yellow_rides_hourly_forecast ORDER BY forecast_hour LIMIT 5"
    bash run sql                       # statements typed one after another, each ended by ';'

The session is the one every task gets (``core/spark.get_spark``: the warm Spark server's where one runs,
else a JVM of its own), its current catalog and namespace the lakehouse's, so a table is named with or
without its namespace; Iceberg's metadata tables (``….snapshots``,
``….history``) and time travel (``VERSION AS OF``) work as in Spark. Any statement Spark SQL takes runs,
writes included (an INSERT, a DELETE, a DROP TABLE commit to the pipeline's own tables, as Spark's SQL
shell would; nothing here asks first).
"""

from __future__ import annotations

import argparse
import sys

PROMPT, MORE = "sql> ", "...> "


def render(columns: list[str], rows: list[tuple], total: int) -> str:
    """Rows as an aligned text table, and how many the answer had (``total``: more than ``rows`` when cut)."""
    cells = [[("NULL" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    more = f", the first {len(rows)} shown (--limit)" if total > len(rows) else ""
    lines.append(f"({total} row{'s' if total != 1 else ''}{more})")
    return "\n".join(lines)


def run(spark, statement: str, shown: int) -> str:
    """One statement's answer as text; a statement that returns no rows (DDL, a write) says it ran."""
    frame = spark.sql(statement)
    if not frame.columns:
        return "ok"
    rows = [tuple(row) for row in frame.limit(shown + 1).collect()]
    total = len(rows) if len(rows) <= shown else frame.count()
    return render(frame.columns, rows[:shown], total)


def split_statements(text: str) -> tuple[list[str], str]:
    """(the statements ``text`` ends with ';', what follows the last one): a ';' inside a string literal
    ('…' or "…", with Spark's backslash escapes), a quoted name (`…`) or a comment (-- to the line's end,
    /* … */) ends nothing."""
    done, start, i, quote = [], 0, 0, None
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and quote != "`":
                i += 1  # the escaped character
            elif c == quote:
                quote = None
        elif c in "'\"`":
            quote = c
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 1
        elif c == ";":
            done.append(text[start:i].strip())
            start = i + 1
        i += 1
    return [s for s in done if s], text[start:]


def _statements(stream):
    """Statements read from ``stream``, each ended by ';' (a line of its own may hold several)."""
    pending = ""
    interactive = stream.isatty()
    while True:
        if interactive:
            print(MORE if pending.strip() else PROMPT, end="", flush=True)
        line = stream.readline()
        if not line:
            break
        if not pending.strip() and line.strip().lower() in ("exit", "quit", "exit;", "quit;"):
            break
        done, pending = split_statements(pending + line)
        yield from done
    if pending.strip():
        yield pending.strip()


def _error(error: Exception) -> str:
    """Spark's own message, first line: the analysis error names the table or column it did not find."""
    said = getattr(error, "desc", None) or str(error)
    return said.strip().splitlines()[0] if said.strip() else type(error).__name__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bash run sql", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("statement", nargs="?", help="one statement; none: read statements from the terminal")
    parser.add_argument("--limit", type=int, default=100, help="rows shown of each answer (default 100)")
    args = parser.parse_args(argv)

    from nyc_taxi.core.settings import get_settings
    from nyc_taxi.core.spark import get_spark

    settings = get_settings()
    if args.statement is None and sys.stdin.isatty():
        print(f"Spark SQL on the {settings.profile} profile's catalog {settings.catalog_name!r} (starting Spark…)")
    spark = get_spark(settings)
    spark.sql(f"USE {settings.catalog_name}.{settings.database}")
    if args.statement is not None:
        try:
            print(run(spark, args.statement, args.limit))
        except Exception as error:  # Spark's analysis and parse errors: said, not a traceback
            print(f"error: {_error(error)}", file=sys.stderr)
            return 1
        return 0
    failed = False
    for statement in _statements(sys.stdin):
        try:
            print(run(spark, statement, args.limit), flush=True)
        except Exception as error:
            failed = True
            print(f"error: {_error(error)}", file=sys.stderr, flush=True)
    return 1 if failed and not sys.stdin.isatty() else 0


if __name__ == "__main__":
    sys.exit(main())
