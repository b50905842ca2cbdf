"""Never re-key what may have happened: an effect whose outcome is unknown keeps its idempotency key through
a retry. Real worker processes, real Postgres, the real HTTP provider (which dedupes by key, as Stripe does);
charges are counted in cents AT the provider (no Kubernetes: AGENTRUN_LEASE_MODE=none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentrun_core import store
from agentrun_dev import http_provider
from tests.support import worker_harness
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres
BILL = "tests.integration.retry_graphs:bill_graph"


def _worker(dsn: str, p: http_provider.HttpProvider) -> worker_harness.Worker:
    return worker_harness.Worker(dsn, worker_harness.http_only(p.url))


def _fault(p: http_provider.HttpProvider, **fault: Any) -> None:
    status, body, _ = http_provider.request(f"{p.url}/control/faults", "POST", fault)
    assert status == 200, body


def _cents(p: http_provider.HttpProvider) -> dict[str, int]:
    """Cents the provider performed, per idempotency key (its own counts x the request it stored)."""
    out: dict[str, int] = {}
    for key, performed in http_provider.stats(p.url)["effects_performed"].items():
        status, entry, _ = http_provider.request(f"{p.url}/effects/{key}")
        assert status == 200, entry
        out[key] = performed * int(entry["request"]["cents"])
    return out


def _wait_performed(p: http_provider.HttpProvider, total: int, timeout: float = 60) -> None:
    """The provider's late commit (it outlives the client's timeout) has happened."""
    wait_for(
        lambda: http_provider.stats(p.url)["effects_performed_total"] >= total,
        timeout,
        f"{total} effect(s) performed at the provider",
        interval=0.05,
        on_timeout=lambda: str(http_provider.stats(p.url)),
    )


def _effects(dsn: str, run_id: str) -> dict[str, store.Effect]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {e.tool: e for e in store.list_effects(conn, run_id)}


def _run(dsn: str, run_id: str) -> store.Run:
    with psycopg.connect(dsn, autocommit=True) as conn:
        run = store.get_run(conn, run_id)
    assert run is not None
    return run


def test_last_allowed_call_timing_out_after_the_commit_is_not_failed_and_retry_charges_once(
    pg_dsn: str, provider: http_provider.HttpProvider
) -> None:
    worker = _worker(pg_dsn, provider)
    worker_harness.admit(pg_dsn, "r", graph=BILL, shape="once")
    # The one allowed call: the provider commits 2 s after the client gave up (1 s timeout).
    _fault(provider, mode="late", delay=2.0)
    proc = worker.run("r", pod="p")
    assert proc.returncode == 1, proc.stderr[-3000:]  # the run fails: out of attempts
    _wait_performed(provider, 1)
    row = _effects(pg_dsn, "r")["charge_once"]
    assert row.status == "pending", (row.status, row.error)  # unknown outcome, never "failed"
    assert "agentrun retry" in (row.error or "") and not row.needs_human
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        reopened = store.reopen_run(conn, run_id="r", generation=1, by="oncall", reason="retry 1")
    assert reopened is not None and reopened.rekeyed == [] and reopened.kept == []  # nothing failed
    proc = worker.run("r", pod="p", attempt=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = _effects(pg_dsn, "r")["charge_once"]
    assert after.idempotency_key == row.idempotency_key and after.status == "sent"  # the same key, answered
    assert _cents(provider) == {row.idempotency_key: 500}  # charged once, at the provider
    assert _run(pg_dsn, "r").result["charged"]["cents"] == 500


def test_unclassified_oserror_after_the_provider_committed_is_an_unknown_outcome(
    pg_dsn: str, provider: http_provider.HttpProvider, tmp_path: Path
) -> None:
    worker = _worker(pg_dsn, provider)
    flag = tmp_path / "receipt-fixed"
    worker_harness.admit(pg_dsn, "r", graph=BILL, shape="receipt", flag=str(flag))
    proc = worker.run("r", pod="p")
    # no lookup hook, the provider is not trusted to dedupe: a human decides, nothing is guessed
    assert proc.returncode == 13, proc.stderr[-3000:]
    row = _effects(pg_dsn, "r")["charge_with_receipt"]
    assert (row.status, row.needs_human) == ("pending", True), (row.status, row.error)
    assert "ReceiptDiskFull" in (row.error or "") and "unclassified" in (row.error or "")
    flag.touch()  # the disk is fixed; a retry alone must not charge again
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert store.reopen_run(conn, run_id="r", generation=1, by="oncall", reason="retry 1") is not None
    assert worker.run("r", pod="p", attempt=2).returncode == 13  # still the human's question
    assert _cents(provider) == {row.idempotency_key: 500}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        done = store.resolve_effect(
            conn, run_id="r", key=row.idempotency_key, outcome="sent", by="oncall", result={"cents": 500}
        )
    assert done.resolved
    assert worker.run("r", pod="p", attempt=3).returncode == 0
    assert _cents(provider) == {row.idempotency_key: 500}  # charged once


def _two_failures(
    dsn: str, provider: http_provider.HttpProvider
) -> tuple[worker_harness.Worker, dict[str, store.Effect]]:
    """Run "r" (bill_graph, shape two) to its failure, both effects failed, and its rows by tool."""
    worker = _worker(dsn, provider)
    worker_harness.admit(dsn, "r", graph=BILL, shape="two")
    # gift_card: refused, Retry-After longer than the policy's bound -> failed, proven not performed.
    _fault(provider, mode="429", retry_after=1000)
    # charge_twice: call 1 times out and commits late (may have happened), call 2 is refused (503) and is the
    # last allowed -> failed, but the refusal proves nothing about call 1.
    _fault(provider, mode="late", delay=2.0)
    _fault(provider, mode="503", retry_after=0)
    proc = worker.run("r", pod="p")
    assert proc.returncode == 1, proc.stderr[-3000:]
    _wait_performed(provider, 1)
    return worker, _effects(dsn, "r")


def test_retry_rekeys_only_the_failure_proven_not_performed_and_says_which(
    pg_dsn: str, provider: http_provider.HttpProvider
) -> None:
    worker, rows = _two_failures(pg_dsn, provider)
    gift, charge = rows["gift_card"], rows["charge_twice"]
    assert (gift.status, gift.not_performed) == ("failed", True), gift.error
    assert (charge.status, charge.not_performed) == ("failed", False), charge.error
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        reopened = store.reopen_run(conn, run_id="r", generation=1, by="oncall", reason="retry 1")
        (item,) = store.list_interventions(conn, "r")
    assert reopened is not None
    assert [e["key"] for e in reopened.rekeyed] == [gift.idempotency_key]
    assert [(e["key"], e["tool"]) for e in reopened.kept] == [(charge.idempotency_key, "charge_twice")]
    assert item.detail == {"rekeyed": reopened.rekeyed, "kept": reopened.kept}  # recorded with the retry
    kept = _effects(pg_dsn, "r")["charge_twice"]
    assert kept.status == "pending" and "may have been performed" in (kept.error or "")
    proc = worker.run("r", pod="p", attempt=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        final = store.list_effects(conn, "r")
    gifts = sorted((e.status, e.idempotency_key) for e in final if e.tool == "gift_card")
    assert [s for s, _ in gifts] == ["failed", "sent"]  # the proven one got a new key
    (charged,) = [e for e in final if e.tool == "charge_twice"]
    assert (charged.idempotency_key, charged.status) == (charge.idempotency_key, "sent")  # the same key
    new_gift = next(k for s, k in gifts if s == "sent")
    # once per effect at the provider: the gift card under its new key, the charge under its only key
    assert _cents(provider) == {new_gift: 100, charge.idempotency_key: 500}


def test_a_failed_effect_that_may_have_happened_can_be_resolved_one_proven_not_performed_cannot(
    pg_dsn: str, provider: http_provider.HttpProvider
) -> None:
    worker, rows = _two_failures(pg_dsn, provider)
    gift, charge = rows["gift_card"], rows["charge_twice"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        gift_key = gift.idempotency_key
        refused = store.resolve_effect(conn, run_id="r", key=gift_key, outcome="sent", by="oncall")
        assert not refused.resolved
        assert refused.refusal == (
            "the effect failed and its failure proves nothing was performed: `agentrun retry` performs it "
            "again under a new key"
        )
        # the charge may have happened: a human may say what happened, before any retry
        done = store.resolve_effect(
            conn,
            run_id="r",
            key=charge.idempotency_key,
            outcome="sent",
            by="oncall",
            result={"id": "eff_1", "cents": 500},
        )
        assert done.resolved and not done.reopened  # a failed run stays stopped until retried
        reopened = store.reopen_run(conn, run_id="r", generation=1, by="oncall", reason="retry 1")
    assert reopened is not None
    assert ([e["key"] for e in reopened.rekeyed], reopened.kept) == ([gift.idempotency_key], [])
    assert worker.run("r", pod="p", attempt=2).returncode == 0
    assert _run(pg_dsn, "r").result["charged"] == {"id": "eff_1", "cents": 500}  # the human's answer
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        final = store.list_effects(conn, "r")
    (new_gift,) = [e.idempotency_key for e in final if e.tool == "gift_card" and e.status == "sent"]
    assert _cents(provider) == {new_gift: 100, charge.idempotency_key: 500}


def test_a_failed_row_from_before_the_proof_existed_is_kept_under_its_key(
    pg_dsn: str, tmp_path: Path
) -> None:
    """Rows failed before migration 0029 carry not_performed = false (its default): a retry never re-keys
    them. Counted in the effect file the graph's tools append to (one line per performed call)."""
    out, flag = tmp_path / "effects.txt", tmp_path / "flag"
    worker = worker_harness.Worker(pg_dsn)
    graph = "tests.integration.steer_graphs:flaky"
    worker_harness.admit(pg_dsn, "r", graph=graph, path=str(out), flag=str(flag), fail_with="refused")
    assert worker.run("r", pod="p").returncode == 1
    notify = _effects(pg_dsn, "r")["notify"]
    assert (notify.status, notify.not_performed) == ("failed", True)  # effects.Permanent: proven
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        # what migration 0029 leaves on a row failed by an earlier release: no proof
        conn.execute(
            "UPDATE agentrun_effects SET not_performed = DEFAULT WHERE idempotency_key = %s",
            (notify.idempotency_key,),
        )
        reopened = store.reopen_run(conn, run_id="r", generation=1, by="oncall", reason="retry 1")
    assert reopened is not None and reopened.rekeyed == []
    assert [e["key"] for e in reopened.kept] == [notify.idempotency_key]
    flag.touch()
    # kept under its key, pending: no lookup hook, no key dedupe -> a human decides; nothing performed
    assert worker.run("r", pod="p", attempt=2).returncode == 13
    assert [line.split()[1] for line in out.read_text().splitlines()] == ["first"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        key = notify.idempotency_key
        assert store.resolve_effect(conn, run_id="r", key=key, outcome="not_sent", by="oncall").resolved
    assert worker.run("r", pod="p", attempt=3).returncode == 0
    lines = out.read_text().splitlines()
    assert [line.split() for line in lines] == [[lines[0].split()[0], "first"], [key, "notified"]]  # once
