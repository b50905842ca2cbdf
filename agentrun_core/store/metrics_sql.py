"""The ledger collector's reads: the ``metrics_*`` queries of ``sql/metrics.sql`` turned into a ``Snapshot``.

Rule: this module reads and never writes; a scrape is one read-only repeatable-read transaction, so it
sees one consistent state. ``SnapshotSource`` keeps one small connection (re-opened after an error) with a
statement timeout, because it runs at scrape time and must be cheap and fail fast. The operator turns a
``Snapshot`` into Prometheus families (``agent_operator.observe.metric_families``); nothing here knows
Prometheus.

The bucket bounds of the row-derived histograms live here because Postgres holds them too
(``agentrun_metric_bounds``, migration 0013, which folds finished runs into the same buckets; a test checks
that both agree).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from agentrun_core.store import queries

# Histogram buckets, seconds. Steps and checkpoint writes are sub-second to minutes; human waits are
# minutes to days.
STEP_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
CHECKPOINT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
APPROVAL_WAIT_BUCKETS = (1, 10, 60, 300, 900, 3600, 4 * 3600, 86400, 3 * 86400, 7 * 86400)


@dataclasses.dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts as Prometheus wants them: ``counts[i]`` = observations <= ``bounds[i]``."""

    bounds: Sequence[float]
    counts: Sequence[int]
    count: int
    total: float


@dataclasses.dataclass
class Snapshot:
    """Everything one scrape reads from Postgres, as plain rows (tests build these by hand)."""

    runs: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)  # namespace, status, n
    # namespace, tool, status, n, needs_human, provider calls, duplicates prevented
    effects: list[tuple[str, str, str, int, int, int, int]] = dataclasses.field(default_factory=list)
    oldest_pending_effect: dict[str, float] = dataclasses.field(default_factory=dict)  # namespace -> s
    heartbeat_ages: list[tuple[str, str, float]] = dataclasses.field(default_factory=list)  # ns, kind, s
    # namespace, pending count, seconds to the nearest deadline (None: no deadline)
    approvals_pending: list[tuple[str, int, float | None]] = dataclasses.field(default_factory=list)
    approvals_decided: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)  # ns, decision, n
    deadline_outcomes: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)  # ns, action, n
    # namespace, outcome, cause ("control_plane": lost to the control plane, not counted against maxAttempts;
    # "run": everything else), n
    attempts_ended: list[tuple[str, str, str, int]] = dataclasses.field(default_factory=list)
    approval_wait: dict[str, Histogram] = dataclasses.field(default_factory=dict)
    step_duration: dict[str, Histogram] = dataclasses.field(default_factory=dict)
    checkpoint_duration: dict[str, Histogram] = dataclasses.field(default_factory=dict)
    # namespace, tool, rows replayed with other arguments, such replays in total (stored result returned)
    effect_divergences: list[tuple[str, str, int, int]] = dataclasses.field(default_factory=list)
    # namespace, seconds since a pending approval was requested: one entry per pending approval
    approval_pending_ages: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    # spec.budget: namespace, model calls, input tokens, output tokens, cost in micro-units
    model_usage: list[tuple[str, int, int, int, int]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class HistogramSource:
    """Where a row-derived histogram's observations come from: rollup ``family``, the value expression, its
    table and filter. Constants of this module, never user input (they are spliced into SQL)."""

    family: str
    value: str
    table: str
    where: str
    bounds: Sequence[float]


APPROVAL_WAIT = HistogramSource("approval_wait", "extract(epoch FROM decided_at - requested_at)::float8",
                                "agentrun_approvals", "decided_at IS NOT NULL", APPROVAL_WAIT_BUCKETS)
STEP_DURATION = HistogramSource("step_duration", "duration_seconds", "agentrun_step_events", "true",
                                STEP_BUCKETS)
CHECKPOINT_DURATION = HistogramSource("checkpoint_duration", "checkpoint_seconds", "agentrun_step_events",
                                      "checkpoint_seconds IS NOT NULL", CHECKPOINT_BUCKETS)


def histogram_query(source: HistogramSource) -> sql.Composed:
    """Cumulative buckets computed in Postgres, one row per namespace: the family's rollup row plus the rows
    of the runs not folded yet (the same shape as the ``metrics_*`` counter queries of ``metrics.sql``)."""
    bounds = source.bounds
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
    ).format(sums=sums, family=sql.Literal(source.family), filters=filters, value=sql.SQL(source.value),
             table=sql.Identifier(source.table), where=sql.SQL(source.where))


def histograms(rows: Sequence[Sequence[Any]], bounds: Sequence[float]) -> dict[str, Histogram]:
    return {
        str(row[0]): Histogram(bounds=bounds, counts=[int(c) for c in row[3:]], count=int(row[1]),
                               total=float(row[2]))
        for row in rows
    }


def read_snapshot(conn: psycopg.Connection[Any]) -> Snapshot:
    """Every figure of one scrape. The caller owns the transaction (``SnapshotSource`` ends it)."""

    def rows(query: str | sql.Composed) -> list[tuple[Any, ...]]:
        return conn.execute(query if isinstance(query, sql.Composed) else queries.get(query)).fetchall()

    def histogram(source: HistogramSource) -> dict[str, Histogram]:
        return histograms(rows(histogram_query(source)), source.bounds)

    return Snapshot(
        runs=[(ns, st, int(n)) for ns, st, n in rows("metrics_runs_live") + rows("metrics_runs_final")],
        effects=[(ns, tool, st, int(n), int(nh), int(pc), int(dp))
                 for ns, tool, st, n, nh, pc, dp in rows("metrics_effects")],
        oldest_pending_effect={ns: float(age) for ns, age in rows("metrics_oldest_pending_effect")},
        effect_divergences=[(ns, tool, int(n), int(d))
                            for ns, tool, n, d in rows("metrics_effect_divergences")],
        heartbeat_ages=[(ns, kind, float(age)) for ns, kind, age in rows("metrics_heartbeat_ages")],
        approvals_pending=[(ns, int(n), None if left is None else float(left))
                           for ns, n, left in rows("metrics_approvals_pending")],
        approvals_decided=[(ns, st, int(n)) for ns, st, n in rows("metrics_approvals_decided")],
        approval_pending_ages=[(ns, float(age)) for ns, age in rows("metrics_approval_pending_ages")],
        deadline_outcomes=[(ns, action, int(n)) for ns, action, n in rows("metrics_deadline_outcomes")],
        attempts_ended=[(ns, outcome, cause, int(n))
                        for ns, outcome, cause, n in rows("metrics_attempts_ended")],
        model_usage=[(ns, int(n), int(i), int(o), int(c)) for ns, n, i, o, c in rows("metrics_model_usage")],
        approval_wait=histogram(APPROVAL_WAIT),
        step_duration=histogram(STEP_DURATION),
        checkpoint_duration=histogram(CHECKPOINT_DURATION),
    )


class SnapshotSource:
    """One scrape = ``fetch()``: a read-only repeatable-read transaction on a connection of its own."""

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

    def fetch(self) -> Snapshot:
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
