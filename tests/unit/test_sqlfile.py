"""The named SQL blocks as the server gets them: trimmed, without comments, and short enough for
psycopg to cache their parse."""

from __future__ import annotations

import pytest

from tidegate.storage.shared.sqlfile import load_queries, parse_queries

DIALECTS = ("tidegate.storage.postgres", "tidegate.storage.sqlite")


def test_a_block_is_sent_without_its_comments_and_indentation():
    text = """-- name: first
-- what it does, for readers
SELECT a,
       'x -- not a comment'  -- kept: a trailing comment is on a line of SQL
  FROM t;

-- name: second
SELECT 1
"""
    assert parse_queries(text) == {
        "first": "SELECT a,\n'x -- not a comment'  -- kept: a trailing comment is on a line of SQL\nFROM t;",
        "second": "SELECT 1",
    }


def _literal_spans_a_line(sql: str) -> bool:
    inside = in_comment = False
    for index, char in enumerate(sql):
        if in_comment:
            in_comment = char != "\n"
        elif not inside and sql.startswith("--", index):
            in_comment = True
        elif char == "'":
            inside = not inside
        elif char == "\n" and inside:
            return True
    return False


@pytest.mark.parametrize("package", DIALECTS)
def test_no_statement_has_a_literal_across_lines(package):
    """What makes trimming each line safe: no line is inside a string literal."""
    assert [name for name, sql in load_queries(package).items() if _literal_spans_a_line(sql)] == []


def test_every_postgres_statement_fits_psycopgs_parse_cache():
    """A longer statement is parsed again on every call (about 100k instructions per claim)."""
    queries = pytest.importorskip("psycopg._queries")
    limit = queries.MAX_CACHED_STATEMENT_LENGTH
    too_long = {name: len(sql) for name, sql in load_queries(DIALECTS[0]).items() if len(sql) > limit}
    assert too_long == {}
