"""The Postgres side of the ledger collector: read-only queries turned into a ``metrics.Snapshot``.

Runs at scrape time, so it must be cheap and must fail fast: one small connection (re-opened after an
error), a statement timeout, a read-only repeatable-read transaction so one scrape sees one consistent state.
Ages are computed with the database's ``now()`` because the timestamps they are compared with were written by
the same clock (``DEFAULT now()``), not by the operator's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from agent_operator import metrics

# Live runs from the partial index agentrun_runs_live_idx (migration 0011): its size is the number of runs
# not yet final, whatever the history retained. Final runs are counted from agentrun_runs_status_idx.
RUNS_LIVE = """
SELECT namespace, status, count(*) FROM agentrun_runs
WHERE status NOT IN ('succeeded', 'failed', 'cancelled')
GROUP BY 1, 2
"""
RUNS_FINAL = """
SELECT namespace, status, count(*) FROM agentrun_runs
WHERE status IN ('succeeded', 'failed', 'cancelled')
GROUP BY 1, 2
"""

EFFECTS = """
SELECT r.namespace, e.tool, e.status, count(*), count(*) FILTER (WHERE e.needs_human),
       coalesce(sum(e.attempts), 0), coalesce(sum(e.duplicates_prevented), 0)
FROM agentrun_effects e JOIN agentrun_runs r USING (run_id)
GROUP BY 1, 2, 3
"""

EFFECT_DIVERGENCES = """
SELECT r.namespace, e.tool, count(*), coalesce(sum(e.divergences), 0)
FROM agentrun_effects e JOIN agentrun_runs r USING (run_id)
WHERE e.divergences > 0
GROUP BY 1, 2
"""

OLDEST_PENDING_EFFECT = """
SELECT r.namespace, extract(epoch FROM now() - min(e.created_at))::float8
FROM agentrun_effects e JOIN agentrun_runs r USING (run_id)
WHERE e.status = 'pending'
GROUP BY 1
"""

# Only heartbeats that still mean something, of running runs: the worker's own ('worker'), the current step's
# ('step:<name>'), and tool calls whose effect is still pending (a finished call's last beat is history).
# Driven from the running runs (agentrun_runs_live_idx), each of the keys looked up by primary key: the
# heartbeats of finished runs are never read (a join over the whole table would read them all).
HEARTBEAT_AGES = """
SELECT r.namespace, k.kind, greatest(0, extract(epoch FROM now() - h.beat_at))::float8
FROM agentrun_runs r
CROSS JOIN LATERAL (
    VALUES ('worker', 'worker'), ('step', 'step:' || r.current_step)
    UNION ALL
    SELECT 'tool', e.idempotency_key FROM agentrun_effects e
    WHERE e.run_id = r.run_id AND e.status = 'pending'
) k (kind, key)
JOIN agentrun_heartbeats h ON h.run_id = r.run_id AND h.key = k.key
WHERE r.status = 'running'
"""

APPROVALS_PENDING = """
SELECT r.namespace, count(*), extract(epoch FROM min(a.deadline) - now())::float8
FROM agentrun_approvals a JOIN agentrun_runs r USING (run_id)
WHERE a.status = 'pending'
GROUP BY 1
"""

APPROVAL_PENDING_AGES = """
SELECT r.namespace, greatest(0, extract(epoch FROM now() - a.requested_at))::float8
FROM agentrun_approvals a JOIN agentrun_runs r USING (run_id)
WHERE a.status = 'pending'
"""

APPROVALS_DECIDED = """
SELECT r.namespace, a.status, count(*)
FROM agentrun_approvals a JOIN agentrun_runs r USING (run_id)
WHERE a.status <> 'pending'
GROUP BY 1, 2
"""

DEADLINE_OUTCOMES = """
SELECT r.namespace, coalesce(a.deadline_action, 'unknown'), count(*)
FROM agentrun_approvals a JOIN agentrun_runs r USING (run_id)
WHERE a.status = 'expired'
GROUP BY 1, 2
"""

ATTEMPTS_ENDED = """
SELECT r.namespace, t.outcome, CASE WHEN t.control_plane THEN 'control_plane' ELSE 'run' END, count(*)
FROM agentrun_attempts t JOIN agentrun_runs r USING (run_id)
WHERE t.outcome IS NOT NULL
GROUP BY 1, 2, 3
"""

# (value expression, source table, filter) for each histogram read from rows.
APPROVAL_WAIT = ("extract(epoch FROM decided_at - requested_at)::float8", "agentrun_approvals",
                 "decided_at IS NOT NULL")
STEP_DURATION = ("duration_seconds", "agentrun_step_events", "true")
CHECKPOINT_DURATION = ("checkpoint_seconds", "agentrun_step_events", "checkpoint_seconds IS NOT NULL")


def histogram_query(value: str, table: str, where: str, bounds: Sequence[float]) -> sql.Composed:
    """Cumulative buckets computed in Postgres (one pass, one row per namespace): rows may be many, the
    result is small. The pieces are constants of this module, never user input."""
    filters = sql.SQL(", ").join(
        sql.SQL("count(*) FILTER (WHERE v <= {})").format(sql.Literal(float(b))) for b in bounds
    )
    return sql.SQL(
        "SELECT r.namespace, count(*), coalesce(sum(v), 0)::float8, {filters} "
        "FROM (SELECT run_id, {value} AS v FROM {table} WHERE {where}) x "
        "JOIN agentrun_runs r USING (run_id) GROUP BY 1"
    ).format(filters=filters, value=sql.SQL(value), table=sql.Identifier(table), where=sql.SQL(where))


def histograms(rows: Sequence[Sequence[Any]], bounds: Sequence[float]) -> dict[str, metrics.Histogram]:
    return {
        str(row[0]): metrics.Histogram(bounds=bounds, counts=[int(c) for c in row[3:]], count=int(row[1]),
                                       total=float(row[2]))
        for row in rows
    }


class SnapshotSource:
    def __init__(self, dsn: str, *, statement_timeout_seconds: float = 2.0,
                 connect_timeout_seconds: float = 3.0) -> None:
        self._dsn = dsn
        self._timeout_ms = max(1, int(statement_timeout_seconds * 1000))
        self._connect_timeout = max(1, round(connect_timeout_seconds))
        self._conn: psycopg.Connection[Any] | None = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self._dsn, connect_timeout=self._connect_timeout, application_name="agentrun-metrics",
                options=f"-c statement_timeout={self._timeout_ms}",
            )
            self._conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            self._conn.read_only = True
        return self._conn

    def fetch(self) -> metrics.Snapshot:
        conn = self._connection()
        try:
            snap = read_snapshot(conn)
            conn.rollback()  # read-only: nothing to commit; ends the snapshot
            return snap
        except BaseException:
            conn.close()  # re-opened on the next scrape (Postgres restarted, timeout, ...)
            self._conn = None
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def read_snapshot(conn: psycopg.Connection[Any]) -> metrics.Snapshot:
    def rows(query: str | sql.Composed) -> list[tuple[Any, ...]]:
        return conn.execute(query).fetchall()

    return metrics.Snapshot(
        runs=[(ns, st, int(n)) for ns, st, n in rows(RUNS_LIVE) + rows(RUNS_FINAL)],
        effects=[(ns, tool, st, int(n), int(nh), int(pc), int(dp))
                 for ns, tool, st, n, nh, pc, dp in rows(EFFECTS)],
        oldest_pending_effect={ns: float(age) for ns, age in rows(OLDEST_PENDING_EFFECT)},
        effect_divergences=[(ns, tool, int(n), int(d)) for ns, tool, n, d in rows(EFFECT_DIVERGENCES)],
        heartbeat_ages=[(ns, kind, float(age)) for ns, kind, age in rows(HEARTBEAT_AGES)],
        approvals_pending=[(ns, int(n), None if left is None else float(left))
                           for ns, n, left in rows(APPROVALS_PENDING)],
        approvals_decided=[(ns, st, int(n)) for ns, st, n in rows(APPROVALS_DECIDED)],
        approval_pending_ages=[(ns, float(age)) for ns, age in rows(APPROVAL_PENDING_AGES)],
        deadline_outcomes=[(ns, action, int(n)) for ns, action, n in rows(DEADLINE_OUTCOMES)],
        attempts_ended=[(ns, outcome, cause, int(n)) for ns, outcome, cause, n in rows(ATTEMPTS_ENDED)],
        approval_wait=histograms(rows(histogram_query(*APPROVAL_WAIT, metrics.APPROVAL_WAIT_BUCKETS)),
                                 metrics.APPROVAL_WAIT_BUCKETS),
        step_duration=histograms(rows(histogram_query(*STEP_DURATION, metrics.STEP_BUCKETS)),
                                 metrics.STEP_BUCKETS),
        checkpoint_duration=histograms(
            rows(histogram_query(*CHECKPOINT_DURATION, metrics.CHECKPOINT_BUCKETS)),
            metrics.CHECKPOINT_BUCKETS,
        ),
    )
