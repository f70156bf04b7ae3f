"""`bash run sql`'s reading of typed statements: a ';' ends a statement only outside a string, a quoted
name and a comment (the Spark session itself: tests/test_training_flow.py)."""

from __future__ import annotations

import io

from nyc_taxi.cli.sql import _statements, split_statements


def test_a_semicolon_in_a_string_a_quoted_name_or_a_comment_ends_no_statement():
    text = (
        'SELECT \'a;b\', "c;\\";d" FROM t;  -- a comment; not a statement\n'
        "SELECT `odd;name` /* x; y */ FROM u; SELECT 'it''s'; SELECT 'open;"
    )
    done, pending = split_statements(text)
    assert done == [
        'SELECT \'a;b\', "c;\\";d" FROM t',
        "-- a comment; not a statement\nSELECT `odd;name` /* x; y */ FROM u",
        "SELECT 'it''s'",
    ]
    assert pending == " SELECT 'open;"  # a string still open: the statement goes on


def test_typed_lines_are_read_as_statements_across_lines_and_to_exit():
    typed = io.StringIO("SELECT 'x;\ny' AS s\n  FROM t;\nSELECT 1; SELECT 2\n;\nexit\nSELECT 3;\n")
    assert list(_statements(typed)) == ["SELECT 'x;\ny' AS s\n  FROM t", "SELECT 1", "SELECT 2"]
