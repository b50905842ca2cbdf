"""The effect ledger against an adversary, with real worker processes, real Postgres and the real provider.

* A provider that commits 1 s after the client's 0.1 s timeout: the worker must not trust the lookup that
  says "never happened" while the call may still land → exactly one commit at the provider.
* The same window at takeover: the first worker is SIGKILLed while its call is in flight at the provider
  (which commits later); the next attempt must wait the earlier call's deadline out before looking up.
* Graph code that wraps an effect in ``except Exception`` cannot swallow the needs-human stop: the worker
  exits 13 and the careless node is NOT recorded as done in its checkpoint.
(No Lease here: AGENTRUN_LEASE_MODE=none; epochs still rise per attempt.)
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver

from agentrun_core import store
from agentrun_dev import http_provider
from tests.graphs import special_graphs
from tests.support import worker_harness
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres

LATE = "tests.graphs.special_graphs:late_graph"


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[str]:
    with http_provider.HttpProvider(tmp_path / "h") as hp:
        # A provider that does not dedupe by key: a second call is a second commit.
        http_provider.request(f"{hp.url}/control/config", "POST", {"honour_keys": False})
        yield hp.url


def _worker(dsn: str, url: str) -> worker_harness.Worker:
    return worker_harness.Worker(dsn, worker_harness.http_only(url))


def test_late_commit_after_client_timeout_is_found_not_repeated(pg_dsn: str, provider: str) -> None:
    http_provider.request(f"{provider}/control/faults", "POST", {"mode": "late", "count": 1, "delay": 1.1})
    worker_harness.admit(pg_dsn, "r", graph=LATE)
    proc = _worker(pg_dsn, provider).run("r", pod="p", AGENTRUN_TEST_CLIENT_TIMEOUT="0.1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    wait_for(lambda: http_provider.stats(provider)["requests"] >= 1, 60, "the late commit", interval=0.05)
    time.sleep(1.5)  # a second (wrong) call would also have committed by now: its delay is 0
    stats = http_provider.stats(provider)
    assert stats["effects_performed_total"] == 1, stats
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        (row,) = store.list_effects(conn, "r")
    assert row.status == "sent" and row.attempts == 1


def test_takeover_waits_for_the_deposed_attempts_call_before_trusting_a_lookup(
    pg_dsn: str, provider: str
) -> None:
    # The provider commits 3 s after receiving the call; the worker is killed while waiting for the answer.
    http_provider.request(f"{provider}/control/faults", "POST", {"mode": "late", "count": 1, "delay": 3.0})
    worker_harness.admit(pg_dsn, "r", graph=LATE)
    worker = _worker(pg_dsn, provider)
    worker_harness.kill_mid_call(worker, "r", provider)
    assert http_provider.stats(provider)["effects_performed_total"] == 0  # still in flight
    started = time.monotonic()
    second = worker.run("r", pod="p2", attempt=2)
    assert second.returncode == 0, second.stderr[-3000:]
    assert time.monotonic() - started >= 5.0  # waited for attempt start + the tool's 6 s timeout
    stats = http_provider.stats(provider)
    assert stats["effects_performed_total"] == 1, stats
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        (row,) = store.list_effects(conn, "r")
        run = store.get_run(conn, "r")
    assert row.status == "sent" and run is not None and run.status == "succeeded"


def test_needs_human_cannot_be_swallowed_by_except_exception(pg_dsn: str) -> None:
    worker_harness.admit(pg_dsn, "r", graph="tests.graphs.special_graphs:careless_graph")
    worker = worker_harness.Worker(pg_dsn)
    killed = worker.run("r", pod="p", attempt=1, faults="after_reserve")
    assert killed.returncode == -signal.SIGKILL
    proc = worker.run("r", pod="p", attempt=2)  # pending row, no lookup, no dedupe: unknowable
    assert proc.returncode == 13, proc.stderr[-3000:]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        run = store.get_run(conn, "r")
        assert run is not None and run.status == "needs_human"
        graph = special_graphs.careless_graph.compile(checkpointer=PostgresSaver(conn))
        state = graph.get_state({"configurable": {"thread_id": "r"}})
    assert state.next == ("careless",)  # not recorded as done: it re-runs once a human resolved the effect
    assert "swallowed" not in (state.values.get("log") or [])
