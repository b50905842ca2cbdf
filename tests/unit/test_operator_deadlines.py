"""Run deadlines in the pure reconcile: woken at the deadline (not polled), failed past it as a cancel does
(fenced in Postgres first, then the worker Pod deleted), never while the run is parked."""

from __future__ import annotations

import datetime

import pytest

from agent_operator import settings
from agent_operator.decide import actions, model, reconcile
from agentrun_core import deadline_math
from tests.support import rowmaker
from tests.unit.reconcile_world import NOW, effective, parked, pod, world

IDLE = settings.ReconcileSettings(poll_seconds=30.0, idle_poll_seconds=300.0)


def ago(seconds: float) -> datetime.datetime:
    return NOW - datetime.timedelta(seconds=seconds)


def clock(*attempts: deadline_math.Interval, last_step: float | None = None) -> deadline_math.Clock:
    """The worker of the latest attempt claimed the run a second after the attempt started."""
    return deadline_math.Clock(
        now=NOW,
        attempts=attempts,
        last_step_at=ago(last_step) if last_step is not None else None,
        claimed_at=attempts[-1].start + datetime.timedelta(seconds=1) if attempts else None,
    )


def running(deadlines: dict[str, int], deadline_clock: deadline_math.Clock) -> model.World:
    """A run whose first attempt's worker runs, with ``deadlines`` (spec fields) and its clock."""
    return world(
        db="running",
        status={"attempts": 1},
        pods=[pod(phase="Running")],
        spec=deadlines,
        deadline_clock=deadline_clock,
    )


def test_a_running_run_is_woken_at_its_deadline_not_polled() -> None:
    w = running(
        {"activeDeadlineSeconds": 100, "progressDeadlineSeconds": 60},
        clock(deadline_math.Interval(ago(80)), last_step=20),
    )
    plan = reconcile.decide(w, IDLE)
    assert effective(plan) == []
    assert plan.requeue_after == pytest.approx(20.0)  # active: 100 - 80; progress: 60 - 20 = 40 is later
    w = running({"progressDeadlineSeconds": 60}, clock(deadline_math.Interval(ago(70)), last_step=52))
    assert reconcile.decide(w, IDLE).requeue_after == pytest.approx(8.0)


def test_past_the_active_deadline_the_run_is_expired_in_postgres() -> None:
    w = running(
        {"activeDeadlineSeconds": 60},
        clock(deadline_math.Interval(ago(200), ago(150)), deadline_math.Interval(ago(15))),
    )
    plan = reconcile.decide(w, IDLE)
    expired = [a for a in plan.actions if isinstance(a, actions.ExpireRun)]
    assert len(expired) == 1 and expired[0].reason == "DeadlineExceeded"
    assert "active for 65s" in expired[0].message
    assert not any(isinstance(a, actions.CreatePod) for a in plan.actions)
    assert plan.requeue_after == 0  # the outcome shows from Postgres at once


def test_past_the_progress_deadline_the_run_is_expired() -> None:
    w = running({"progressDeadlineSeconds": 30}, clock(deadline_math.Interval(ago(100)), last_step=31))
    plan = reconcile.decide(w, IDLE)
    assert [a.reason for a in plan.actions if isinstance(a, actions.ExpireRun)] == [
        "ProgressDeadlineExceeded"
    ]


def test_a_parked_run_is_neither_expired_nor_woken_by_its_deadline() -> None:
    approval = rowmaker.approval("a-000000000001")
    w = parked(
        approval,
        status={"attempts": 1, "phase": "WaitingApproval"},
        pods=[pod(phase="Succeeded")],
        spec={"activeDeadlineSeconds": 60, "progressDeadlineSeconds": 10},
        # ran 50 s, parked for an hour since
        deadline_clock=clock(deadline_math.Interval(ago(3650), ago(3600)), last_step=3601),
    )
    plan = reconcile.decide(w, IDLE)
    assert not any(isinstance(a, actions.ExpireRun) for a in plan.actions)
    assert plan.status is not None and plan.status["phase"] == "WaitingApproval"
    assert plan.requeue_after >= 300.0  # the idle look: nothing of the deadline wakes a parked run


def test_the_outcome_shows_and_the_worker_pod_is_deleted() -> None:
    row = rowmaker.run(
        status="failed",
        status_reason="DeadlineExceeded",
        error="the run was active for 61s, past spec.activeDeadlineSeconds=60",
        finished_at=NOW,
    )
    w = world(db=row, status={"attempts": 1, "phase": "Running"}, pods=[pod(phase="Running")])
    plan = reconcile.decide(w, IDLE)
    assert [a for a in plan.actions if isinstance(a, actions.DeletePod)] == [
        actions.DeletePod("r-1", "the run failed: DeadlineExceeded")
    ]
    assert plan.status is not None and plan.status["phase"] == "Failed"
    failed = {c["type"]: c for c in plan.status["conditions"]}["Failed"]
    assert (failed["status"], failed["reason"]) == ("True", "DeadlineExceeded")
    assert "activeDeadlineSeconds=60" in plan.status["message"]
    # once the Pod is going, it is not deleted again
    going = world(db=row, status=plan.status, pods=[pod(phase="Running", deleting=True)])
    assert not any(isinstance(a, actions.DeletePod) for a in reconcile.decide(going, IDLE).actions)


def test_no_deadline_reads_no_clock_and_changes_nothing() -> None:
    w = world(db="running", status={"attempts": 1}, pods=[pod(phase="Running")])
    assert w.deadline_clock is None and not w.spec.has_deadline
    assert reconcile.decide(w, IDLE).requeue_after == pytest.approx(30.0)
