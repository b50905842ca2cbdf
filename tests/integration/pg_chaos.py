"""Restarting the dev cluster's own Postgres under running workers (helpers, no tests in this module).

``restart`` stops the server with a fast shutdown (every session gets ``AdminShutdown``) or SIGKILLs its
postmaster (the orphaned backends exit once they notice; until then a new postmaster refuses to start, so the
start is retried), then starts it again on the same data directory and port.
"""

from __future__ import annotations

import os
import signal
import time

import psycopg
import psycopg.sql

from agentrun_dev import postgres, state
from agentrun_dev import settings as dev_settings


def restart(settings: dev_settings.Settings, *, kill_postmaster: bool, timeout: float = 120) -> None:
    if kill_postmaster:
        pid = postgres.info(settings).pid
        assert pid is not None, "the dev Postgres is not running"
        os.kill(pid, signal.SIGKILL)
    else:
        postgres.stop(settings)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with state.locked(settings):
                postgres.ensure_running(settings)
            return
        except RuntimeError:
            assert time.monotonic() < deadline, "postgres did not come back"
            time.sleep(1)


def durable_commits(dsn: str) -> None:
    """The dev Postgres runs with ``synchronous_commit = off`` (speed): a killed postmaster then loses the
    last commits, which production settings do not. The test's database gets production's setting."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT current_database()").fetchone()
        assert row is not None
        stmt = psycopg.sql.SQL("ALTER DATABASE {} SET synchronous_commit = on")
        conn.execute(stmt.format(psycopg.sql.Identifier(row[0])))
