"""Lock watch: the leader ends any worker-role Postgres session that keeps other sessions waiting on a lock.

Why: Postgres lets any role with UPDATE on a table ``LOCK`` it in ACCESS EXCLUSIVE mode, and a worker role
needs UPDATE on the shared ledger tables (its own rows, under row-level security). A tenant holding such a
lock in an open transaction would stop every other tenant's workers and the operator until its session
ends; no grant can take the lock mode away without taking the UPDATE too. So the session is ended: every
``interval`` the watch asks Postgres, in one statement (``store.end_blocking_tenant_sessions``), for the
sessions of worker roles that have kept another session waiting for at least
``AGENTRUN_TENANT_LOCK_WAIT_SECONDS`` and terminates them. A worker's own statements hold locks for
milliseconds; one that held them that long is stuck or deposed, and fencing makes ending it harmless (its
attempt fails over, as after any lost connection). Never the operator's or an admin's sessions.

It runs on a thread and a connection of its own: when a tenant holds a lock, the operator's pool may be
all waiting on it. Its own statement reads only catalog views and ``agentrun_tenants``, which no tenant may
lock (no grant), so it never waits behind the lock it is there to break. The operator's database role needs
to be allowed to signal the tenant's backends (superuser, or member of ``pg_signal_backend``); without it a
session found is logged as not ended.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from agent_operator.act import periodic
from agent_operator.observe import metrics
from agentrun_core import store
from agentrun_core.store import connect

logger = logging.getLogger(__name__)


class LockWatch(periodic.Periodic):
    def __init__(self, dsn: str, *, wait_seconds: float) -> None:
        # Looks four times per limit: a blocking session is ended at most a quarter of the limit after it.
        super().__init__("tenant-lock-watch", max(0.5, wait_seconds / 4))
        self.dsn = dsn
        self.wait_seconds = wait_seconds
        self.ended = 0
        self._conn: Any = None

    def stop(self) -> None:
        super().stop()
        self._close()

    def sweep(self) -> list[dict[str, Any]]:
        """One look: end what blocks others past the limit; the sessions found (logged and counted)."""
        if self._conn is None or self._conn.closed:
            self._conn = connect.connect(self.dsn, timeout_seconds=10)
            # Never wait on a lock of its own, nor run long: the next look tries again.
            self._conn.execute("SET lock_timeout = '2s'")
            self._conn.execute("SET statement_timeout = '10s'")
        found = store.end_blocking_tenant_sessions(self._conn, min_wait_seconds=self.wait_seconds)
        for row in found:
            if row["ended"]:
                self.ended += 1
                metrics.TENANT_SESSIONS_ENDED.labels(namespace=row["namespace"]).inc()
                logger.warning(
                    "lock watch: ended Postgres session %s of namespace %s's worker role %s: it kept %d "
                    "session(s) waiting on a lock for %.0f s (AGENTRUN_TENANT_LOCK_WAIT_SECONDS=%g)",
                    row["pid"], row["namespace"], row["role_name"], row["waiting"],
                    row["blocked_seconds"], self.wait_seconds,
                )  # fmt: skip
            else:
                logger.error(
                    "lock watch: could not end Postgres session %s of namespace %s's worker role %s, which "
                    "keeps %d session(s) waiting on a lock: the operator's database role needs "
                    "pg_signal_backend",
                    row["pid"], row["namespace"], row["role_name"], row["waiting"],
                )  # fmt: skip
        return found

    def tick(self) -> None:
        self.sweep()

    def failed(self) -> None:
        self._close()  # Postgres restarting: the next look reconnects

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # already broken: nothing to close cleanly
                conn.close()
