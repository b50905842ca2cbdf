"""Start throttling by ``spec.concurrency`` key (``throttle.Starts``): a key's limit next to the namespace's,
both slots or neither, a fair line per key that never holds the namespace's line, seeding after a restart,
and what a queued run's status says."""

from __future__ import annotations

from typing import Any

from agent_operator import settings
from agent_operator.decide import model, pods, reconcile
from agent_operator.observe import throttle
from agent_operator.serve import runner
from agentrun_core.api import protocol
from tests.unit.reconcile_world import pod, world

A1 = ("graph-a", 1)  # key graph-a, at most 1 run with a worker Pod
B2 = ("graph-b", 2)


def test_a_key_limits_its_runs_and_not_the_others() -> None:
    woken: list[str] = []
    s = throttle.Starts(0, wake=lambda ns, name: woken.append(name))  # no namespace limit
    assert s.take("ns", "a1", "a1", A1)
    assert not s.take("ns", "a2", "a2", A1) and not s.take("ns", "a3", "a3", A1)  # in graph-a's line
    assert s.take("ns", "b1", "b1", B2) and s.take("ns", "b2", "b2", B2) and not s.take("ns", "b3", "b3", B2)
    assert s.take("ns", "free", "free") and s.take("other", "a9", "a9", A1)  # no key; another namespace
    s.observed("ns", "a1", "a1", live=False, waiting=False, group=A1)  # a1's Pod ended
    assert woken == ["a2"]  # the longest waiting run of the key, not everyone
    assert not s.allowed("ns", "a3", A1) and s.take("ns", "a2", "a2", A1)


def test_runs_held_by_their_key_never_hold_the_namespaces_line() -> None:
    """Namespace limit 3; graph-a allows 1. Four graph-a runs ask first, then a graph-b run: three of the
    graph-a runs wait for their key, not for the namespace, so graph-b starts at once."""
    s = throttle.Starts(3)
    assert s.take("ns", "a1", "a1", A1)
    for uid in ("a2", "a3", "a4"):
        assert not s.take("ns", uid, uid, A1)
        s.observed("ns", uid, uid, live=False, waiting=True, group=A1)
    assert (
        s.waits_for("ns", "a2", A1)
        == "spec.concurrency key 'graph-a' is at its limit of 1 runs with a worker Pod"
    )
    assert s.take("ns", "b1", "b1", B2) and s.take("ns", "c1", "c1")
    assert s.waits_for("ns", "c2") == "the namespace is at its limit of 3 live worker Pods"
    assert not s.take("ns", "c2", "c2")


def test_a_start_takes_both_slots_or_neither() -> None:
    s = throttle.Starts(1)
    assert s.take("ns", "x", "x")  # the namespace's only slot
    assert not s.take("ns", "a1", "a1", A1)  # the key has room, the namespace has not: no key slot taken
    assert s.allowed("ns", "a2", A1) is False  # (the namespace is still full)
    s.observed("ns", "x", "x", live=False, waiting=False)
    assert s.take("ns", "a1", "a1", A1)  # a1 was first in the namespace's line
    s.observed("ns", "a1", "a1", live=False, waiting=False, group=A1)
    assert s.take("ns", "a2", "a2", A1)  # a1 held its key's slot only while it had a Pod


def test_a_run_whose_key_changed_leaves_the_earlier_key() -> None:
    s = throttle.Starts(0)
    assert s.take("ns", "r", "r", A1)
    assert not s.allowed("ns", "other", A1)
    s.observed("ns", "r", "r", live=True, waiting=False, group=B2)  # spec.concurrency.key edited
    assert s.allowed("ns", "other", A1)
    s.observed("ns", "r", "r", live=True, waiting=False)  # spec.concurrency removed
    assert s.take("ns", "b1", "b1", B2) and s.take("ns", "b2", "b2", B2)


def test_a_key_is_seeded_from_the_pods_carrying_its_label_after_a_restart() -> None:
    asked: list[tuple[str, str]] = []

    def seed(namespace: str, key: str) -> list[tuple[str, str, str]]:
        asked.append((namespace, key))
        return [("ns", "running-a", "")] if key == "graph-a" else []

    s = throttle.Starts(0, key_seed=seed)
    assert not s.allowed("ns", "new-a", A1)  # the restarted operator counts the Pod still running
    assert s.allowed("ns", "new-b", B2) and asked == [("ns", "graph-a"), ("ns", "graph-b")]
    s.observed("ns", "running-a", "running-a", live=False, waiting=False, group=A1)
    assert s.take("ns", "new-a", "new-a", A1)


def test_the_spec_default_key_is_the_graph_and_the_pod_carries_its_label() -> None:
    spec = model.RunSpec.from_body({"graph": "m:g", "concurrency": {"limit": 2}})
    assert spec.concurrency == model.Concurrency("m:g", 2) and spec.concurrency.group == ("m:g", 2)
    keyed = model.RunSpec.from_body({"graph": "m:g", "concurrency": {"limit": 1, "key": "mail"}})
    assert keyed.concurrency == model.Concurrency("mail", 1)
    assert model.RunSpec.from_body({"graph": "m:g"}).concurrency is None
    run = model.RunRef(namespace="ns", name="r", uid="u")
    body: dict[str, Any] = pods.manifest(run, keyed, 1, "first", settings.Settings(dsn="postgresql://x"))
    label = body["metadata"]["labels"][protocol.LABEL_CONCURRENCY]
    assert label == protocol.concurrency_label("mail") and len(label) <= 63
    assert model.PodInfo.from_body(body).concurrency == label
    plain = pods.manifest(run, spec, 1, "first", settings.Settings(dsn="postgresql://x"))
    assert plain["metadata"]["labels"][protocol.LABEL_CONCURRENCY] == protocol.concurrency_label("m:g")


def test_a_run_queued_by_its_key_says_so() -> None:
    wait = "spec.concurrency key 'graph-a' is at its limit of 1 runs with a worker Pod"
    plan = reconcile.decide(world(start_allowed=False, start_wait=wait))
    assert plan.queued and plan.status is not None and wait in plan.status["message"]


def test_a_run_done_within_the_cache_grace_frees_its_slot_at_once() -> None:
    """The grace covers a Pod the watch cache does not show yet; once it shows the current attempt's Pod
    terminated, the slot is free (a fast run used to hold it until its next reconcile, the idle poll)."""
    done = world(db="succeeded", status={"attempts": 1}, pods=[pod(phase="Succeeded")], pod_created_ago=1.0)
    assert not runner.holds_slot(done, 5.0)
    unseen = world(db="running", status={"attempts": 1}, pod_created_ago=1.0)  # created, not in the cache yet
    assert runner.holds_slot(unseen, 5.0) and not runner.holds_slot(unseen, 0.5)
    running = world(db="running", status={"attempts": 1}, pods=[pod(phase="Running")], pod_created_ago=60.0)
    assert runner.holds_slot(running, 5.0)
    # The next attempt's Pod just created, the earlier one terminated in the cache: still counted live.
    retry = world(db="running", status={"attempts": 2}, pods=[pod(phase="Failed")], pod_created_ago=1.0)
    assert runner.holds_slot(retry, 5.0)
