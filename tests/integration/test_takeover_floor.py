"""The takeover wait counts from the worker's claim of the run, not from the attempt row (issue 34, item 5).

After a takeover a negative lookup is trusted only once the deposed holder's call can no longer land: it
could issue one until its Lease ended, that is until the new worker claimed the run, so the floor is the
claim + the tool's timeout. The operator writes the attempt row when it creates the Pod; a Pod that starts
late claims the run later by as much, and a floor counted from that row was shorter by as much.

Real Postgres; the second test runs real worker processes against the real HTTP provider (which does not
dedupe by key: a second call is a second commit, counted there).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from agentrun_core import store
from agentrun_dev import http_provider
from tests.support import pg, worker_harness
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres

LATE = "tests.graphs.special_graphs:late_graph"
TIMEOUT = 6.0  # post_late's timeout= (tests/graphs/special_graphs.py)
POD_LATE_BY = "10 seconds"  # between the operator's attempt row and the worker's claim


def _reserve(conn: psycopg.Connection, epoch: int) -> store.Reservation:
    return pg.reserve(
        conn,
        key="k",
        run_id="r",
        epoch=epoch,
        step="post",
        action="post_late",
        tool="post_late",
        args_hash="h",
        timeout_seconds=TIMEOUT,
    )


def _pod_started_late(conn: psycopg.Connection, attempt: int, pod: str) -> None:
    """The operator's attempt row at Pod creation, as if the worker claims the run POD_LATE_BY later."""
    store.record_attempt_start(conn, run_id="r", attempt=attempt, pod=pod, start_reason="lease_expired")
    conn.execute(
        "UPDATE agentrun_attempts SET started_at = started_at - %s::interval"
        " WHERE run_id = 'r' AND attempt = %s",
        (POD_LATE_BY, attempt),
    )


def _deposed_holder_reserved_long_ago(conn: psycopg.Connection) -> None:
    """The deposed holder reserved the row and stalled (a pause, a frozen node) before issuing its call: the
    deadline it recorded is past, and only its Lease bounded when it could still issue the call."""
    conn.execute("UPDATE agentrun_effects SET call_deadline = now() - interval '1 second' WHERE run_id = 'r'")


def _attempt_1_reserved_and_stalled(pg_dsn: str, conn: psycopg.Connection) -> None:
    """Attempt 1 (Pod p1, epoch 1) claimed run ``r``, reserved its call's row and stalled before the call."""
    worker_harness.admit(pg_dsn, "r", graph=LATE)
    store.claim_attempt(conn, run_id="r", epoch=1, holder="p1", attempt=1)
    assert _reserve(conn, 1).outcome == "reserved"
    _deposed_holder_reserved_long_ago(conn)


def test_the_takeover_floor_counts_from_the_claim_not_from_the_attempt_row(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _attempt_1_reserved_and_stalled(pg_dsn, conn)
        _pod_started_late(conn, 2, "p2")
        claiming = time.monotonic()
        store.claim_attempt(conn, run_id="r", epoch=2, holder="p2", attempt=2)
        again = _reserve(conn, 2)
        since_claim = time.monotonic() - claiming
    assert again.outcome == "existing"
    # The whole timeout from the claim (a moment ago), not what is left of it from the attempt row.
    assert again.in_flight_seconds >= TIMEOUT - since_claim - 0.5, (again, since_claim)
    assert again.in_flight_seconds <= TIMEOUT


def test_a_run_claimed_before_the_claim_was_recorded_waits_the_whole_timeout(pg_dsn: str) -> None:
    """A run whose claim time is unknown (claimed by a worker before migration 28) counts from now."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _attempt_1_reserved_and_stalled(pg_dsn, conn)
        store.claim_attempt(conn, run_id="r", epoch=2, holder="p2", attempt=2)
        conn.execute("UPDATE agentrun_runs SET claimed_at = NULL WHERE run_id = 'r'")
        again = _reserve(conn, 2)
    assert TIMEOUT - 0.5 <= again.in_flight_seconds <= TIMEOUT, again


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[str]:
    with http_provider.HttpProvider(tmp_path / "h") as hp:
        http_provider.request(f"{hp.url}/control/config", "POST", {"honour_keys": False})
        yield hp.url


def test_a_worker_whose_pod_started_late_still_waits_out_the_deposed_call(
    pg_dsn: str, provider: str, request: pytest.FixtureRequest
) -> None:
    # The deposed holder's call reaches the provider, which commits it 5 s later (within the tool's 6 s).
    http_provider.request(f"{provider}/control/faults", "POST", {"mode": "late", "count": 1, "delay": 5.0})
    worker_harness.admit(pg_dsn, "r", graph=LATE)
    providers = worker_harness.Providers(provider, "127.0.0.1", 1, "http://127.0.0.1:1")
    worker = worker_harness.Worker(pg_dsn, providers)
    # The second worker is forked from a pre-imported zygote: it claims the run and looks up well within the
    # 5 s the deposed call takes to land (a fresh interpreter on a loaded machine may take longer than that
    # to start, and then even a wrong floor would have waited long enough).
    zygotes = worker_harness.ZygotePool(1)
    request.addfinalizer(zygotes.close)
    late_starter = worker_harness.Worker(pg_dsn, providers, zygotes=zygotes)
    worker_harness.kill_mid_call(worker, "r", provider)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _deposed_holder_reserved_long_ago(conn)
        _pod_started_late(conn, 2, "p2")
    second = late_starter.run("r", pod="p2", attempt=2)
    assert second.returncode == 0, second.stderr[-3000:]
    wait_for(
        lambda: http_provider.stats(provider)["late_committed"] == 1,
        60,
        "the deposed call's late commit",
        interval=0.05,
    )
    stats = http_provider.stats(provider)
    assert stats["effects_performed_total"] == 1, stats  # found by the lookup, never performed again
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        (row,) = store.list_effects(conn, "r")
        run = store.get_run(conn, "r")
    assert row.status == "sent" and run is not None and run.status == "succeeded"
