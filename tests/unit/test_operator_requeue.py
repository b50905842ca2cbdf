"""When the operator looks at a run again: idle runs (parked, finished) after the idle poll, not every 2 s.

Before, ``Plan.soon`` could only lower the requeue from its start value (the active poll), so every parked
and finished run was reconciled every ~2 s: at 1,000 parked runs the operator used ~90 % of a core.
"""

from __future__ import annotations

import datetime

from agent_operator import actions, reconcile, settings
from agentrun_core import store
from tests.unit import rowmaker
from tests.unit.reconcile_world import NOW, pod, world

ACTIVE, IDLE = 2.0, 30.0
POLLS = settings.ReconcileSettings(poll_seconds=ACTIVE, idle_poll_seconds=IDLE)


def pending(seconds: float) -> store.Approval:
    return rowmaker.approval(
        approval_id="a-111111111111",
        status="pending",
        prompt={"q": "send?"},
        deadline=NOW + datetime.timedelta(seconds=seconds),
    )


def test_the_first_ask_replaces_the_default_and_later_asks_only_lower_it() -> None:
    plan = actions.Plan(requeue_after=ACTIVE)
    assert plan.requeue_after == ACTIVE  # nothing asked: the default
    plan.soon(IDLE)
    assert plan.requeue_after == IDLE
    plan.soon(10.0)
    assert plan.requeue_after == 10.0
    plan.soon(20.0)
    assert plan.requeue_after == 10.0
    plan.soon(-1.0)
    assert plan.requeue_after == 0.0


def test_a_parked_run_is_looked_at_after_the_idle_poll() -> None:
    w = world(
        db="parked",
        status={"attempts": 1, "phase": "WaitingApproval"},
        pods=[pod(phase="Failed", exit_code=10)],
        approvals=(pending(86400),),
    )
    plan = reconcile.decide(w, POLLS)
    assert plan.status is not None and plan.status["phase"] == "WaitingApproval"
    assert plan.requeue_after == IDLE


def test_a_parked_run_with_a_near_deadline_is_looked_at_at_the_deadline() -> None:
    w = world(
        db="parked",
        status={"attempts": 1, "phase": "WaitingApproval"},
        pods=[pod(phase="Failed", exit_code=10)],
        approvals=(pending(7),),
    )
    assert reconcile.decide(w, POLLS).requeue_after == 7.0


def test_a_finished_run_is_looked_at_after_the_idle_poll() -> None:
    w = world(db="succeeded", status={"attempts": 1, "phase": "Running"}, pods=[pod(phase="Succeeded")])
    plan = reconcile.decide(w, POLLS)
    assert plan.status is not None and plan.status["phase"] == "Succeeded"
    assert plan.requeue_after == IDLE


def test_a_finished_run_with_a_ttl_is_looked_at_when_it_expires() -> None:
    w = world(
        db="succeeded",
        status={"attempts": 1, "phase": "Succeeded", "completionTime": "2026-01-01T11:59:55Z"},
        pods=[pod(phase="Succeeded")],
        spec={"ttlSecondsAfterFinished": 10},
    )
    assert reconcile.decide(w, POLLS).requeue_after == 5.0


def test_a_running_run_keeps_the_active_poll() -> None:
    w = world(db="running", status={"attempts": 1}, pods=[pod(phase="Running")])
    assert reconcile.decide(w, POLLS).requeue_after == ACTIVE
