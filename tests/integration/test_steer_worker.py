"""Fenced cancel, read-only pending rows, resolve and retry generations: real worker processes, real Postgres,
effects counted at the real HTTP provider or in the effect file (no Kubernetes: AGENTRUN_LEASE_MODE=none)."""

from __future__ import annotations

import signal
from pathlib import Path

import psycopg
import pytest

from agentrun_core import store
from agentrun_dev import http_provider
from tests.support import pg, worker_harness

pytestmark = pytest.mark.postgres
FLAKY = "tests.integration.steer_graphs:flaky"


def _effects(dsn: str, run_id: str) -> list[store.Effect]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return store.list_effects(conn, run_id)


def test_read_only_run_never_performs_a_pending_row(
    pg_dsn: str, provider: http_provider.HttpProvider, tmp_path: Path
) -> None:
    worker = worker_harness.Worker(pg_dsn, worker_harness.http_only(provider.url))
    worker_harness.admit(pg_dsn, "r")
    assert worker.run("r", pod="p", faults="after_reserve").returncode == -9  # killed: charge left pending
    (row,) = _effects(pg_dsn, "r")
    assert row.status == "pending" and row.tool == "charge"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert store.set_read_only(conn, "r", True)  # what the operator does when onTimeout=readOnly applies
    proc = worker.run("r", pod="p", attempt=2)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "is read-only" in proc.stderr and "not performed" in proc.stderr
    stats = http_provider.stats(provider.url)
    assert stats["effects_performed_total"] == 0, stats  # counted at the provider: never called
    (row,) = _effects(pg_dsn, "r")
    assert row.status == "pending"  # still unknown to us; the lookup found nothing, nothing was guessed


def test_read_only_pending_row_found_by_lookup_is_recorded_not_repeated(
    pg_dsn: str, provider: http_provider.HttpProvider, tmp_path: Path
) -> None:
    worker = worker_harness.Worker(pg_dsn, worker_harness.http_only(provider.url))
    worker_harness.admit(pg_dsn, "r")
    assert worker.run("r", pod="p", faults="after_call").returncode == -9  # charged, not recorded
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        store.set_read_only(conn, "r", True)
    worker.run("r", pod="p", attempt=2)
    charge = next(e for e in _effects(pg_dsn, "r") if e.tool == "charge")
    assert charge.status in ("sent", "confirmed")  # reconciled by lookup
    assert http_provider.stats(provider.url)["effects_performed_total"] == 1


def test_frozen_worker_cannot_act_after_cancel(
    pg_dsn: str, provider: http_provider.HttpProvider, tmp_path: Path
) -> None:
    worker = worker_harness.Worker(pg_dsn, worker_harness.http_only(provider.url))
    worker_harness.admit(pg_dsn, "r")
    held = worker_harness.start_blocked(worker, "r", tmp_path, pod="p")
    proc, block = held.proc, held.block
    try:
        proc.send_signal(signal.SIGSTOP)  # frozen inside the step before the charge
        epoch = pg.run_row(pg_dsn, "r").lease_epoch
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert store.cancel_run(conn, "r", "cancelled (spec.cancel)")
        run = pg.run_row(pg_dsn, "r")
        assert run.status == "cancelled" and run.lease_epoch == epoch + 1
        block.unlink()
    finally:
        proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 12, err[-3000:]  # fenced at its first write after the cancel
    assert http_provider.stats(provider.url)["effects_performed_total"] == 0
    assert _effects(pg_dsn, "r") == []
    assert pg.run_row(pg_dsn, "r").status == "cancelled"


def test_resolve_sent_returns_the_given_result_and_not_sent_performs_once(
    pg_dsn: str, tmp_path: Path
) -> None:
    out = tmp_path / "effects.txt"
    worker = worker_harness.Worker(pg_dsn)
    for run_id, fault, verdict in (("s", "after_call", "sent"), ("n", "after_reserve", "not_sent")):
        worker_harness.admit(pg_dsn, run_id, graph=FLAKY, path=str(out) + run_id)
        assert worker.run(run_id, pod="p", faults=fault).returncode == -9
        assert worker.run(run_id, pod="p", attempt=2).returncode == 13  # no lookup hook: needs a human
        (row,) = _effects(pg_dsn, run_id)
        assert row.status == "pending" and row.needs_human
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            refused = store.resolve_effect(conn, run_id=run_id, key="ak-nope", outcome=verdict, by="oncall")
            assert not refused.resolved and refused.refusal == "no effect with this key in the run's ledger"
            done = store.resolve_effect(
                conn,
                run_id=run_id,
                key=row.idempotency_key,
                outcome=verdict,
                by="oncall",
                result={"path": "p", "line": "first"} if verdict == "sent" else None,
            )
            assert done.resolved and done.reopened and done.new_status == "admitted"
            key = row.idempotency_key
            again = store.resolve_effect(conn, run_id=run_id, key=key, outcome=verdict, by="x")
            assert not again.resolved  # exactly once
            (item,) = store.list_interventions(conn, run_id)
        assert (item.kind, item.by, item.effect_key) == (f"resolve_{verdict}", "oncall", row.idempotency_key)
        assert pg.run_row(pg_dsn, run_id).lease_epoch > row.epoch
        proc = worker.run(run_id, pod="p", attempt=3)
        assert proc.returncode == 0, proc.stderr[-3000:]
        run = pg.run_row(pg_dsn, run_id)
        written = {"path": "p" if verdict == "sent" else str(out) + run_id, "line": "first"}
        assert run.status == "succeeded" and run.result["written"] == written  # --sent: the given result
        lines = Path(str(out) + run_id).read_text().splitlines()
        assert len(lines) == 1, lines  # exactly one effect in both cases


def test_retry_generation_gives_a_failed_effect_a_new_key_and_keeps_sent_ones(
    pg_dsn: str, tmp_path: Path
) -> None:
    out, flag = tmp_path / "effects.txt", tmp_path / "flag"
    worker = worker_harness.Worker(pg_dsn)
    worker_harness.admit(pg_dsn, "r", graph=FLAKY, path=str(out), flag=str(flag), fail_with="refused")
    assert worker.run("r", pod="p").returncode == 1
    failed = {e.tool: e for e in _effects(pg_dsn, "r")}
    assert failed["append_line"].status == "sent" and failed["notify"].status == "failed"
    flag.touch()
    # Without a retry generation the failed effect stays failed (never silently re-performed).
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert store.reopen_run(conn, run_id="r", generation=1, by="oncall", reason="retry 1") is not None
        assert store.reopen_run(conn, run_id="r", generation=1, by="oncall", reason="again") is None
    proc = worker.run("r", pod="p", attempt=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _effects(pg_dsn, "r")
    notify = [e for e in rows if e.tool == "notify"]
    assert sorted(e.status for e in notify) == ["failed", "sent"]
    new = next(e for e in notify if e.status == "sent")
    old = next(e for e in notify if e.status == "failed")
    assert new.idempotency_key != old.idempotency_key  # a key the provider has never seen
    assert (new.step, new.action, new.occurrence) == (old.step, old.action, old.occurrence)
    lines = out.read_text().splitlines()
    assert [line.split()[1] for line in lines] == ["first", "notified"]  # the first effect not repeated
    assert pg.run_row(pg_dsn, "r").retry_generation == 1
