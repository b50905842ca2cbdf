"""store.observe_run (the operator's one read per reconcile) answers what the four reads it replaces answer,
one after the other, and syncs the approval policy by their rule."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
import pytest

from agentrun_core import store
from tests.support import pg

pytestmark = pytest.mark.postgres

POLICY = {"timeoutSeconds": 60}
NEW_POLICY = {"timeoutSeconds": 120, "onTimeout": "reject"}


@pytest.fixture
def conn(pg_dsn: str) -> Any:
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        yield c


def _admit(conn: Any, run_id: str) -> None:
    pg.admit(conn, run_id=run_id, approval_policy=POLICY)
    store.claim_run(conn, run_id=run_id, epoch=1, holder="pod-1")


def _effect(conn: Any, run_id: str, key: str, status: str, needs_human: bool = False) -> None:
    pg.reserve(conn, key=key, run_id=run_id, args={"to": key})
    if status != "pending" or needs_human:
        store.record_effect(conn, key=key, run_id=run_id, epoch=1, status=status, needs_human=needs_human)


def _separate_reads(conn: Any, run_id: str) -> tuple[Any, ...]:
    return (
        store.get_run(conn, run_id),
        tuple(store.list_approvals(conn, run_id)),
        store.effect_counts(conn, run_id),
        tuple(store.list_interventions(conn, run_id)),
    )


def test_a_run_not_admitted_is_none_with_postgres_clock(conn: Any) -> None:
    seen = store.observe_run(conn, "nope", POLICY)
    _, now = store.get_run_now(conn, "nope")
    assert seen.run is None and seen.approvals == () and seen.effects == {} and seen.interventions == ()
    assert abs((now - seen.db_now).total_seconds()) < 60 and seen.db_now.tzinfo is not None


def test_it_answers_what_the_four_reads_answer(conn: Any) -> None:
    _admit(conn, "r1")
    _admit(conn, "other")  # another run's rows are not this run's
    for run_id in ("r1", "other"):
        _effect(conn, run_id, f"{run_id}-sent", "sent")
        _effect(conn, run_id, f"{run_id}-pending", "pending")
        _effect(conn, run_id, f"{run_id}-stuck", "pending", needs_human=True)
        _effect(conn, run_id, f"{run_id}-done", "confirmed")
    store.record_approval(conn, run_id="r1", epoch=1, approval_id="a1", interrupt_id="i1", prompt={"q": 1})
    store.decide_approval(conn, approval_id="a1", run_id="r1", decision="approved", decided_by="alice")
    store.record_approval(conn, run_id="r1", epoch=1, approval_id="a2", interrupt_id="i2", prompt=[1, "x"])
    store.finish_run(conn, run_id="r1", epoch=1, status="needs_human")  # a human resolves a stopped run's
    resolved = store.resolve_effect(conn, run_id="r1", key="r1-stuck", outcome="sent", by="bob")
    assert resolved.resolved, resolved

    seen = store.observe_run(conn, "r1", POLICY)
    run, approvals, effects, interventions = _separate_reads(conn, "r1")
    assert seen.run == run
    assert seen.approvals == approvals and [a.approval_id for a in approvals] == ["a1", "a2"]
    assert seen.effects == effects and effects["sent"] == 2 and effects["confirmed"] == 1
    assert seen.interventions == interventions and len(interventions) == 1
    assert not seen.policy_synced  # the same policy: nothing written


def test_the_policy_follows_the_spec_unless_an_approval_is_pending_or_the_run_finished(conn: Any) -> None:
    _admit(conn, "r1")
    seen = store.observe_run(conn, "r1", NEW_POLICY)
    assert seen.policy_synced
    assert seen.run is not None and seen.run.approval_policy == POLICY  # the row as read before the sync
    after = store.get_run(conn, "r1")
    assert after is not None and after.approval_policy == NEW_POLICY
    assert dataclasses.replace(after, approval_policy=POLICY, updated_at=seen.run.updated_at) == seen.run

    store.record_approval(conn, run_id="r1", epoch=1, approval_id="a1", interrupt_id="i1", prompt="ok?")
    seen = store.observe_run(conn, "r1", POLICY)
    assert not seen.policy_synced  # the pending approval keeps the policy it was requested under
    assert store.get_run(conn, "r1").approval_policy == NEW_POLICY  # type: ignore[union-attr]

    _admit(conn, "done")
    store.finish_run(conn, run_id="done", epoch=1, status="succeeded")
    assert not store.observe_run(conn, "done", NEW_POLICY).policy_synced
    assert store.get_run(conn, "done").approval_policy == POLICY  # type: ignore[union-attr]
