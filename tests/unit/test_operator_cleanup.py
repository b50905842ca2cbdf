"""Finished attempts' Pods: earlier attempts' go at once, the last one after the retention, no live one;
and when a deleted Pod's finalizer (``protocol.POD_FINALIZER``) is released."""

from __future__ import annotations

from agent_operator.decide import actions, cleanup, model
from agentrun_core import store
from tests.support import rowmaker
from tests.unit.reconcile_world import parked, pod, world


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


def _parked(approval: store.Approval, terminated_for: float) -> model.World:
    return parked(approval, pods_terminated_for={1: terminated_for})


def test_a_parked_runs_pod_is_kept_for_the_retention_while_its_approval_is_pending() -> None:
    """A run parked on approval may wait for days; its worker exited: the Pod only keeps its log."""
    pending = rowmaker.approval("a-1")
    plan = actions.Plan()
    cleanup.finished_pods(_parked(pending, 100.0), plan, 600)
    assert cleaned(plan) == [] and plan.requeue_after == 500  # look again when it is due
    plan = actions.Plan()
    cleanup.finished_pods(_parked(pending, 600.0), plan, 600)
    assert plan.actions == [actions.CleanupPod("r-1", "run waits for an approval; kept 600s for its log")]
    # Decided: the next attempt is about to start, and the round that starts it reads this Pod.
    plan = actions.Plan()
    cleanup.finished_pods(_parked(rowmaker.approval("a-1", status="approved"), 1e6), plan, 0)
    assert cleaned(plan) == []


def test_a_deleting_runs_pods_are_left_alone() -> None:
    deleting = world(
        db="succeeded",
        status={"attempts": 1, "phase": "Succeeded"},
        pods=[pod(1, phase="Succeeded")],
        deleting=True,
    )
    plan = actions.Plan()
    cleanup.finished_pods(deleting, plan, 0)
    assert cleaned(plan) == []


def released(w: model.World, plan: actions.Plan | None = None) -> list[str]:
    return cleanup.releasable(w, plan or actions.Plan())


def test_a_deleted_pod_is_held_until_it_has_terminated() -> None:
    """The kubelet has not written the final status yet: releasing now would let its final delete take the
    Pod, and an operator restarted in between would only find it gone (recorded ``deleted``)."""
    stopping = pod(1, phase="Running", deleting=True, held=True)
    w = world(db="running", status={"attempts": 1, "phase": "Running"}, pods=[stopping])
    assert released(w) == []
    ended = pod(1, phase="Failed", deleting=True, held=True, disruption="EvictionByEvictionAPI")
    w = world(db="running", status={"attempts": 1, "phase": "Running"}, pods=[ended])
    assert released(w) == ["r-1"]


def test_force_deleted_and_earlier_attempts_pods_are_released() -> None:
    forced = pod(1, phase="Running", deleting=True, held=True, force_deleted=True)
    w = world(db="running", status={"attempts": 1, "phase": "Running"}, pods=[forced])
    assert released(w) == ["r-1"]  # no final status is coming: as before the finalizer existed
    earlier = pod(1, phase="Running", deleting=True, held=True)
    w = world(db="running", status={"attempts": 2, "phase": "Running"}, pods=[earlier, pod(2, held=True)])
    assert released(w) == ["r-1"]  # its end was recorded before attempt 2 started; r-2 is not deleted
    # The plan that starts attempt 2 is the one that recorded attempt 1's end: release after it.
    w = world(db="running", status={"attempts": 1, "phase": "Running"}, pods=[earlier])
    assert released(w, actions.Plan(status={"attempts": 2})) == ["r-1"]


def test_pods_not_held_or_not_deleted_are_never_released() -> None:
    w = world(
        db="running",
        status={"attempts": 2, "phase": "Running"},
        pods=[pod(1, phase="Failed", deleting=True), pod(2, phase="Failed", held=True)],
    )
    assert released(w) == []  # r-1 carries no finalizer (an older operator made it); r-2 is not deleted


def test_a_deleted_run_releases_every_pod_once_its_worker_is_gone() -> None:
    pods = [pod(1, phase="Failed", held=True), pod(2, phase="Succeeded", held=True)]
    w = world(db="succeeded", status={"attempts": 2, "phase": "Succeeded"}, pods=pods, deleting=True)
    assert released(w, actions.Plan(done=False)) == []
    # Garbage collection deletes them once the run is gone; nobody would release them after that.
    assert released(w, actions.Plan(done=True)) == ["r-1", "r-2"]
