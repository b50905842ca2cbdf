"""Metric rollups (migration 0013) against real Postgres: folding finished runs into the rollup rows changes
no figure the collector exports; purging folded runs lowers no counter and no histogram (gauges drop with the
rows, as before); folding is exactly-once under two concurrent folders and after a fold that fails midway;
a folded run whose rows change again (retry, a resolved effect, a late attempt end) is unfolded so the
figures stay exact."""

from __future__ import annotations

import random
import secrets
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from collector_rows import add_finished, add_live

from agent_operator.act import tenants
from agent_operator.observe import metric_families
from agentrun_core import store
from agentrun_core.store import metrics_sql
from tests.support.waiting import wait_for

Figures = dict[tuple[Any, ...], tuple[float, ...]]

# Variety the plain collector rows lack: effects needing a human, duplicates prevented, divergences, several
# provider calls, a second tool; attempts lost to the control plane; approvals expired with other actions;
# step events without a checkpoint time; waits of various lengths.
VARIETY = """
UPDATE agentrun_effects SET needs_human = (mod(length(idempotency_key), 3) = 0),
    duplicates_prevented = mod(length(idempotency_key), 4), attempts = 1 + mod(length(idempotency_key), 2),
    divergences = CASE WHEN idempotency_key LIKE '%7:1' THEN 2 ELSE 0 END,
    tool = CASE WHEN idempotency_key LIKE '%3:2' THEN 'charge' ELSE tool END,
    status = CASE WHEN idempotency_key LIKE '%9:2' THEN 'failed' ELSE status END;
UPDATE agentrun_attempts SET outcome = 'lost', control_plane = true WHERE run_id LIKE '%5';
UPDATE agentrun_attempts SET outcome = 'fenced' WHERE run_id LIKE '%8';
UPDATE agentrun_approvals SET deadline_action = 'read_only' WHERE status = 'expired' AND run_id LIKE '%2';
UPDATE agentrun_approvals SET status = 'rejected' WHERE status = 'approved' AND run_id LIKE '%1';
UPDATE agentrun_approvals SET requested_at = decided_at - make_interval(secs => length(run_id) * 77.7)
    WHERE decided_at IS NOT NULL;
UPDATE agentrun_step_events SET checkpoint_seconds = NULL WHERE step = 'step3' AND run_id LIKE '%4';
UPDATE agentrun_step_events SET duration_seconds = length(run_id) * 3.3 WHERE step = 'step2'
"""


def _rows(conn: psycopg.Connection[Any], n: int, live: int = 20) -> None:
    add_finished(conn, n)
    add_live(conn, live)
    for statement in VARIETY.split(";\n"):
        conn.execute(statement)
    conn.execute("ANALYZE")


def _snapshot(dsn: str) -> metrics_sql.Snapshot:
    source = metrics_sql.SnapshotSource(dsn, statement_timeout_seconds=30)
    try:
        return source.fetch()
    finally:
        source.close()


def _figures(snap: metrics_sql.Snapshot, *, counters_only: bool = False) -> Figures:
    """Every exported sample of the ledger families ({(family, sample, labels...): value}); sums rounded (the
    rollup adds floats in another order), ages left out (they follow the clock). counters_only: the counter
    and histogram families."""
    out: Figures = {}
    for fam in metric_families.families(snap):
        if counters_only and fam.type not in {"counter", "histogram"}:
            continue
        if fam.name.endswith(("age_seconds", "remaining_seconds")):
            continue
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            out[(fam.name, s.name, *sorted(s.labels.items()))] = (round(s.value, 6),)
    return out


def _reference(conn: psycopg.Connection[Any], dsn: str) -> Figures:
    """What today's aggregation over every row says: the figures with the rollups emptied and every run
    unfolded, in a transaction rolled back (valid while nothing was purged)."""
    conn.execute("BEGIN")
    try:
        conn.execute("DELETE FROM agentrun_metric_rollups")
        conn.execute("UPDATE agentrun_runs SET folded_at = NULL")
        return _figures(metrics_sql.read_snapshot(conn))
    finally:
        conn.execute("ROLLBACK")


def _fold_all(conn: psycopg.Connection[Any], batch: int = 100) -> int:
    total = 0
    while (done := store.fold_runs(conn, batch=batch)) > 0:
        total += done
    return total


def _unfolded_final(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM agentrun_runs"
        " WHERE folded_at IS NULL AND status IN ('succeeded', 'failed', 'cancelled')"
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def ledger(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _rows(conn, 300)
        yield conn


def test_histogram_bounds_in_postgres_are_the_collectors(ledger: psycopg.Connection[Any]) -> None:
    bounds = dict(ledger.execute("SELECT family, bounds FROM agentrun_metric_bounds").fetchall())
    assert bounds == {
        "approval_wait": list(map(float, metrics_sql.APPROVAL_WAIT_BUCKETS)),
        "step_duration": list(map(float, metrics_sql.STEP_BUCKETS)),
        "checkpoint_duration": list(map(float, metrics_sql.CHECKPOINT_BUCKETS)),
    }


def test_fold_changes_no_figure(ledger: psycopg.Connection[Any], pg_dsn: str) -> None:
    before = _figures(_snapshot(pg_dsn))
    assert ("agentrun_effect_divergences", "agentrun_effect_divergences_total") in {k[:2] for k in before}
    assert _fold_all(ledger, batch=70) == 300
    assert _unfolded_final(ledger) == 0
    assert ledger.execute("SELECT count(*) FROM agentrun_metric_rollups").fetchone() != (0,)
    after = _figures(_snapshot(pg_dsn))
    assert after == before
    # Half folded, half not (more finished runs arrive): still the same as the plain aggregation.
    add_finished(ledger, 50, prefix="late")
    store.fold_runs(ledger, batch=25)
    assert _figures(_snapshot(pg_dsn)) == _reference(ledger, pg_dsn)


def test_purge_of_folded_runs_lowers_no_counter(ledger: psycopg.Connection[Any], pg_dsn: str) -> None:
    _fold_all(ledger)
    # One run is unfolded again before the purge: the purge folds it itself, in its transaction.
    ledger.execute("SELECT agentrun_unfold_run('f3')")
    assert _unfolded_final(ledger) == 1
    snap_before = _snapshot(pg_dsn)
    before = _figures(snap_before, counters_only=True)
    for i in range(1, 301):
        store.mark_for_purge(ledger, f"f{i}", after_seconds=0, reason="ttl")
    purged = []
    while done := store.purge_due(ledger, batch=64):
        purged += done
    assert len(purged) == 300
    assert ledger.execute("SELECT count(*) FROM agentrun_runs").fetchone() == (20,)  # the live ones
    snap_after = _snapshot(pg_dsn)
    after = _figures(snap_after, counters_only=True)
    assert after == before, {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys()
                             if before.get(k) != after.get(k)}
    # Gauges describe what the ledger holds: the purged runs and their effect rows are gone from them.
    assert {st for _, st, _ in snap_after.runs} == {"running"}
    assert {st for _, _, st, n, *_ in snap_after.effects if n} == {"pending"}
    assert sum(nh for _, _, _, _, nh, _, _ in snap_after.effects) == 0
    assert sum(n for _, _, n, _ in snap_after.effect_divergences) == 0
    assert sum(d for _, _, _, d in snap_after.effect_divergences) == sum(
        d for _, _, _, d in snap_before.effect_divergences) > 0


def _fold_in_thread(dsn: str, results: list[int], start: threading.Barrier) -> None:
    """A folder as the operator's Purger is (two of them upsert the same rollup rows: in one order since
    migration 17, so neither is ever aborted as a deadlock victim)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        start.wait()
        total = 0
        while (done := store.fold_runs(conn, batch=16)) > 0:
            total += done
        results.append(total)


def test_fold_is_exactly_once(ledger: psycopg.Connection[Any], pg_dsn: str) -> None:
    expected = _figures(_snapshot(pg_dsn))
    # A fold that fails after its batch was folded (the caller's transaction breaks): nothing stays.
    with pytest.raises(psycopg.errors.DivisionByZero), ledger.transaction():
        assert store.fold_runs(ledger, batch=50) == 50
        ledger.execute("SELECT 1 / 0")
    assert _unfolded_final(ledger) == 300
    assert ledger.execute("SELECT count(*) FROM agentrun_metric_rollups").fetchone() == (0,)
    # Two folders at once, small batches: each run folded by exactly one of them.
    results: list[int] = []
    start = threading.Barrier(2)
    threads = [threading.Thread(target=_fold_in_thread, args=(pg_dsn, results, start)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sum(results) == 300 and len(results) == 2, results
    assert _unfolded_final(ledger) == 0
    assert _figures(_snapshot(pg_dsn)) == expected


def test_changes_to_a_folded_run_unfold_it(ledger: psycopg.Connection[Any], pg_dsn: str) -> None:
    _fold_all(ledger)
    # A retry reopens a failed run (f1: failed in collector_rows), its attempt ends late, a new one starts.
    ledger.execute("UPDATE agentrun_runs SET status = 'admitted', finished_at = NULL WHERE run_id = 'f1'")
    ledger.execute("UPDATE agentrun_attempts SET outcome = 'failed' WHERE run_id = 'f2'")
    ledger.execute("INSERT INTO agentrun_attempts (run_id, attempt, pod) VALUES ('f4', 2, 'p')")
    ledger.execute("DELETE FROM agentrun_effects WHERE idempotency_key = 'f5:1'")  # resolved: not sent
    ledger.execute("UPDATE agentrun_approvals SET status = 'approved' WHERE run_id = 'f8'")
    ledger.execute("INSERT INTO agentrun_step_events (run_id, attempt, step, started_at, duration_seconds)"
                   " VALUES ('f10', 2, 'x', now(), 7)")
    unfolded = {r[0] for r in ledger.execute("SELECT run_id FROM agentrun_runs WHERE folded_at IS NULL"
                                             " AND run_id LIKE 'f%'").fetchall()}
    assert unfolded == {"f1", "f2", "f4", "f5", "f8", "f10"}
    assert _figures(_snapshot(pg_dsn)) == _reference(ledger, pg_dsn)
    # Folded again (f1 is not final any more: it stays out until it is).
    _fold_all(ledger)
    assert _figures(_snapshot(pg_dsn)) == _reference(ledger, pg_dsn)
    reopened = ledger.execute("SELECT folded_at IS NULL FROM agentrun_runs WHERE run_id = 'f1'").fetchone()
    assert reopened == (True,)


def test_a_tenant_worker_write_unfolds_with_definer_rights(
    ledger: psycopg.Connection[Any], pg_dsn: str
) -> None:
    """Workers have no grant on the rollup; a worker's write to a folded run of its namespace still unfolds
    it (the trigger runs with the owner's rights), and it cannot fold or touch the rollup itself."""
    password = secrets.token_urlsafe(16)
    role = store.provision_tenant(ledger, "ns-1", password)
    _fold_all(ledger)
    with psycopg.connect(tenants.worker_dsn(pg_dsn, role, password), autocommit=True) as worker:
        worker.execute("INSERT INTO agentrun_step_events (run_id, attempt, step, started_at,"
                       " duration_seconds) VALUES ('f1', 9, 'late', now(), 1.5)")
        for statement in ("SELECT count(*) FROM agentrun_metric_rollups", "SELECT agentrun_fold_runs(10)",
                          "SELECT agentrun_unfold_run('f6')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                worker.execute(statement)
    unfolded = ledger.execute("SELECT folded_at IS NULL FROM agentrun_runs WHERE run_id = 'f1'").fetchone()
    assert unfolded == (True,)
    assert _figures(_snapshot(pg_dsn)) == _reference(ledger, pg_dsn)


def _waiting_on_a_lock(conn: psycopg.Connection[Any], pid: int) -> None:
    def waiting() -> bool:
        row = conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        return row is not None and row[0] == "Lock"

    wait_for(waiting, 60, f"backend {pid} waiting on a lock", interval=0.02)


def _opposite_orders(conn: psycopg.Connection[Any]) -> tuple[list[str], list[str], tuple[str, ...]]:
    """Two batches whose contributions come out of the aggregation in opposite orders: batch b's first rollup
    key k comes after some other key of b in batch a's order (so, upserted in that order, a locks that key,
    then waits for k; b, holding k, then waits for that key)."""
    final = [r[0] for r in conn.execute(
        "SELECT run_id FROM agentrun_runs WHERE status IN ('succeeded', 'failed', 'cancelled') ORDER BY 1")]
    rng = random.Random(7)
    for _ in range(2000):
        a, b = rng.sample(final, 4), rng.sample(final, 4)
        order = {}
        for batch in (a, b):
            order[tuple(batch)] = [tuple(r) for r in conn.execute(
                "SELECT family, ns, label1, label2 FROM agentrun_metric_contributions(%s)", (batch,))]
        keys_a, keys_b = order[tuple(a)], order[tuple(b)]
        first_b = keys_b[0]
        if first_b in keys_a and any(k in keys_b for k in keys_a[: keys_a.index(first_b)]):
            return a, b, first_b
    raise AssertionError("no two batches aggregate in opposite orders: the test data lost its variety")


def test_two_rollup_writers_lock_shared_rows_in_one_order(
    ledger: psycopg.Connection[Any], pg_dsn: str
) -> None:
    """Two folds (or a fold and an unfold) sharing rollup rows never deadlock: whatever order the
    aggregation gives each batch, the upsert takes the rows in key order. Made deterministic: a third
    transaction holds batch b's first row; b queues on it, then a starts (before migration 17: a deadlock
    once the row is let go)."""
    _fold_all(ledger)
    a, b, held = _opposite_orders(ledger)
    errors: dict[str, BaseException] = {}
    pids: dict[str, int] = {}
    ready = {name: threading.Event() for name in ("a", "b")}

    def add(name: str, batch: list[str]) -> None:
        try:
            with psycopg.connect(pg_dsn) as conn:
                pids[name] = conn.info.backend_pid
                ready[name].set()
                conn.execute("SELECT agentrun_rollup_add(%s, 1, false)", (batch,))
                conn.rollback()
        except BaseException as exc:  # reported by the assertion below
            errors[name] = exc
            ready[name].set()

    with psycopg.connect(pg_dsn) as holder:
        holder.execute(
            "SELECT 1 FROM agentrun_metric_rollups"
            " WHERE family = %s AND namespace = %s AND label1 = %s AND label2 = %s FOR UPDATE",
            held,
        )
        threads = {
            name: threading.Thread(target=add, args=(name, batch)) for name, batch in (("b", b), ("a", a))
        }
        for name in ("b", "a"):
            threads[name].start()
            assert ready[name].wait(60)
            _waiting_on_a_lock(ledger, pids[name])
        holder.rollback()
    for t in threads.values():
        t.join(timeout=120)
    assert not errors, errors
