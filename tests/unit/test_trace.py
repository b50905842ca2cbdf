"""The run timeline and its tables, from plain rows (no cluster, no database)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

from agentrun import deciding, render, trace
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


def test_a_rerun_with_the_same_keys_is_not_a_divergence() -> None:
    e = effect("k1", "reply", {"to": "a@x"})
    reruns = trace.reruns([step(1, 1, "reply", ["k1"]), step(2, 2, "reply", ["k1"])], [e])
    assert [(r.step, r.attempts, r.diverged) for r in reruns] == [("reply", [1, 2], False)]


def test_different_arguments_across_attempts_are_a_divergence_with_the_changed_field() -> None:
    old = effect("k1", "reply", {"to": "a@x", "body": "hello"})
    new = effect("k2", "reply", {"to": "a@x", "body": "hello at 12:01"})
    (r,) = trace.reruns([step(1, 1, "reply", ["k1"]), step(2, 2, "reply", ["k2"])], [old, new])
    assert r.diverged and r.only_earlier == ["k1"] and r.only_later == ["k2"]
    assert r.arg_changes == [
        {
            "action": "send_email",
            "occurrence": 0,
            "field": "body",
            "earlier": "hello",
            "later": "hello at 12:01",
        }
    ]


def test_steps_of_one_attempt_only_are_not_reruns() -> None:
    assert trace.reruns([step(1, 1, "a", []), step(2, 1, "b", []), step(3, 2, "c", [])], []) == []


def test_trace_shows_attempts_steps_effects_approvals_and_the_approver() -> None:
    effects = [effect("k1", "reply", {"to": "a@x"}, duplicates_prevented=1)]
    data = trace.build(
        inputs(
            [step(1, 1, "classify", []), step(2, 1, "reply", ["k1"]), step(3, 2, "reply", ["k1"])], effects
        )
    )
    json.dumps(data)  # JSON-ready
    assert [a["outcome"] for a in data["attempts"]] == ["drained", "parked", "succeeded"]
    assert data["approvals"][0]["by"] == "alice" and data["approvals"][0]["decision"] == "approved"
    assert data["effects"][0]["providerRef"] == "ref-k1"
    text = render.trace(data)
    for fragment in (
        "AgentRun support/ticket-1",
        "ticket-1-1",
        "ticket-1-2",
        "evicted",
        "drained",
        "alice",
        "approved",
        "ref-k1",
        "ck-2",
        "reply: ran in attempts 1, 2; same effect keys",
    ):
        assert fragment in text, fragment


def test_trace_says_which_attempts_the_control_plane_lost() -> None:
    data = trace.build(inputs([], []))
    attempts = [dict(a) for a in data["attempts"]]
    attempts[0].update(outcome="fenced", detail="lease lost: API server unreachable", controlPlane=True)
    attempts[1].update(outcome="lost", detail="OOMKilled: exit 137")
    text = render.trace({**data, "attempts": attempts})
    rows = {
        line.split()[0]: line for line in text.splitlines()[text.splitlines().index("ATTEMPTS") + 2 :][:3]
    }
    assert "fenced (control plane)" in rows["1"], text
    assert "(control plane)" not in rows["2"] and "lost" in rows["2"], text
    lost = dataclasses.replace(inputs([], []).attempts[0], outcome="lost", control_plane=True)
    built = trace.build(dataclasses.replace(inputs([], []), attempts=[lost]))
    assert built["attempts"][0]["controlPlane"] is True


def test_divergence_is_rendered() -> None:
    effects = [effect("k1", "reply", {"n": 1}), effect("k2", "reply", {"n": 2})]
    text = render.trace(
        trace.build(inputs([step(1, 1, "reply", ["k1"]), step(2, 2, "reply", ["k2"])], effects))
    )
    assert "reply: ran in attempts 1, 2; DIVERGED" in text
    assert "argument 'n': 1 -> 2" in text


def test_same_position_with_other_arguments_is_a_divergence_and_shown_in_the_ledger() -> None:
    e = effect(
        "k1", "reply", {"body": "a"}, divergences=1, diverged_args_hash="h2", diverged_args={"body": "b"}
    )
    data = trace.build(inputs([step(1, 1, "reply", ["k1"]), step(2, 2, "reply", ["k1"])], [e]))
    text = render.trace(data)
    assert "reply: ran in attempts 1, 2; DIVERGED" in text
    assert "argument 'body': 'a' -> 'b'" in text
    assert data["effects"][0]["divergences"] == 1 and data["effects"][0]["keyVersion"] == 1
    assert "DIVERGED" in render.effects_table(data["effects"], wide=False).splitlines()[0]
    assert "DIVERGED" in render.effects_table(data["effects"], wide=True).splitlines()[0]


def test_table_aligns_columns_and_marks_missing_values() -> None:
    assert render.table(["A", "BB"], [["x", None], ["long", 1]]).splitlines() == [
        "A     BB",
        "x     -",
        "long  1",
    ]


def test_list_shows_phase_step_pending_approval_and_effects() -> None:
    items = [
        {
            "metadata": {"name": "r1", "namespace": "ns", "creationTimestamp": "2026-01-01T11:00:00Z"},
            "status": {
                "phase": "WaitingApproval",
                "currentStep": "approve",
                "attempts": 2,
                "pendingApproval": {"id": "a-abc"},
                "effects": {"sent": 1, "pending": 0},
            },
        }
    ]
    text = render.run_list(items, T0, all_namespaces=False)
    assert text.splitlines()[1].split() == ["r1", "WaitingApproval", "approve", "2", "a-abc", "sent=1", "1h"]


def test_approve_patch_sets_the_decision_and_clears_the_opposite() -> None:
    assert deciding.patch_for("approve", "a-1", None) == {
        "agentrun.dev/approve": "a-1",
        "agentrun.dev/reject": None,
    }
    assert deciding.patch_for("reject", "a-1", "no") == {
        "agentrun.dev/reject": "a-1",
        "agentrun.dev/approve": None,
        "agentrun.dev/comment": "no",
    }


def test_the_ledger_says_which_failed_effects_a_retry_would_rekey() -> None:
    proven = effect("k1", "bill", {"n": 1}, status="failed", not_performed=True)
    unknown = effect("k2", "bill", {"n": 2}, status="failed", occurrence=1)
    data = trace.build(inputs([step(1, 1, "bill", ["k1", "k2"])], [proven, unknown]))
    assert [e["notPerformed"] for e in data["effects"]] == [True, False]
    for wide in (False, True):
        text = render.effects_table(data["effects"], wide=wide)
        assert "failed (not performed)" in text and "failed (may have happened)" in text
