"""An effect waits for one WAL flush, its reserve's, on a server that flushes its commits (production).

The reserve is on disk before the provider call: a crash of the server then still finds the row pending
and reconciles it. The success record after the call is not waited for (``store.record_effect``,
``flush=False``): lost only with the server, it leaves that same pending row; the next commit that waits
(the next reserve, the step's checkpoint) or the WAL writer puts it on disk. The dev cluster's server
flushes nothing (``fsync=off``), so this runs a private durable server (``agentrun_dev.postgres.
ensure_durable``: fsync and synchronous_commit on, checked at its start) and counts the WAL fsyncs of the
worker's own backend (``pg_stat_get_backend_io``), effects performed at a real HTTP provider.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_ledger_roundtrips import charge_tool, pay_graph

from agent_worker import context
from agentrun_core import store
from agentrun_dev import http_provider, postgres
from agentrun_dev import settings as dev_settings

pytestmark = pytest.mark.postgres

N = 40
_FSYNCS = (
    "SELECT coalesce(sum(fsyncs), 0)::int FROM pg_stat_get_backend_io(pg_backend_pid()) WHERE object = 'wal'"
)


@pytest.fixture(scope="module")
def durable_dsn() -> Iterator[str]:
    # Not pytest's tmp_path: concurrent pytest sessions prune old /tmp/pytest-of-<user>/ directories.
    root = Path(tempfile.mkdtemp(prefix="agentrun-ledger-flushes-"))
    private = dataclasses.replace(dev_settings.from_env(), state_dir=root / "dev")
    s = postgres.durable(private)
    try:
        postgres.ensure_durable(private)
        with psycopg.connect(postgres.dsn(s, "postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE ledger_flushes")
        dsn = postgres.dsn(s, "ledger_flushes")
        with psycopg.connect(dsn) as conn:
            store.migrate(conn)
        yield dsn
    finally:
        postgres.stop(s)
        shutil.rmtree(root, ignore_errors=True)


def _fsyncs(conn: psycopg.Connection[Any]) -> int:
    """WAL fsyncs this connection's backend made so far (its pending statistics flushed first: the next
    statement sees them)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute(_FSYNCS).fetchone()
    assert row is not None
    return int(row[0])


def test_an_effect_waits_for_the_flush_of_its_reserve_and_not_of_its_record(durable_dsn: str) -> None:
    run_id = str(uuid.uuid4())
    with psycopg.connect(durable_dsn, autocommit=True) as admin:
        store.admit_run(admin, run_id=run_id, namespace="ns", name="r", graph="x:y", input={}, spec_hash="h")
        store.claim_run(admin, run_id=run_id, epoch=1, holder="p")
    with (
        tempfile.TemporaryDirectory(prefix="agentrun-flush-provider-") as provider_dir,
        http_provider.HttpProvider(provider_dir) as provider,
        psycopg.connect(durable_dsn, autocommit=True) as worker,
    ):
        graph = pay_graph(charge_tool(provider.url, []), n=N)
        ctx = context.RunContext(conn=worker, run_id=run_id, attempt=1, epoch=1, sleep=lambda s: None)
        before = _fsyncs(worker)
        with context.activate(ctx):
            graph.invoke({}, {"configurable": {"thread_id": run_id}})
        flushes = _fsyncs(worker) - before
        performed = http_provider.stats(provider.url)["effects_performed_total"]
        recorded = [e.status for e in store.list_effects(worker, run_id)]
    assert performed == N and recorded == ["sent"] * N, (performed, recorded)
    print(f"\nWAL fsyncs of the worker's backend: {flushes / N:.2f} per effect")
    # Every reserve's commit waits for its flush (the WAL writer may have flushed a few of them first: not
    # all are this backend's fsyncs); the records do not (before: 2 per effect).
    assert N // 2 <= flushes <= N + N // 4, flushes
