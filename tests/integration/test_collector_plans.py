"""The collector's queries are index-driven: with 10,000 finished runs (and their attempts, effects, step
events, approvals, heartbeats) next to 20 live ones, EXPLAIN shows every query about live state reading
through an index and never scanning a ledger table whole; once the finished runs are folded into the metric
rollups (migration 0013), the same holds for the cumulative queries (counters, histograms), which read the
rollup rows (one per label set) and the runs not folded yet. Behaviour, not timings: the scrape time for 100
vs 10,000 finished runs, unfolded and folded, is printed for the record (``-s``), never asserted."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from collector_rows import add_finished, add_live
from psycopg import sql

from agentrun_core import store
from agentrun_core.store import metrics_sql, queries

LIVE_QUERIES = {
    "metrics_runs_live": ("agentrun_runs_live_idx",),
    "metrics_heartbeat_ages": ("agentrun_heartbeats_pkey", "agentrun_effects_pending_run_idx"),
    "metrics_oldest_pending_effect": ("agentrun_effects_pending_idx",),
    "metrics_approvals_pending": ("agentrun_approvals_one_pending",),
    "metrics_effect_divergences": ("agentrun_effects_divergent_idx",),
}
# Cumulative queries, once the finished runs are folded: driven from the runs not folded yet.
CUMULATIVE_QUERIES: dict[str, str | sql.Composed] = {
    "metrics_runs_final": queries.get("metrics_runs_final"),
    "metrics_effects": queries.get("metrics_effects"),
    "metrics_approvals_decided": queries.get("metrics_approvals_decided"),
    "metrics_deadline_outcomes": queries.get("metrics_deadline_outcomes"),
    "metrics_attempts_ended": queries.get("metrics_attempts_ended"),
    "APPROVAL_WAIT": metrics_sql.histogram_query(metrics_sql.APPROVAL_WAIT),
    "STEP_DURATION": metrics_sql.histogram_query(metrics_sql.STEP_DURATION),
    "CHECKPOINT_DURATION": metrics_sql.histogram_query(metrics_sql.CHECKPOINT_DURATION),
}
# One row per (family, namespace, labels): bounded by the label sets, never by the history; read whole.
ROLLUPS = "agentrun_metric_rollups"


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _plan(conn: psycopg.Connection[Any], query: str | sql.Composed) -> list[dict[str, Any]]:
    statement = sql.SQL(query) if isinstance(query, str) else query
    row = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) ") + statement).fetchone()
    assert row is not None
    data = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return list(_nodes(data[0]["Plan"]))


def _scrape_ms(conn: psycopg.Connection[Any], reps: int = 9) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        metrics_sql.read_snapshot(conn)
        conn.rollback()
        times.append(time.perf_counter() - t0)
    return sorted(times)[reps // 2] * 1000


@pytest.fixture
def ledger(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        add_live(conn, 20)
        add_finished(conn, 100)
        yield conn


def test_live_queries_read_through_partial_indexes(ledger: psycopg.Connection[Any], pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as reader:
        small = _scrape_ms(reader)
    add_finished(ledger, 9_900, prefix="g")
    with psycopg.connect(pg_dsn) as reader:
        large = _scrape_ms(reader)
    store.fold_runs(ledger, batch=20_000)
    ledger.execute("ANALYZE")
    with psycopg.connect(pg_dsn) as reader:
        folded = _scrape_ms(reader)
    print(f"\nscrape: {small:.1f} ms with 100 finished runs, {large:.1f} ms with 10,000 (20 live), "
          f"{folded:.1f} ms with the 10,000 folded")
    for name, indexes in LIVE_QUERIES.items():
        nodes = _plan(ledger, queries.get(name))
        scanned = {n.get("Relation Name") for n in nodes if n["Node Type"] == "Seq Scan"} - {ROLLUPS}
        used = {n.get("Index Name") for n in nodes if n.get("Index Name")}
        assert not scanned, (name, scanned, nodes)
        assert set(indexes) <= used, (name, used)
    for name, query in CUMULATIVE_QUERIES.items():
        nodes = _plan(ledger, query)
        scanned = {n.get("Relation Name") for n in nodes if n["Node Type"] == "Seq Scan"} - {ROLLUPS}
        used = {n.get("Index Name") for n in nodes if n.get("Index Name")}
        assert not scanned, (name, scanned, nodes)
        assert "agentrun_runs_unfolded_idx" in used, (name, used)


def test_heartbeat_ages_reads_only_live_keys(ledger: psycopg.Connection[Any]) -> None:
    """The index-driven heartbeat query returns what the rule says: worker, current step and pending tool
    calls of running runs — not the finished runs' beats, not a settled call's last beat."""
    ledger.execute("UPDATE agentrun_effects SET status = 'confirmed' WHERE idempotency_key = 'live1:e'")
    ledger.execute("INSERT INTO agentrun_heartbeats (run_id, key) VALUES ('live2', 'step:old')")
    rows = ledger.execute(queries.get("metrics_heartbeat_ages")).fetchall()
    kinds: dict[str, int] = {}
    for _, kind, age in rows:
        kinds[kind] = kinds.get(kind, 0) + 1
        assert age >= 0
    assert kinds == {"worker": 20, "step": 20, "tool": 19}, kinds
