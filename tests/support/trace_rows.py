"""A run's trace as plain rows (no cluster, no database): the AgentRun, its run row, three attempts (evicted,
parked on an approval, approved and succeeded), the approval, and builders of step events and effects, for
the tests of ``agentrun trace`` and of what it renders.
"""

from __future__ import annotations

import datetime
from typing import Any

from agentrun import trace
from agentrun_core import store

T0 = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def effect(
    key: str, step: str, args: dict[str, Any], status: str = "sent", occurrence: int = 0, **kw: Any
) -> store.Effect:
    base: dict[str, Any] = dict(
        idempotency_key=key,
        run_id="u1",
        step=step,
        action="send_email",
        tool="email",
        occurrence=occurrence,
        args_hash=f"h-{key}",
        args=args,
        status=status,
        needs_human=False,
        attempts=1,
        provider_ref=f"ref-{key}",
        result=None,
        error=None,
        epoch=1,
        duplicates_prevented=0,
        created_at=at(1),
        updated_at=at(1),
        sent_at=at(2),
        confirmed_at=None,
    )
    base.update(kw)
    return store.Effect(**base)


def step(i: int, attempt: int, name: str, keys: list[str]) -> store.StepEvent:
    return store.StepEvent(
        id=i,
        run_id="u1",
        attempt=attempt,
        step=name,
        checkpoint_id=f"ck-{i}",
        started_at=at(i),
        duration_seconds=0.25 * i,
        checkpoint_seconds=0.004,
        effect_keys=keys,
        recorded_at=at(i),
    )


def inputs(steps: list[store.StepEvent], effects: list[store.Effect]) -> trace.Inputs:
    resource = {
        "metadata": {"name": "ticket-1", "namespace": "support", "uid": "u1"},
        "status": {
            "phase": "Succeeded",
            "attempts": 3,
            "currentStep": "reply",
            "approvals": [{"id": "a-1", "decision": "approved", "by": "alice", "at": "x"}],
        },
    }
    attempts = [
        store.Attempt("u1", 1, "ticket-1-1", 1, "first", at(0), at(10), "drained", "evicted"),
        store.Attempt("u1", 2, "ticket-1-2", 2, "evicted", at(12), at(20), "parked", None),
        store.Attempt("u1", 3, "ticket-1-3", 3, "approval", at(60), at(70), "succeeded", None),
    ]
    approvals = [
        store.Approval(
            "a-1",
            "u1",
            "i1",
            {"q": "refund?"},
            at(20),
            at(86420),
            "approved",
            "alice",
            at(55),
            "ok",
            {"approved": True},
            None,
            at(61),
        )
    ]
    run = store.Run(
        "u1",
        "support",
        "ticket-1",
        "m:g",
        {},
        "h",
        "sync",
        "succeeded",
        3,
        "ticket-1-3",
        "reply",
        False,
        {},
        {"ok": True},
        None,
        None,
        at(0),
        at(70),
        at(70),
    )
    return trace.Inputs(
        resource=resource, run=run, attempts=attempts, steps=steps, effects=effects, approvals=approvals
    )
