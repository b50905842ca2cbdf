"""Connections and statement execution. Everything takes a ``psycopg.Connection`` or a pool.

A single statement on an autocommit connection is its own transaction and costs one round trip; the worker
uses autocommit connections for that reason (the ledger's reserve and record are one statement each). A
non-autocommit connection gets a transaction block around each call; a pool's ``connection()`` commits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import dict_row

from agentrun_core.store import queries

Conn = psycopg.Connection[Any] | psycopg_pool.ConnectionPool[Any]


@contextlib.contextmanager
def connection(conn: Conn) -> Iterator[psycopg.Connection[Any]]:
    if isinstance(conn, psycopg_pool.ConnectionPool):
        with conn.connection() as c:
            yield c
    elif conn.autocommit:
        yield conn
    else:
        with conn.transaction():
            yield conn


def fetch_one(conn: Conn, name: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
    with connection(conn) as c, c.cursor(row_factory=dict_row) as cur:
        cur.execute(queries.get(name), params)
        return cur.fetchone() if cur.description else None


def fetch_all(conn: Conn, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    with connection(conn) as c, c.cursor(row_factory=dict_row) as cur:
        cur.execute(queries.get(name), params)
        return cur.fetchall()


def execute(conn: Conn, name: str, params: Mapping[str, Any]) -> int:
    """Run a statement; the affected row count."""
    with connection(conn) as c, c.cursor() as cur:
        cur.execute(queries.get(name), params)
        return cur.rowcount
