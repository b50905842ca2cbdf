"""Connections and statement execution. Everything takes a ``psycopg.Connection`` or a pool.

A single statement on an autocommit connection is its own transaction and costs one round trip; the worker
uses autocommit connections for that reason (the ledger's reserve and record are one statement each). A
non-autocommit connection gets a transaction block around each call; a pool's ``connection()`` commits.
``pipelined_transaction`` sends a whole transaction (BEGIN, statements, COMMIT) in one round trip.
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


@contextlib.contextmanager
def pipelined_transaction(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """One transaction in psycopg pipeline mode: BEGIN, the block's statements, COMMIT, one Sync.

    The block may only send statements whose results it does not read (reading one forces a Sync). Anything
    failing makes the server skip the rest of the pipeline up to the Sync — the COMMIT included — so the
    transaction commits whole or not at all; the error is raised at the Sync (or earlier, by a statement that
    happened to read its result) and the transaction is rolled back before the connection is handed back.
    If the block itself raises, COMMIT is never sent. A server error is raised as itself, never as the
    ``PipelineAborted`` of the statements skipped after it. ``conn`` must be autocommit (the pool's are):
    psycopg's own ``transaction()`` syncs on entering and leaving its block in pipeline mode.
    """
    if not conn.autocommit:
        raise ValueError("pipelined_transaction needs an autocommit connection")
    try:
        with conn.pipeline(), conn.cursor() as cur:
            cur.execute("BEGIN")
            yield
            cur.execute("COMMIT")
    except BaseException as exc:
        if not conn.broken and conn.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
        first = first_error(exc)
        if first is not exc:
            exc.__context__ = None  # first -> exc -> first would be a cycle
            raise first from None
        raise


def first_error(exc: BaseException) -> BaseException:
    """The error a failed pipeline reports first: ``exc`` unless it is a ``PipelineAborted`` (a statement
    skipped because an earlier one failed) raised while that earlier error was being handled."""
    cur: BaseException | None = exc
    seen: set[int] = set()
    while isinstance(cur, psycopg.errors.PipelineAborted) and id(cur) not in seen:
        seen.add(id(cur))
        cur = cur.__context__
    return cur if cur is not None else exc


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
