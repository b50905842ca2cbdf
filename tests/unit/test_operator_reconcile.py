"""The pure reconcile: admission first, attempts, resume reasons, backoff, stops, Lease backstop."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from agent_operator.decide import actions, model, reconcile, run_status
from tests.support import rowmaker
from tests.unit.reconcile_world import NOW, drained, effective, kinds, pod, tuned, world


def test_finalizer_and_admission_come_before_any_pod() -> None:
    plan = reconcile.decide(world(db=None, finalizers=()))
    assert kinds(plan) == [actions.AddFinalizer, actions.Admit]
    assert plan.status is not None and plan.status["phase"] == "Pending"
    assert plan.requeue_after == 0


def test_first_attempt_after_admission() -> None:
    plan = reconcile.decide(world())
    assert effective(plan) == [actions.CreatePod(1, "first", image="agentrun:dev")]
    assert plan.status is not None
    assert plan.status["attempts"] == 1 and plan.status["workerPod"] == "r-1"
    assert plan.status["attemptReason"] == "first"


def test_running_pod_is_left_alone() -> None:
    plan = reconcile.decide(world(db="running", status={"attempts": 1}, pods=[pod(phase="Running")]))
    assert effective(plan) == []
    assert plan.status is not None and plan.status["phase"] == "Running"
    cond = {c["type"]: c["status"] for c in plan.status["conditions"]}
    assert cond["Running"] == "True" and cond["Succeeded"] == "False"


def test_evicted_pod_resumes_with_reason_and_backoff() -> None:
    evicted = pod(phase="Failed", reason="Evicted", message="node pressure")
    plan = reconcile.decide(
        world(db="running", status={"attempts": 1}, pods=[evicted], spec={"retry": {"backoffSeconds": 3}})
    )
    assert effective(plan) == []  # backoff first
    assert plan.status is not None
    assert plan.status["lastAttemptEnd"]["reason"] == "evicted"
    assert plan.status["restarts"] == 1
    assert plan.status["nextAttemptAt"] == "2026-01-01T12:00:03Z"
    assert plan.requeue_after <= 3.0
    # three seconds later the next attempt starts, with the recorded reason
    later = dataclasses.replace(
        world(db="running", status=plan.status, pods=[evicted]), now=NOW + datetime.timedelta(seconds=3)
    )
    plan2 = reconcile.decide(later)
    assert effective(plan2) == [actions.CreatePod(2, "evicted", image="agentrun:dev", lost_observed=True)]
    assert plan2.status is not None and plan2.status["attempts"] == 2


def test_zero_backoff_starts_next_attempt_in_the_same_reconcile() -> None:
    oom = pod(phase="Failed", terminated_reason="OOMKilled", exit_code=137)
    plan = reconcile.decide(
        world(db="running", status={"attempts": 1}, pods=[oom], spec={"retry": {"backoffSeconds": 0}})
    )
    assert kinds(plan) == [actions.RecordLoss, actions.CreatePod]
    assert [a for a in plan.actions if not isinstance(a, actions.PinImage)] == [
        actions.RecordLoss(1, "OOMKilled", "the worker was OOM-killed (exit code 137)"),
        actions.CreatePod(2, "OOMKilled", image="agentrun:dev", lost_observed=True),
    ]
    assert any(e.reason == "AttemptLost" for e in plan.events)


def test_deleted_pod_counts_as_lost() -> None:
    plan = reconcile.decide(
        world(db="running", status={"attempts": 1}, spec={"retry": {"backoffSeconds": 0}}, live=True)
    )
    assert effective(plan) == [actions.CreatePod(2, "deleted", image="agentrun:dev", lost_observed=True)]


def test_pod_missing_from_the_cache_is_confirmed_by_a_fresh_read_first() -> None:
    plan = reconcile.decide(
        world(db="running", status={"attempts": 1}, spec={"retry": {"backoffSeconds": 0}})
    )
    assert plan.actions == [] and plan.confirm is not None and plan.requeue_after == 0


def test_pod_cache_grace_comes_from_the_settings() -> None:
    w = world(status={"attempts": 1}, pod_created_ago=7.0)
    waiting = reconcile.decide(w, tuned(pod_cache_grace_seconds=10.0))
    assert waiting.actions == [] and waiting.confirm is None
    confirming = reconcile.decide(w, tuned(pod_cache_grace_seconds=5.0))
    assert confirming.confirm is not None


def test_lease_expiry_from_the_cache_is_confirmed_before_the_force_delete() -> None:
    cached = world(
        db="running", status={"attempts": 1}, pods=[pod(phase="Running")], lease_expired_holder="r-1"
    )
    plan = reconcile.decide(cached)
    assert plan.actions == [] and plan.confirm is not None
    assert not any(e.reason == "LeaseExpired" for e in plan.events)
    # the fresh read shows a renewed Lease: nothing to do
    fresh = dataclasses.replace(cached, lease_expired_holder=None, live=True)
    assert effective(reconcile.decide(fresh)) == []


def test_stop_forces_only_after_a_fresh_read() -> None:
    cached = world(
        db="running",
        status={"attempts": 1},
        pods=[pod(phase="Running", deleting=True)],
        lease_expired_holder="r-1",
        spec={"cancel": True},
    )
    assert reconcile.decide(cached).confirm is not None
    live = reconcile.decide(dataclasses.replace(cached, live=True))
    assert live.actions == [actions.DeletePod("r-1", "spec.cancel is true", force=True)]


def test_just_created_pod_missing_from_cache_is_not_lost() -> None:
    plan = reconcile.decide(world(status={"attempts": 1}, pod_created_ago=0.2))
    assert effective(plan) == []


def test_attempt_limit_fails_the_run() -> None:
    failed = pod(attempt=3, phase="Failed", exit_code=1)
    plan = reconcile.decide(
        world(
            db="running",
            status={"attempts": 3, "restarts": 2},
            pods=[failed],
            spec={"retry": {"maxAttempts": 3}},
        )
    )
    assert effective(plan) == []
    assert plan.status is not None and plan.status["phase"] == "Failed"
    failed_cond = next(c for c in plan.status["conditions"] if c["type"] == "Failed")
    assert failed_cond["status"] == "True" and failed_cond["reason"] == "AttemptsExhausted"
    # sticky: the next reconcile starts nothing
    again = reconcile.decide(world(db="running", status=plan.status, pods=[failed]))
    assert not any(isinstance(a, actions.CreatePod) for a in again.actions)


def test_lease_expired_pod_is_force_deleted_and_replaced() -> None:
    alive = pod(phase="Running")
    plan = reconcile.decide(
        world(
            db="running",
            status={"attempts": 1},
            pods=[alive],
            lease_expired_holder="r-1",
            spec={"retry": {"backoffSeconds": 0}},
            live=True,
        )
    )
    assert effective(plan) == [
        actions.DeletePod("r-1", "its Lease expired", force=True),
        # Watched unchanged for a full duration: freed, so the next worker need not watch it as long again.
        actions.FreeLapsedLease("r-1"),
        actions.CreatePod(2, "lease_expired", image="agentrun:dev", lost_observed=True),
    ]
    assert any(e.reason == "LeaseExpired" for e in plan.events)


def test_the_next_attempt_after_an_expired_lease_prefers_another_node() -> None:
    # The node may be lost while the API server still calls it Ready: the replacement must not go back there.
    alive = pod(phase="Running", node="node-a")
    spec = {"retry": {"backoffSeconds": 2}}
    first = world(
        db="running", status={"attempts": 1}, pods=[alive], lease_expired_holder="r-1", spec=spec, live=True
    )
    plan = reconcile.decide(first)
    assert effective(plan) == [  # backoff first
        actions.DeletePod("r-1", "its Lease expired", force=True),
        actions.FreeLapsedLease("r-1"),
    ]
    # After the backoff the Pod is gone; its last view (the watch's) still names its node.
    later = dataclasses.replace(
        world(db="running", status=plan.status, pods=[], spec=spec, live=True),
        now=NOW + datetime.timedelta(seconds=2),
        last_seen_pod=alive,
    )
    assert effective(reconcile.decide(later)) == [
        actions.CreatePod(2, "lease_expired", image="agentrun:dev", lost_observed=True, avoid_node="node-a")
    ]


def test_an_attempt_lost_otherwise_has_no_node_preference() -> None:
    evicted = pod(phase="Failed", reason="Evicted", node="node-a")
    plan = reconcile.decide(
        world(db="running", status={"attempts": 1}, pods=[evicted], spec={"retry": {"backoffSeconds": 0}})
    )
    assert [a for a in effective(plan) if isinstance(a, actions.CreatePod)] == [
        actions.CreatePod(2, "evicted", image="agentrun:dev", lost_observed=True)
    ]


def test_expired_lease_of_an_older_holder_does_not_touch_the_current_pod() -> None:
    plan = reconcile.decide(
        world(
            db="running", status={"attempts": 2}, pods=[pod(2, phase="Running")], lease_expired_holder="r-1"
        )
    )
    assert effective(plan) == []


def test_draining_pod_is_waited_for() -> None:
    plan = reconcile.decide(
        world(db="running", status={"attempts": 1}, pods=[pod(phase="Running", deleting=True)])
    )
    assert effective(plan) == []


def test_succeeded_in_postgres_is_final() -> None:
    plan = reconcile.decide(
        world(db="succeeded", status={"attempts": 1}, pods=[pod(phase="Succeeded", exit_code=0)])
    )
    assert effective(plan) == []
    assert plan.status is not None and plan.status["phase"] == "Succeeded"
    assert plan.status["completionTime"] == "2026-01-01T12:00:00Z"
    cond = {c["type"]: c["status"] for c in plan.status["conditions"]}
    assert cond["Succeeded"] == "True" and cond["Running"] == "False"


def test_unknown_graph_failure_is_invalid_spec() -> None:
    w = dataclasses.replace(
        world(status={"attempts": 1}, pods=[pod(phase="Failed", exit_code=1)]),
        db=rowmaker.run(
            status="failed", error="GraphLoadError: No module named 'nope'", status_reason="graph_load"
        ),
    )
    plan = reconcile.decide(w)
    assert plan.status is not None and plan.status["phase"] == "Failed"
    failed = next(c for c in plan.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    events = run_status.transition_events({"phase": "Running"}, plan.status)
    assert events and events[0].type == "Warning" and events[0].reason == "InvalidSpec"


def test_ttl_deletes_finished_run() -> None:
    status = {"phase": "Succeeded", "completionTime": "2026-01-01T11:59:00Z", "attempts": 1}
    plan = reconcile.decide(world(db="succeeded", status=status, spec={"ttlSecondsAfterFinished": 30}))
    assert actions.DeleteRun() in plan.actions
    plan = reconcile.decide(world(db="succeeded", status=status, spec={"ttlSecondsAfterFinished": 600}))
    assert actions.DeleteRun() not in plan.actions and plan.requeue_after <= 540


def test_ttl_deletes_only_once_the_final_status_is_written() -> None:
    """The round that sees the run finished writes its final status and deletes nothing: a delete that is
    refused or fails stops its round, and would keep the run from ever showing how it ended."""
    running = {"phase": "Running", "attempts": 1}
    plan = reconcile.decide(world(db="succeeded", status=running, spec={"ttlSecondsAfterFinished": 0}))
    assert actions.DeleteRun() not in plan.actions and plan.requeue_after == 0
    assert plan.status is not None and plan.status["phase"] == "Succeeded"
    then = reconcile.decide(world(db="succeeded", status=plan.status, spec={"ttlSecondsAfterFinished": 0}))
    assert actions.DeleteRun() in then.actions


def test_cancel_deletes_pod_then_cancels_in_postgres() -> None:
    running = pod(phase="Running")
    plan = reconcile.decide(
        world(db="running", status={"attempts": 1}, pods=[running], spec={"cancel": True})
    )
    assert [type(a) for a in plan.actions] == [actions.DeletePod]
    assert not plan.actions[0].force  # type: ignore[union-attr]
    gone = reconcile.decide(world(db="running", status={"attempts": 1}, spec={"cancel": True}, live=True))
    assert [type(a) for a in gone.actions] == [actions.CancelRun]
    assert gone.status is not None and gone.status["phase"] == "Cancelled"


def test_delete_waits_for_the_worker_then_is_done() -> None:
    running = pod(phase="Running", deleting=True)
    plan = reconcile.decide(world(db="running", status={"attempts": 1}, pods=[running], deleting=True))
    assert not plan.done and effective(plan) == []
    plan = reconcile.decide(
        world(db="running", status={"attempts": 1}, pods=[pod(phase="Failed")], deleting=True)
    )
    assert plan.done and [type(a) for a in plan.actions] == [actions.CancelRun]


def test_suspend_and_resume() -> None:
    plan = reconcile.decide(drained(spec={"suspend": True}))
    assert plan.status is not None and plan.status["phase"] == "Suspended"
    resumed = reconcile.decide(drained(plan.status))
    assert effective(resumed) == [actions.CreatePod(2, "resumed", image="agentrun:dev")]
    assert resumed.status is not None and resumed.status["restarts"] == 0


def test_operator_restart_adopts_pod_created_before_status_was_written() -> None:
    plan = reconcile.decide(
        world(db="running", status={"attempts": 1}, pods=[pod(1, phase="Failed"), pod(2, phase="Running")])
    )
    assert effective(plan) == []
    assert plan.status is not None and plan.status["attempts"] == 2 and plan.status["workerPod"] == "r-2"


def test_worker_usage_error_is_invalid_spec_without_retry() -> None:
    plan = reconcile.decide(
        world(db="admitted", status={"attempts": 1}, pods=[pod(phase="Failed", exit_code=2)])
    )
    assert effective(plan) == []
    assert plan.status is not None and plan.status["phase"] == "Failed"


@pytest.mark.parametrize(
    ("seen", "reason"),
    [
        (pod(phase="Running", deleting=True, disruption="EvictionByEvictionAPI"), "evicted"),
        (pod(phase="Running"), "deleted"),  # alive when last seen, then gone
    ],
)
def test_evicted_pod_gone_from_cache_keeps_its_reason(seen: model.PodInfo, reason: str) -> None:
    plan = reconcile.decide(
        world(
            db="running",
            status={"attempts": 1},
            last_seen_pod=seen,
            spec={"retry": {"backoffSeconds": 0}},
            live=True,
        )
    )
    assert effective(plan) == [actions.CreatePod(2, reason, image="agentrun:dev", lost_observed=True)]


def test_resume_waits_while_a_steering_policy_is_not_as_shipped() -> None:
    """Issue 35.4: without the suspend verb's policy anyone with patch could have resumed: the run stays
    Suspended and says which policy; suspending itself is applied whatever the policies say."""
    suspended = reconcile.decide(drained(spec={"suspend": True}, admission_ok=False))
    assert suspended.status is not None and suspended.status["phase"] == "Suspended"
    missing = ("validatingadmissionpolicies/agentrun-steering",)
    refused = reconcile.decide(drained(suspended.status, admission_ok=False, admission_missing=missing))
    assert effective(refused) == [] and [e.reason for e in refused.events] == ["SteeringPolicyMissing"]
    assert refused.status is not None and refused.status["phase"] == "Suspended"
    assert "resume refused" in refused.status["message"] and "agentrun-steering" in refused.status["message"]
    cond = {c["type"]: c for c in refused.status["conditions"]}["ApprovalPolicyMissing"]
    assert cond["status"] == "True" and "agentrun-steering" in cond["message"]
