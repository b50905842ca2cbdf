"""Finished attempts' Pods: earlier attempts' go at once, the last one after the retention, no live one."""

from __future__ import annotations

from agent_operator import actions, cleanup
from tests.unit.reconcile_world import pod, world


def cleaned(plan: actions.Plan) -> list[str]:
    return [a.name for a in plan.actions if isinstance(a, actions.CleanupPod)]


def test_earlier_attempts_go_once_a_later_one_started() -> None:
    w = world(
        db="running",
        status={"attempts": 3, "phase": "Running"},
        pods=[pod(1, phase="Failed"), pod(2, phase="Running", deleting=True), pod(3, phase="Running")],
    )
    plan = actions.Plan()
    cleanup.finished_pods(w, plan, 600)
    assert cleaned(plan) == ["r-1"]  # r-2 is still stopping, r-3 is the current one


def test_the_last_pod_of_a_finished_run_is_kept_for_the_retention() -> None:
    pods = [pod(1, phase="Failed"), pod(2, phase="Succeeded")]
    status = {"attempts": 2, "phase": "Succeeded"}
    early = world(db="succeeded", status=status, pods=pods, pods_terminated_for={1: 700.0, 2: 100.0})
    plan = actions.Plan()
    cleanup.finished_pods(early, plan, 600)
    assert cleaned(plan) == ["r-1"] and plan.requeue_after == 500  # look again when r-2 is due
    late = world(db="succeeded", status=status, pods=pods, pods_terminated_for={1: 700.0, 2: 600.0})
    plan = actions.Plan()
    cleanup.finished_pods(late, plan, 600)
    assert cleaned(plan) == ["r-1", "r-2"]


def test_a_parked_runs_pod_and_a_deleting_run_are_left_alone() -> None:
    parked = world(
        db="parked", status={"attempts": 1}, pods=[pod(1, phase="Succeeded")], pods_terminated_for={1: 1e6}
    )
    plan = actions.Plan()
    cleanup.finished_pods(parked, plan, 0)
    assert cleaned(plan) == []
    deleting = world(
        db="succeeded",
        status={"attempts": 1, "phase": "Succeeded"},
        pods=[pod(1, phase="Succeeded")],
        deleting=True,
    )
    plan = actions.Plan()
    cleanup.finished_pods(deleting, plan, 0)
    assert cleaned(plan) == []
