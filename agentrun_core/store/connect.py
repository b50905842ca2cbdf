"""Opening connections to the ledger database, and the driver's errors the other parts may name.

The rule (import-linter, pyproject.toml): only ``agentrun_core`` imports psycopg. A worker, the operator or
the CLI opens its pool or connection here and catches the errors re-exported here, so the driver is one
package's concern. Every connection is autocommit: one statement is one transaction and one round trip, and
a psycopg pipeline is one implicit transaction up to its Sync (the checkpointer's writes).
"""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg.conninfo
import psycopg_pool
from psycopg.rows import DictRow, dict_row

Connection = psycopg.Connection[Any]
Pool = psycopg_pool.ConnectionPool[Any]
DictCursor = psycopg.Cursor[DictRow]

# The driver's error classes, for callers that classify failures without importing the driver.
Error = psycopg.Error
InsufficientPrivilege = psycopg.errors.InsufficientPrivilege
# A restart (AdminShutdown / CrashShutdown / CannotConnectNow), a dropped connection, or a pool that cannot
# hand out a working connection while the server is down: infrastructure, not the caller's fault.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (psycopg.OperationalError, psycopg_pool.PoolTimeout)


def connect(dsn: str, *, timeout_seconds: float | None = None) -> Connection:
    """One autocommit connection (a context manager: ``with connect(dsn) as conn``)."""
    if timeout_seconds is None:
        return psycopg.connect(dsn, autocommit=True)
    return psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, round(timeout_seconds)))


def open_pool(dsn: str, *, name: str, max_size: int, min_size: int = 1) -> Pool:
    """An opened pool of autocommit connections."""
    return psycopg_pool.ConnectionPool(
        dsn, min_size=min_size, max_size=max_size, kwargs={"autocommit": True}, open=True, name=name
    )


def with_credentials(dsn: str, *, user: str, password: str) -> str:
    """``dsn`` (host, port, database, TLS options) with another user and password. Pure."""
    params: dict[str, Any] = psycopg.conninfo.conninfo_to_dict(dsn)
    params.update(user=user, password=password)
    return psycopg.conninfo.make_conninfo(**params)


def dict_cursor(conn: Connection) -> DictCursor:
    """A binary cursor whose rows are dicts, on ``conn`` as it is (e.g. inside a pipelined transaction, whose
    statements it then rides)."""
    return conn.cursor(binary=True, row_factory=dict_row)
