"""The run timeline and its tables, from plain rows (no cluster, no database)."""

from __future__ import annotations

import dataclasses
import json

from agentrun import deciding, render, trace
from tests.support.trace_rows import T0, effect, inputs, step


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
