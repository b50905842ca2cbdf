"""Reading Postgres directly in a test: the one row a query must return."""

from __future__ import annotations

from typing import Any

import psycopg


def one_row(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    """The first row of ``query``; fails the test, naming the query, when it returns none."""
    row = conn.execute(query, params).fetchone()
    assert row is not None, f"no row: {query} {params}"
    return tuple(row)
