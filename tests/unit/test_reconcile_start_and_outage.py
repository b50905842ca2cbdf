"""The pure reconcile at the edges of an attempt's life: a Pod that cannot start, a worker that never takes
its Lease, and Leases that lapse in a control-plane outage (not counted against ``maxAttempts``)."""

from __future__ import annotations

import dataclasses
import datetime

from agent_operator.decide import actions, reconcile
from tests.support import rowmaker
from tests.unit.reconcile_world import NOW, effective, pod, tuned, world


def test_a_control_plane_loss_does_not_consume_max_attempts() -> None:
    fenced = pod(phase="Failed", exit_code=12)
    plan = reconcile.decide(
        world(
            db="running",
            status={"attempts": 1},
            pods=[fenced],
            spec={"retry": {"maxAttempts": 1, "backoffSeconds": 0}},
        )
    )
    assert effective(plan) == [actions.CreatePod(2, "lease_lost", image="agentrun:dev", lost_observed=True)]
    assert plan.status is not None
    assert plan.status["restarts"] == 0 and plan.status["controlPlaneLosses"] == 1
    assert plan.status["lastAttemptEnd"]["controlPlane"] is True
    # ... and the attempt's row says so (trace, metrics): the loss is recorded as the control plane's
    assert [a for a in plan.actions if isinstance(a, actions.RecordLoss)] == [
        actions.RecordLoss(1, "lease_lost", plan.status["lastAttemptEnd"]["message"], control_plane=True)
    ]
    # the same exit of a Pod being deleted is an ordinary loss
    deleted = pod(phase="Failed", exit_code=12, deleting=True)
    plan = reconcile.decide(
        world(db="running", status={"attempts": 1}, pods=[deleted], spec={"retry": {"maxAttempts": 1}})
    )
    assert plan.status is not None and plan.status["phase"] == "Failed"


def test_a_pod_that_cannot_start_fails_the_run_after_the_start_timeout() -> None:
    blocked = pod(phase="Pending", blocked=("Unschedulable", "0/1 nodes are available"))
    early = reconcile.decide(
        world(db="admitted", status={"attempts": 1}, pods=[blocked], blocked_for=5.0),
        tuned(start_timeout_seconds=30.0),
    )
    assert effective(early) == [] and early.status is not None and early.status["phase"] == "Pending"
    late = reconcile.decide(
        world(db="admitted", status={"attempts": 1}, pods=[blocked], blocked_for=31.0),
        tuned(start_timeout_seconds=30.0),
    )
    assert [type(a) for a in effective(late)] == [actions.DeletePod]
    assert late.status is not None and late.status["phase"] == "Failed"
    failed = next(c for c in late.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "Unschedulable" and "0/1 nodes" in failed["message"]
    assert any(e.type == "Warning" and e.reason == "Unschedulable" for e in late.events)


def test_a_worker_that_never_takes_its_lease_fails_the_run() -> None:
    running = pod(phase="Running")
    plan = reconcile.decide(
        world(db="admitted", status={"attempts": 1}, pods=[running], unclaimed_for=40.0),
        tuned(start_timeout_seconds=30.0),
    )
    assert plan.status is not None and plan.status["phase"] == "Failed"
    assert next(c for c in plan.status["conditions"] if c["type"] == "Failed")["reason"] == "LeaseNeverTaken"


def test_an_invalid_pod_fails_at_once_a_forbidden_one_after_the_timeout() -> None:
    invalid = reconcile.decide(world(db="admitted", pod_refused=(1, 422, "env[0].name: Invalid", 0.0)))
    assert invalid.status is not None and invalid.status["phase"] == "Failed"
    assert not any(isinstance(a, actions.CreatePod) for a in invalid.actions)
    retried = reconcile.decide(world(db="admitted", pod_refused=(1, 403, "serviceaccount missing", 1.0)))
    assert any(isinstance(a, actions.CreatePod) for a in retried.actions)
    given_up = reconcile.decide(
        world(db="admitted", pod_refused=(1, 403, "serviceaccount missing", 400.0)),
        tuned(start_timeout_seconds=300.0),
    )
    assert given_up.status is not None and given_up.status["phase"] == "Failed"
    assert next(c for c in given_up.status["conditions"] if c["type"] == "Failed")["reason"] == "PodRejected"


def test_ttl_compares_postgres_times_with_postgres_now() -> None:
    db_now = NOW - datetime.timedelta(hours=1)  # the operator's clock runs an hour ahead of Postgres'
    finished = rowmaker.run(status="succeeded", finished_at=db_now - datetime.timedelta(seconds=10))
    shown = {"attempts": 1, "phase": "Succeeded"}  # the final status is written before the TTL's delete
    base = world(db="succeeded", status=shown, spec={"ttlSecondsAfterFinished": 60})
    plan = reconcile.decide(dataclasses.replace(base, db=finished, db_now=db_now))
    assert not any(isinstance(a, actions.DeleteRun) for a in plan.actions)
    due = reconcile.decide(
        dataclasses.replace(base, db=finished, db_now=db_now + datetime.timedelta(seconds=51))
    )
    assert any(isinstance(a, actions.DeleteRun) for a in due.actions)


def test_a_lease_that_lapsed_in_an_api_server_outage_is_a_control_plane_loss() -> None:
    """Confirmed expired after a period our own fresh reads failed: the worker could not renew either."""
    spec = {"retry": {"maxAttempts": 1, "backoffSeconds": 0}}
    lapsed = world(
        db="running",
        status={"attempts": 1},
        pods=[pod(phase="Running")],
        lease_expired_holder="r-1",
        live=True,
        spec=spec,
        lease_lapsed_in_outage=True,
    )
    plan = reconcile.decide(lapsed)
    why = "its Lease lapsed in an API-server outage"
    assert effective(plan)[0] == actions.DeletePod("r-1", why, force=True)
    assert actions.CreatePod(2, "lease_lost", image="agentrun:dev", lost_observed=True) in effective(plan)
    assert plan.status is not None and plan.status["restarts"] == 0
    assert plan.status["lastAttemptEnd"]["controlPlane"] is True
    # the same expiry without an outage is the run's loss: maxAttempts 1 is exhausted
    plan = reconcile.decide(dataclasses.replace(lapsed, lease_lapsed_in_outage=False))
    assert plan.status is not None and plan.status["phase"] == "Failed", plan.status


def test_lapsed_in_outage_needs_the_lease_to_stop_changing_around_the_outage() -> None:
    from agent_operator.observe.memory import lapsed_in as _lapsed_in
    from agentrun_core import lease_math as lm

    observer = lm.LeaseObserver()
    observer.observe(lm.LeaseSummary(holder="p", transitions=1, renew_time="t1", duration_seconds=3), 100.0)
    assert _lapsed_in((101.0, 110.0), observer, 112.0)  # stopped at 100, outage 101..110
    assert _lapsed_in((98.0, 110.0), observer, 112.0)
    assert _lapsed_in((105.0, 110.0), observer, 112.0)  # reads fail only once it looks expired (+ poll)
    assert not _lapsed_in((112.0, 130.0), observer, 131.0)  # stopped 12 s (> 2 leases + slack) before
    assert not _lapsed_in(None, observer, 112.0)
    assert not _lapsed_in((90.0, 99.0), observer, 112.0)  # the outage was over before it stopped
