"""The ledger collector against the real dev Postgres: rows inserted into the schema come out as metrics."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import prometheus_client
import psycopg
import pytest

from agent_operator.observe import metrics
from agentrun_core.store import metrics_sql


def seed(conn: psycopg.Connection[Any], ns: str = "team-a") -> None:
    """A small but complete ledger: runs in several states, effects, heartbeats, approvals, step events."""
    for run_id, status in (("r1", "running"), ("r2", "parked"), ("r3", "failed"), ("r4", "succeeded")):
        conn.execute(
            "INSERT INTO agentrun_runs (run_id, namespace, name, graph, input, spec_hash, status)"
            " VALUES (%s, %s, %s, 'm:g', '{}', 'h', %s)",
            (run_id, ns, f"run-{run_id}", status),
        )
    conn.execute("UPDATE agentrun_runs SET current_step = 'b' WHERE run_id = 'r1'")
    conn.execute(
        "INSERT INTO agentrun_effects (idempotency_key, run_id, step, action, tool, args_hash, args, status,"
        " attempts, duplicates_prevented, epoch, created_at, needs_human) VALUES"
        " ('k1', 'r1', 's', 'send', 'email', 'a', '{}', 'pending', 1, 0, 1,"
        " now() - interval '90 seconds', true),"
        " ('k2', 'r1', 's', 'send', 'email', 'b', '{}', 'sent', 1, 2, 1, now(), false),"
        " ('k3', 'r4', 's', 'post', 'http', 'c', '{}', 'confirmed', 2, 1, 1, now(), false)"
    )
    conn.execute(
        "INSERT INTO agentrun_heartbeats (run_id, key, beat_at) VALUES"
        " ('r1', 'worker', now() - interval '20 seconds'),"
        " ('r1', 'step:b', now() - interval '4 seconds'),"  # the current step
        " ('r1', 'step:a', now() - interval '1 hour'),"  # an earlier step: history"
        " ('r1', 'k1', now() - interval '3 seconds'),"
        " ('r1', 'k2', now() - interval '1 hour'),"  # effect already sent: history, not staleness
        " ('r3', 'worker', now() - interval '2 hours')"
    )  # run not running: ignored
    conn.execute(
        "INSERT INTO agentrun_approvals (approval_id, run_id, interrupt_id, prompt, requested_at, deadline,"
        " status, decided_by, decided_at, deadline_action) VALUES"
        " ('a-1', 'r2', 'i1', '{}', now() - interval '10 minutes', now() + interval '50 minutes', 'pending',"
        "  NULL, NULL, NULL),"
        " ('a-2', 'r4', 'i2', '{}', now() - interval '1 hour', now(), 'approved', 'alice',"
        "  now() - interval '55 minutes', NULL),"
        " ('a-3', 'r3', 'i3', '{}', now() - interval '2 days', now() - interval '1 day', 'expired', NULL,"
        "  now() - interval '1 day', 'cancel')"
    )
    conn.execute(
        "INSERT INTO agentrun_attempts (run_id, attempt, pod, outcome, control_plane) VALUES"
        " ('r1', 1, 'p1', 'lost', false), ('r1', 2, 'p2', NULL, false), ('r4', 1, 'p3', 'succeeded', false),"
        " ('r4', 2, 'p4', 'fenced', true)"
    )
    conn.execute(
        "INSERT INTO agentrun_step_events (run_id, attempt, step, started_at, duration_seconds,"
        " checkpoint_seconds) VALUES ('r1', 1, 'a', now(), 0.2, 0.003), ('r1', 2, 'b', now(), 4.0, NULL)"
    )
    conn.commit()


@contextlib.contextmanager
def seeded_registry(pg_dsn: str, **source_options: Any) -> Iterator[prometheus_client.CollectorRegistry]:
    """A registry of the ledger collector on the seeded ledger; its Postgres connection closed after."""
    with psycopg.connect(pg_dsn) as conn:
        seed(conn)
    source = metrics_sql.SnapshotSource(pg_dsn, **source_options)
    reg = prometheus_client.CollectorRegistry()
    reg.register(metrics.LedgerCollector(source.fetch))
    try:
        yield reg
    finally:
        source.close()


def test_collector_reads_the_ledger(pg_dsn: str) -> None:
    with seeded_registry(pg_dsn) as reg:

        def v(name: str, **labels: str) -> float | None:
            value: float | None = reg.get_sample_value(name, labels)
            return value

        assert v("agentrun_collector_up") == 1
        assert v("agentrun_runs", namespace="team-a", phase="Running") == 1
        assert v("agentrun_runs", namespace="team-a", phase="WaitingApproval") == 1
        assert v("agentrun_runs", namespace="team-a", phase="Cancelled") == 0
        assert v("agentrun_effects", namespace="team-a", tool="email", status="pending") == 1
        assert v("agentrun_effects", namespace="team-a", tool="http", status="confirmed") == 1
        assert v("agentrun_effects_needs_human", namespace="team-a", tool="email") == 1
        assert v("agentrun_effect_duplicates_prevented_total", namespace="team-a", tool="email") == 2
        assert v("agentrun_effect_provider_calls_total", namespace="team-a", tool="http") == 2
        age = v("agentrun_effect_oldest_pending_age_seconds", namespace="team-a")
        assert age is not None and 89 <= age < 120
        stalest = v("agentrun_heartbeat_oldest_age_seconds", namespace="team-a")
        assert stalest is not None and 19 <= stalest < 60
        assert v("agentrun_heartbeat_age_seconds_gcount", namespace="team-a", kind="worker") == 1
        assert v("agentrun_heartbeat_age_seconds_gcount", namespace="team-a", kind="tool") == 1
        assert v("agentrun_heartbeat_age_seconds_gcount", namespace="team-a", kind="step") == 1
        assert v("agentrun_approvals_pending", namespace="team-a") == 1
        left = v("agentrun_approval_deadline_remaining_seconds", namespace="team-a")
        assert left is not None and 2900 < left <= 3000
        assert v("agentrun_approvals_decided_total", namespace="team-a", decision="approved") == 1
        assert v("agentrun_approval_deadline_outcomes_total", namespace="team-a", action="cancel") == 1
        assert v("agentrun_approval_wait_seconds_bucket", namespace="team-a", le="300.0") == 1
        assert v("agentrun_approval_wait_seconds_count", namespace="team-a") == 2
        assert v("agentrun_attempts_ended_total", namespace="team-a", outcome="lost", cause="run") == 1
        lost_to_control_plane = {"namespace": "team-a", "outcome": "fenced", "cause": "control_plane"}
        assert v("agentrun_attempts_ended_total", **lost_to_control_plane) == 1
        assert v("agentrun_step_duration_seconds_bucket", namespace="team-a", le="0.25") == 1
        assert v("agentrun_step_duration_seconds_count", namespace="team-a") == 2
        assert v("agentrun_checkpoint_write_duration_seconds_count", namespace="team-a") == 1


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_postgres_down_exports_collector_up_zero_over_http() -> None:
    reg = prometheus_client.CollectorRegistry()
    collector = metrics.postgres_collector(
        f"postgresql://x@127.0.0.1:{_closed_port()}/x", connect_timeout_seconds=1
    )
    server = metrics.start_metrics_server(0, addr="127.0.0.1", registry=reg, collector=collector)
    try:
        started = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        assert resp.status == 200
        assert "agentrun_collector_up 0.0" in text
        assert time.monotonic() - started < 5
    finally:
        server.shutdown()


@pytest.mark.slow
def test_statement_timeout_bounds_a_blocked_scrape(pg_dsn: str) -> None:
    """A table locked by someone else must not hang the scrape: the statement timeout ends it (up 0),
    and the next scrape after the lock is gone works again (the connection is re-opened)."""
    with seeded_registry(pg_dsn, statement_timeout_seconds=0.5) as reg, psycopg.connect(pg_dsn) as locker:
        locker.execute("LOCK TABLE agentrun_effects IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        assert reg.get_sample_value("agentrun_collector_up") == 0
        assert time.monotonic() - started < 3
        locker.rollback()
        assert reg.get_sample_value("agentrun_collector_up") == 1


def test_concurrent_scrapes_share_one_connection_safely(pg_dsn: str) -> None:
    results: list[float | None] = []
    with seeded_registry(pg_dsn) as reg:

        def scrape() -> None:
            for _ in range(5):
                results.append(reg.get_sample_value("agentrun_collector_up"))

        threads = [threading.Thread(target=scrape) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == [1.0] * 20


def test_healthz_answers_without_touching_postgres() -> None:
    calls: list[int] = []

    def fetch() -> metrics_sql.Snapshot:
        calls.append(1)
        return metrics_sql.Snapshot()

    reg = prometheus_client.CollectorRegistry()
    collector = metrics.LedgerCollector(fetch, on_namespaces=lambda _: None)
    server = metrics.start_metrics_server(0, addr="127.0.0.1", registry=reg, collector=collector)
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as resp:
            assert resp.status == 200 and resp.read() == b"ok\n"
        assert calls == []
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
            assert b"agentrun_collector_up 1.0" in resp.read()
        assert calls == [1]
    finally:
        server.shutdown()
