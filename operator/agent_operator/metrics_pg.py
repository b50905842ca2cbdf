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
# not yet final, whatever the history retained.
RUNS_LIVE = """
SELECT namespace, status, count(*) FROM agentrun_runs
WHERE status NOT IN ('succeeded', 'failed', 'cancelled')
GROUP BY 1, 2
"""

# Cumulative figures (migration 0013): the rollup rows of a family + the same aggregation over the runs not
# folded yet (agentrun_runs_unfolded_idx, then each run's rows by run id). A scrape costs what the unfolded
# runs cost; a purge takes back only the gauge columns, so counters and histograms never decrease. A row whose
# figures all sum to 0 (a run folded, then unfolded) is left out, as when nothing was ever counted.
RUNS_FINAL = """
SELECT namespace, status, sum(n)::bigint FROM (
    SELECT namespace, label1 AS status, n FROM agentrun_metric_rollups
    WHERE family = 'runs' AND label1 IN ('succeeded', 'failed', 'cancelled')
    UNION ALL
    SELECT namespace, status, count(*) FROM agentrun_runs
    WHERE folded_at IS NULL AND status IN ('succeeded', 'failed', 'cancelled')
    GROUP BY 1, 2
) x
GROUP BY 1, 2 HAVING sum(n) <> 0
"""

EFFECTS = """
SELECT namespace, tool, status, sum(n)::bigint, sum(nh)::bigint, sum(pc)::bigint, sum(dp)::bigint FROM (
    SELECT namespace, label1 AS tool, label2 AS status, n, v1 AS nh, v2 AS pc, v3 AS dp
    FROM agentrun_metric_rollups WHERE family = 'effects'
    UNION ALL
    SELECT r.namespace, e.tool, e.status, count(*), count(*) FILTER (WHERE e.needs_human),
           coalesce(sum(e.attempts), 0), coalesce(sum(e.duplicates_prevented), 0)
    FROM agentrun_runs r JOIN agentrun_effects e USING (run_id)
    WHERE r.folded_at IS NULL
    GROUP BY 1, 2, 3
) x
GROUP BY 1, 2, 3 HAVING sum(n) <> 0 OR sum(nh) <> 0 OR sum(pc) <> 0 OR sum(dp) <> 0
"""

EFFECT_DIVERGENCES = """
SELECT namespace, tool, sum(n)::bigint, sum(d)::bigint FROM (
    SELECT namespace, label1 AS tool, n, v1 AS d FROM agentrun_metric_rollups WHERE family = 'divergences'
    UNION ALL
    SELECT r.namespace, e.tool, count(*), coalesce(sum(e.divergences), 0)
    FROM agentrun_effects e JOIN agentrun_runs r USING (run_id)
    WHERE e.divergences > 0 AND r.folded_at IS NULL
    GROUP BY 1, 2
) x
GROUP BY 1, 2 HAVING sum(n) <> 0 OR sum(d) <> 0
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
SELECT namespace, status, sum(n)::bigint FROM (
    SELECT namespace, label1 AS status, n FROM agentrun_metric_rollups WHERE family = 'approvals_decided'
    UNION ALL
    SELECT r.namespace, a.status, count(*)
    FROM agentrun_runs r JOIN agentrun_approvals a USING (run_id)
    WHERE r.folded_at IS NULL AND a.status <> 'pending'
    GROUP BY 1, 2
) x
GROUP BY 1, 2 HAVING sum(n) <> 0
"""

DEADLINE_OUTCOMES = """
SELECT namespace, action, sum(n)::bigint FROM (
    SELECT namespace, label1 AS action, n FROM agentrun_metric_rollups WHERE family = 'deadline_outcomes'
    UNION ALL
    SELECT r.namespace, coalesce(a.deadline_action, 'unknown'), count(*)
    FROM agentrun_runs r JOIN agentrun_approvals a USING (run_id)
    WHERE r.folded_at IS NULL AND a.status = 'expired'
    GROUP BY 1, 2
) x
GROUP BY 1, 2 HAVING sum(n) <> 0
"""

ATTEMPTS_ENDED = """
SELECT namespace, outcome, cause, sum(n)::bigint FROM (
    SELECT namespace, label1 AS outcome, label2 AS cause, n FROM agentrun_metric_rollups
    WHERE family = 'attempts_ended'
    UNION ALL
    SELECT r.namespace, t.outcome, CASE WHEN t.control_plane THEN 'control_plane' ELSE 'run' END, count(*)
    FROM agentrun_runs r JOIN agentrun_attempts t USING (run_id)
    WHERE r.folded_at IS NULL AND t.outcome IS NOT NULL
    GROUP BY 1, 2, 3
) x
GROUP BY 1, 2, 3 HAVING sum(n) <> 0
"""

# (rollup family, value expression, source table, filter) for each histogram read from rows. The bounds are
# metrics.*_BUCKETS here and agentrun_metric_bounds in Postgres (the same; a test checks).
APPROVAL_WAIT = ("approval_wait", "extract(epoch FROM decided_at - requested_at)::float8",
                 "agentrun_approvals", "decided_at IS NOT NULL")
STEP_DURATION = ("step_duration", "duration_seconds", "agentrun_step_events", "true")
CHECKPOINT_DURATION = ("checkpoint_duration", "checkpoint_seconds", "agentrun_step_events",
                       "checkpoint_seconds IS NOT NULL")


def histogram_query(family: str, value: str, table: str, where: str, bounds: Sequence[float]) -> sql.Composed:
    """Cumulative buckets computed in Postgres, one row per namespace: the family's rollup row plus the rows
    of the runs not folded yet. The pieces are constants of this module, never user input."""
    filters = sql.SQL(", ").join(
        sql.SQL("count(*) FILTER (WHERE v <= {})").format(sql.Literal(float(b))) for b in bounds
    )
    sums = sql.SQL(", ").join(
        sql.SQL("sum(buckets[{}])::bigint").format(sql.Literal(i)) for i in range(1, len(bounds) + 1)
    )
    return sql.SQL(
        "SELECT namespace, sum(n)::bigint, sum(total)::float8, {sums} FROM ("
        " SELECT namespace, n, total, buckets FROM agentrun_metric_rollups WHERE family = {family}"
        " UNION ALL"
        " SELECT r.namespace, count(*), coalesce(sum(v), 0)::float8, ARRAY[{filters}]::bigint[]"
        " FROM agentrun_runs r JOIN (SELECT run_id, {value} AS v FROM {table} WHERE {where}) x USING (run_id)"
        " WHERE r.folded_at IS NULL GROUP BY 1"
        ") h GROUP BY 1 HAVING sum(n) <> 0"
    ).format(sums=sums, family=sql.Literal(family), filters=filters, value=sql.SQL(value),
             table=sql.Identifier(table), where=sql.SQL(where))


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
