"""Opening connections to the ledger database, and the driver's errors the other parts may name.

The rule (import-linter, pyproject.toml): only ``agentrun_core`` imports psycopg. A worker, the operator or
the CLI opens its pool or connection here and catches the errors re-exported here, so the driver is one
package's concern. Every connection is autocommit: one statement is one transaction and one round trip, and
a psycopg pipeline is one implicit transaction up to its Sync (the checkpointer's writes).
"""

from __future__ import annotations

import os
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
# A value Postgres cannot store (SQLSTATE class 22: U+0000 in jsonb or text, an untranslatable character, a
# number out of range), refused by the server or by the driver before sending: the same value always is.
DataError = psycopg.DataError
# A restart (AdminShutdown / CrashShutdown / CannotConnectNow), a dropped connection, or a pool that cannot
# hand out a working connection while the server is down: infrastructure, not the caller's fault.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (psycopg.OperationalError, psycopg_pool.PoolTimeout)


def connect(dsn: str, *, timeout_seconds: float | None = None) -> Connection:
    """One autocommit connection (a context manager: ``with connect(dsn) as conn``)."""
    if timeout_seconds is None:
        return psycopg.connect(dsn, autocommit=True)
    return psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, round(timeout_seconds)))


# A worker's connections (``open_pool(..., planned_once=True)``): a statement is prepared at its second
# execution on a connection, with one generic plan. A connection lives for one attempt and runs a few
# statements keyed by primary keys over and over; by default psycopg prepares a statement at its 5th
# execution and Postgres then still plans it 5 times more before it considers a generic plan, so most of a
# short attempt's statements were parsed and planned at every execution (the ledger's reserve/record CTEs
# plan in ~0.4 ms). Not at the first: outside a pipeline psycopg waits for the Parse, a round trip of its
# own, which a statement run once per attempt (the claim, the outcome) would pay for nothing. Not for the
# operator: its queries scan by status, where a plan for the actual parameters matters.
_PREPARE_THRESHOLD = 1
_GENERIC_PLANS = "-c plan_cache_mode=force_generic_plan"


def planned_once_args(dsn: str, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``dsn`` and connection ``kwargs`` for connections that plan a statement once (see above). Pure but
    for the environment (``with_server_option``)."""
    return with_server_option(dsn, _GENERIC_PLANS), {**kwargs, "prepare_threshold": _PREPARE_THRESHOLD}


class RecentFirstPool(psycopg_pool.ConnectionPool[Any]):
    """A pool that hands out the connection returned to it last, where psycopg_pool hands out the one idle
    longest (a queue: every connection of the pool in turn).

    Why: what makes a connection fast is per connection — its prepared statements (``planned_once``) and
    its backend's warm catalog caches. A worker's pool grows by a connection whenever its threads overlap
    (LangGraph's background writes under ``async``, the ledger, the step-event and heartbeat threads), yet
    most of the time one connection at most is busy: taken in turn, every statement had to be prepared, and
    every table's cache warmed, on each of them. Taken most recent first, the hot connection serves nearly
    every request and the others only the overlap (measured: docs/dev/performance.md, "Kept"). Idle
    connections are closed the same way as before: psycopg_pool shrinks the pool from the other end, now the
    coldest.

    The one method overridden is psycopg_pool's own (3.3, pinned in constraints.txt);
    ``tests/integration/test_worker_pool.py`` fails if it stops being called.
    """

    def _get_ready_connection(self, timeout: float | None) -> Any:
        if self._pool and (timeout is None or timeout > 0.0):
            conn = self._pool.pop()  # the end putconn appends to: the most recently returned
            self._nconns_min = min(self._nconns_min, len(self._pool))  # the shrink's bookkeeping, as upstream
            return conn
        return super()._get_ready_connection(timeout)  # none idle: upstream's waiting and errors


def open_pool(dsn: str, *, name: str, max_size: int, min_size: int = 1, planned_once: bool = False) -> Pool:
    """An opened pool of autocommit connections, the most recently used handed out first (``planned_once``:
    as a worker's, see above)."""
    kwargs: dict[str, Any] = {"autocommit": True}
    if planned_once:
        dsn, kwargs = planned_once_args(dsn, kwargs)
    return RecentFirstPool(dsn, min_size=min_size, max_size=max_size, kwargs=kwargs, open=True, name=name)


def with_server_option(dsn: str, option: str) -> str:
    """``dsn`` with ``option`` (``-c name=value``) added to its server options, after those it had (or
    those of ``PGOPTIONS``, which libpq reads only when the DSN names none). Pure but for the environment."""
    params: dict[str, Any] = psycopg.conninfo.conninfo_to_dict(dsn)
    earlier = params.get("options") or os.environ.get("PGOPTIONS", "")
    params["options"] = f"{earlier} {option}".strip()
    return psycopg.conninfo.make_conninfo(**params)


def with_credentials(dsn: str, *, user: str, password: str) -> str:
    """``dsn`` (host, port, database, TLS options) with another user and password. Pure."""
    params: dict[str, Any] = psycopg.conninfo.conninfo_to_dict(dsn)
    params.update(user=user, password=password)
    return psycopg.conninfo.make_conninfo(**params)


def dict_cursor(conn: Connection) -> DictCursor:
    """A binary cursor whose rows are dicts, on ``conn`` as it is (e.g. inside a pipelined transaction, whose
    statements it then rides)."""
    return conn.cursor(binary=True, row_factory=dict_row)
