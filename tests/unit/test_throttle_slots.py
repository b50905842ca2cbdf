"""Start throttling: at most ``limit`` live worker Pods per namespace, a first-come first-served queue,
the queued run's status, and the runner's re-decision when the last slot went to another run."""

from __future__ import annotations

from agent_operator import settings
from agent_operator.decide import actions, reconcile
from agent_operator.observe import throttle
from tests.unit.reconcile_world import pod, world

NOW_RETRY = {"retry": {"backoffSeconds": 0}}  # the next attempt is due at once


def test_slots_are_granted_in_the_order_runs_asked() -> None:
    woken: list[tuple[str, str]] = []
    t = throttle.Throttle(2, wake=lambda ns, name: woken.append((ns, name)))
    assert t.take("ns", "a", "a") and t.take("ns", "b", "b")
    assert not t.take("ns", "c", "c") and not t.take("ns", "d", "d")  # full: c then d wait, in that order
    assert t.position("ns", "c") == 1 and t.position("ns", "d") == 2
    assert t.allowed("other", "x")  # per namespace
    t.observed("ns", "a", "a", live=False, waiting=False)  # a's Pod terminated: one slot frees
    assert woken == [("ns", "c")]  # the longest waiting run is woken, not everyone
    assert not t.allowed("ns", "d") and not t.allowed("ns", "e")  # not d's turn, and no newcomer jumps c
    assert t.take("ns", "c", "c") and t.live("ns") == 2
    t.observed("ns", "b", "b", live=False, waiting=False)
    assert t.take("ns", "d", "d")
    assert t.position("ns", "d") is None


def test_a_run_that_stops_waiting_leaves_the_queue() -> None:
    woken: list[str] = []
    t = throttle.Throttle(1, wake=lambda ns, name: woken.append(name))
    assert t.take("ns", "a", "a") and not t.take("ns", "b", "b") and not t.take("ns", "c", "c")
    t.forget("ns", "a")
    assert woken == ["b"]
    t.observed("ns", "b", "b", live=False, waiting=False)  # b was cancelled meanwhile: c is next
    assert woken == ["b", "c"] and t.take("ns", "c", "c")


def test_seeded_from_the_pods_still_running_after_a_restart() -> None:
    t = throttle.Throttle(2, seed=lambda: [("ns", "old-1", ""), ("ns", "old-2", "")])
    assert not t.allowed("ns", "new")
    t.observed("ns", "old-1", "old-1", live=False, waiting=False)
    assert t.allowed("ns", "new")


def test_a_run_refused_at_its_first_look_is_in_line_and_woken() -> None:
    woken: list[str] = []
    t = throttle.Throttle(1, wake=lambda ns, name: woken.append(name))
    assert t.take("ns", "a", "a")
    for late in ("b", "c"):  # their reconciles saw allowed() False and decided "queued"
        assert not t.allowed("ns", late)
        t.observed("ns", late, late, live=False, waiting=True)
    assert t.position("ns", "b") == 1 and t.position("ns", "c") == 2
    t.observed("ns", "a", "a", live=False, waiting=False)
    assert woken == ["b"] and not t.allowed("ns", "c") and t.take("ns", "b", "b")


def test_zero_means_no_limit() -> None:
    t = throttle.Throttle(0)
    assert all(t.take("ns", str(i), str(i)) for i in range(1000))


def test_queued_run_creates_no_pod_and_says_why() -> None:
    plan = reconcile.decide(world(start_allowed=False))
    assert plan.queued and not any(isinstance(a, actions.CreatePod) for a in plan.actions)
    assert plan.status is not None and plan.status["phase"] == "Pending"
    assert "queued" in plan.status["message"] and plan.status["attempts"] == 0
    # Woken when a slot frees; the idle poll is a fallback.
    assert plan.requeue_after == reconcile.DEFAULTS.idle_poll_seconds


def test_a_lost_attempt_is_recorded_once_even_while_its_successor_waits() -> None:
    w = world(
        db="running",
        status={"attempts": 1},
        pods=[pod(phase="Failed", exit_code=7)],
        start_allowed=False,
        spec=NOW_RETRY,
    )
    plan = reconcile.decide(w)
    assert plan.queued and [type(a) for a in plan.actions] == [actions.RecordLoss]
    assert plan.status is not None and plan.status["lastAttemptEnd"]["attempt"] == 1
    again = reconcile.decide(
        world(
            db="running", status=plan.status, pods=list(w.pods.values()), start_allowed=False, spec=NOW_RETRY
        )
    )
    assert again.queued and again.actions == [] and again.status is not None
    assert again.status["restarts"] == plan.status["restarts"]  # not counted a second time


def test_start_looks_again_soon_not_after_the_previous_pods_age() -> None:
    w = world(
        db="running",
        status={"attempts": 1},
        pods=[pod(phase="Failed", exit_code=7)],
        pod_created_ago=900.0,
        spec=NOW_RETRY,
    )
    plan = reconcile.decide(w, settings.ReconcileSettings(poll_seconds=2.0, idle_poll_seconds=30.0))
    assert any(isinstance(a, actions.CreatePod) for a in plan.actions)
    assert plan.requeue_after <= 1.0
