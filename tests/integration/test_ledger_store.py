"""agentrun_core.store against real Postgres: admission, fencing, ledger transitions, approvals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from agentrun_core import errors, store
from tests.support import pg
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres


@pytest.fixture
def conn(pg_dsn: str) -> psycopg.Connection[object]:
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        yield c  # type: ignore[misc]


def _admit(conn: psycopg.Connection[object], run_id: str = "r1") -> store.Run:
    return store.admit_run(
        conn,
        run_id=run_id,
        namespace="ns",
        name="n",
        graph="m:g",
        input={"a": 1},
        spec_hash="h",
        durability="sync",
        approval_policy={"timeoutSeconds": 60},
    )


def _reserve(conn: psycopg.Connection[object], key: str = "k1", epoch: int = 1) -> store.Reservation:
    return pg.reserve(conn, key=key, run_id="r1", epoch=epoch, args={"to": "x"})


def test_migrate_is_idempotent(conn: psycopg.Connection[object]) -> None:
    assert store.migrate(conn) == []
    assert store.schema_version(conn) >= 1


def test_admit_is_insert_or_return(conn: psycopg.Connection[object]) -> None:
    first = _admit(conn)
    again = store.admit_run(
        conn, run_id="r1", namespace="ns", name="n", graph="other:g", input={}, spec_hash="h2"
    )
    assert again.graph == "m:g" and again.admitted_at == first.admitted_at
    assert first.status == "admitted" and first.input == {"a": 1}
    got = store.get_run(conn, "r1")
    assert got is not None and got.approval_policy == {"timeoutSeconds": 60}
    assert store.get_run(conn, "nope") is None
    assert [r.run_id for r in store.list_runs(conn, namespace="ns")] == ["r1"]
    assert store.list_runs(conn, statuses=["parked"]) == []


def test_claim_only_raises_epoch(conn: psycopg.Connection[object]) -> None:
    _admit(conn)
    assert store.claim_run(conn, run_id="r1", epoch=2, holder="pod-a").lease_epoch == 2
    assert store.claim_run(conn, run_id="r1", epoch=2, holder="pod-a").status == "running"  # same holder
    with pytest.raises(errors.Fenced):
        store.claim_run(conn, run_id="r1", epoch=2, holder="pod-b")
    with pytest.raises(errors.Fenced):
        store.claim_run(conn, run_id="r1", epoch=1, holder="pod-old")
    assert store.claim_run(conn, run_id="r1", epoch=3, holder="pod-b").holder == "pod-b"
    with pytest.raises(errors.RunNotFound):
        store.claim_run(conn, run_id="zz", epoch=9, holder="x")


def test_claim_attempt_and_finish_attempt_write_the_attempt_only_when_the_run_write_took(
    conn: psycopg.Connection[object],
) -> None:
    """The worker's claim and its attempt row, and its outcome and the attempt's end, are one statement
    each: a refused claim or outcome writes no attempt row / no attempt end."""
    _admit(conn)
    store.record_attempt_start(conn, run_id="r1", attempt=1, pod="p1", start_reason="first")  # the operator
    run = store.claim_attempt(conn, run_id="r1", epoch=2, holder="p1", attempt=1)
    assert (run.lease_epoch, run.holder, run.status) == (2, "p1", "running")
    (attempt,) = store.list_attempts(conn, "r1")
    assert (attempt.pod, attempt.epoch, attempt.start_reason) == ("p1", 2, "first")
    with pytest.raises(errors.Fenced):
        store.claim_attempt(conn, run_id="r1", epoch=1, holder="p-old", attempt=2)
    assert [a.attempt for a in store.list_attempts(conn, "r1")] == [1]
    with pytest.raises(errors.RunNotFound):
        store.claim_attempt(conn, run_id="zz", epoch=9, holder="x", attempt=1)
    with pytest.raises(errors.Fenced):
        store.finish_attempt(conn, run_id="r1", epoch=1, attempt=1, status="succeeded", outcome="succeeded")
    assert store.list_attempts(conn, "r1")[0].outcome is None
    done = store.finish_attempt(
        conn, run_id="r1", epoch=2, attempt=1, status="failed", outcome="failed", detail="Boom", error="e"
    )
    assert (done.status, done.error, done.status_reason) == ("failed", "e", None)
    (ended,) = store.list_attempts(conn, "r1")
    assert (ended.outcome, ended.detail) == ("failed", "Boom") and ended.ended_at is not None
    with pytest.raises(errors.Fenced):  # final already: never overwritten, the attempt untouched
        store.finish_attempt(conn, run_id="r1", epoch=2, attempt=1, status="succeeded", outcome="succeeded")
    assert store.list_attempts(conn, "r1")[0].outcome == "failed"


def test_reserve_record_and_fencing(conn: psycopg.Connection[object]) -> None:
    _admit(conn)
    store.claim_run(conn, run_id="r1", epoch=1, holder="a")
    first = _reserve(conn)
    assert first.outcome == "reserved" and first.effect is None  # nothing of a new row comes back
    second = _reserve(conn)
    assert second.outcome == "existing" and second.effect is not None and second.effect.status == "pending"
    store.record_effect(
        conn, key="k1", run_id="r1", epoch=1, status="sent", calls=1, result={"id": 7}, provider_ref="p7"
    )
    sent = store.get_effect(conn, run_id="r1", key="k1")  # nothing of the row comes back from the record
    assert sent is not None and sent.status == "sent" and sent.attempts == 1 and sent.sent_at
    assert sent.result == {"id": 7} and sent.provider_ref == "p7"
    hit = _reserve(conn)
    assert hit.outcome == "existing" and hit.effect is not None and hit.effect.result == {"id": 7}
    assert hit.effect.duplicates_prevented == 1
    with pytest.raises(RuntimeError, match="illegal transition 'sent' -> 'failed'"):  # the status before
        store.record_effect(conn, key="k1", run_id="r1", epoch=1, status="failed")
    # A newer worker takes over: the old epoch can neither reserve nor record.
    store.claim_run(conn, run_id="r1", epoch=2, holder="b")
    with pytest.raises(errors.Fenced):
        _reserve(conn, key="k2", epoch=1)
    assert store.get_effect(conn, run_id="r1", key="k2") is None
    with pytest.raises(errors.Fenced):
        store.record_effect(conn, key="k1", run_id="r1", epoch=1, status="confirmed")
    store.record_effect(conn, key="k1", run_id="r1", epoch=2, status="confirmed")
    confirmed = store.get_effect(conn, run_id="r1", key="k1")
    assert confirmed is not None and confirmed.status == "confirmed" and confirmed.confirmed_at
    assert store.effect_counts(conn, "r1") == {
        "pending": 0,
        "sent": 0,
        "confirmed": 1,
        "failed": 0,
        "needsHuman": 0,
    }


def _waits_for_flush(conn: psycopg.Connection[object], write: Callable[[], object]) -> bool:
    """Whether the transaction of ``write`` (writing through ``conn``) waits for its WAL flush at commit,
    on a server that flushes (the dev server does not: turned on for this transaction)."""
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = on")
        write()
        row = conn.execute("SHOW synchronous_commit").fetchone()
    return row == ("on",)


def test_only_a_success_record_commits_without_waiting_for_the_flush(
    conn: psycopg.Connection[object],
) -> None:
    """What is written before a provider call (the reserve, a re-issue's deadline) and a failure are on disk
    at commit; a success record (lost only with the server, it leaves the row pending: reconciled) is not
    waited for, and the setting ends with its transaction."""
    server_default = conn.execute("SHOW synchronous_commit").fetchone()
    _admit(conn)
    store.claim_run(conn, run_id="r1", epoch=1, holder="a")
    fence = {"run_id": "r1", "epoch": 1}
    assert _waits_for_flush(conn, lambda: _reserve(conn))
    assert _waits_for_flush(
        conn, lambda: store.record_effect(conn, key="k1", **fence, status="pending", deadline_seconds=5.0)
    )
    assert not _waits_for_flush(
        conn, lambda: store.record_effect(conn, key="k1", **fence, status="sent", result=1, flush=False)
    )
    assert (got := store.get_effect(conn, run_id="r1", key="k1")) is not None and got.status == "sent"
    _reserve(conn, key="k2")
    with pytest.raises(ValueError, match="must be flushed"):
        store.record_effect(conn, key="k2", **fence, status="failed", error="e", flush=False)
    assert _waits_for_flush(conn, lambda: store.record_effect(conn, key="k2", **fence, status="failed"))
    assert conn.execute("SHOW synchronous_commit").fetchone() == server_default


def test_read_only_refuses_new_effects_but_returns_recorded(conn: psycopg.Connection[object]) -> None:
    _admit(conn)
    store.claim_run(conn, run_id="r1", epoch=1, holder="a")
    _reserve(conn)
    store.record_effect(conn, key="k1", run_id="r1", epoch=1, status="sent", calls=1, result=1)
    assert store.set_read_only(conn, "r1", True)
    assert _reserve(conn).outcome == "existing"
    with pytest.raises(errors.ReadOnlyRun):
        _reserve(conn, key="k2")


def test_confirm_effect_later(conn: psycopg.Connection[object]) -> None:
    _admit(conn)
    store.claim_run(conn, run_id="r1", epoch=1, holder="a")
    _reserve(conn)
    store.record_effect(conn, key="k1", run_id="r1", epoch=1, status="sent", calls=1)
    got = store.confirm_effect(conn, run_id="r1", key="k1", provider_ref="msg-1")
    assert got is not None and got.status == "confirmed" and got.provider_ref == "msg-1"
    assert store.confirm_effect(conn, run_id="r1", key="k1") is None


def test_approvals_decided_exactly_once(conn: psycopg.Connection[object]) -> None:
    _admit(conn)
    store.claim_run(conn, run_id="r1", epoch=1, holder="a")
    asked: dict[str, Any] = {
        "run_id": "r1",
        "epoch": 1,
        "approval_id": "a-1",
        "interrupt_id": "i1",
        "prompt": {"q": "ok?"},
    }
    approval = store.record_approval(conn, **asked)
    assert approval.status == "pending" and approval.deadline is not None
    again = store.record_approval(conn, **asked)  # the same request again (a replayed interrupt)
    assert again.requested_at == approval.requested_at
    run = store.get_run(conn, "r1")
    assert run is not None and run.status == "parked"
    decide = dict(approval_id="a-1", run_id="r1", decision="approved", decided_by="alice", comment="fine")
    assert store.decide_approval(conn, **decide) is True  # type: ignore[arg-type]
    assert store.decide_approval(conn, **decide) is False  # type: ignore[arg-type]
    decided = store.get_approval(conn, run_id="r1", approval_id="a-1")
    assert decided is not None and decided.payload == {
        "approved": True,
        "approval_id": "a-1",
        "by": "alice",
        "comment": "fine",
        "type": "accept",  # LangGraph's human-in-the-loop response
        "args": None,
    }
    assert [a.approval_id for a in store.list_approvals(conn, "r1")] == ["a-1"]
    with pytest.raises(errors.Fenced):
        store.record_approval(conn, run_id="r1", epoch=0, approval_id="a-2", interrupt_id="i2", prompt=1)


def test_expiry_read_only(conn: psycopg.Connection[object]) -> None:

    store.admit_run(
        conn,
        run_id="r1",
        namespace="ns",
        name="n",
        graph="m:g",
        input={},
        spec_hash="h",
        approval_policy={"timeoutSeconds": 1, "onTimeout": "readOnly"},
    )
    store.claim_run(conn, run_id="r1", epoch=1, holder="a")
    pending = store.record_approval(
        conn, run_id="r1", epoch=1, approval_id="a-1", interrupt_id="i1", prompt="p"
    )
    assert pending.policy == {"timeoutSeconds": 1, "onTimeout": "readOnly"}  # the snapshot, by the trigger
    expire = dict(
        approval_id="a-1", run_id="r1", decision="expired", decided_by=None, deadline_action="read_only"
    )
    # Postgres's clock decides: not before the deadline Postgres computed ...
    early = store.decide_approval_detail(conn, **expire)  # type: ignore[arg-type]
    assert not early.won and early.status == "pending" and not early.past_deadline
    wait_for(lambda: store.decide_approval(conn, **expire), 30, "the expiry applied", interval=0.1)  # type: ignore[arg-type]
    run = store.get_run(conn, "r1")
    assert run is not None and run.read_only
    approval = store.get_approval(conn, run_id="r1", approval_id="a-1")
    assert approval is not None and approval.payload["expired"] is True and approval.payload["read_only"]


def test_finish_cancel_attempts_events(conn: psycopg.Connection[object]) -> None:
    import datetime

    _admit(conn)
    store.record_attempt_start(conn, run_id="r1", attempt=1, pod="p1", start_reason="first")
    store.claim_run(conn, run_id="r1", epoch=1, holder="p1")
    attempt = store.record_attempt_start(conn, run_id="r1", attempt=1, pod="p1", epoch=1)
    assert attempt.start_reason == "first" and attempt.epoch == 1
    store.record_step_event(
        conn,
        run_id="r1",
        attempt=1,
        step="n:1",
        checkpoint_id="c",
        duration_seconds=0.1,
        started_at=datetime.datetime.now(datetime.UTC),
        effect_keys=["k"],
    )
    assert store.list_step_events(conn, "r1")[0].effect_keys == ["k"]
    store.heartbeat(conn, run_id="r1", key="worker", details={"x": 1})
    assert store.list_heartbeats(conn, "r1")[0].details == {"x": 1}
    with pytest.raises(errors.Fenced):
        store.finish_run(conn, run_id="r1", epoch=0, status="succeeded")
    done = store.finish_run(conn, run_id="r1", epoch=1, status="succeeded", result={"ok": True})
    assert done.status == "succeeded" and done.finished_at and done.result == {"ok": True}
    assert store.record_attempt_end(conn, run_id="r1", attempt=1, outcome="succeeded")
    assert store.list_attempts(conn, "r1")[0].outcome == "succeeded"
    assert store.cancel_run(conn, "r1", "late") is False  # final already
    _admit(conn, "r2")
    assert store.cancel_run(conn, "r2", "user asked") is True


def test_pool_and_non_autocommit_connections(pg_dsn: str) -> None:
    import psycopg_pool

    with psycopg_pool.ConnectionPool(pg_dsn, min_size=1, max_size=1, open=True) as pool:
        _admit(pool)  # type: ignore[arg-type]
    with psycopg.connect(pg_dsn) as c:
        assert store.get_run(c, "r1") is not None
        assert store.cancel_run(c, "r1", "x")
    with psycopg.connect(pg_dsn) as c:
        run = store.get_run(c, "r1")
        assert run is not None and run.status == "cancelled"
