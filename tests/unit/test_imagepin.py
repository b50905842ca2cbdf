"""Runs keep their code (agent_operator.decide.imagepin): the pin by digest, the no-digest case, retries
re-pin, and
the reconciler starting later attempts with the pinned image whatever the spec says now."""

from __future__ import annotations

from typing import Any

import pytest

from agent_operator.decide import actions, imagepin, model, reconcile
from tests.unit.reconcile_world import world

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def pod(attempt: int, image: str, image_id: str | None, **kw: Any) -> model.PodInfo:
    return model.PodInfo(
        name=f"r-{attempt}", attempt=attempt, image=image, image_id=image_id, started=True, **kw
    )


@pytest.mark.parametrize(
    ("image_id", "digest"),
    [
        (f"docker-pullable://registry:5000/team/worker@{DIGEST}", DIGEST),
        (f"registry.example/worker@{DIGEST}", DIGEST),
        (DIGEST, None),  # a local image id (an image loaded from a tarball): `repo@<id>` cannot be pulled
        (f"docker.io/library/agentrun:0.1.0@{DIGEST}", DIGEST),
        ("", None),
        (None, None),
        ("sha256:abc", None),  # not a digest
    ],
)
def test_digest_of(image_id: str | None, digest: str | None) -> None:
    assert imagepin.digest_of(image_id) == digest


@pytest.mark.parametrize(
    ("ref", "pinned"),
    [
        ("worker:1.2", f"worker@{DIGEST}"),
        ("registry:5000/team/worker:1.2", f"registry:5000/team/worker@{DIGEST}"),
        ("registry:5000/team/worker", f"registry:5000/team/worker@{DIGEST}"),
        (f"worker:1@{OTHER}", f"worker@{DIGEST}"),
    ],
)
def test_by_digest_keeps_the_registry_port(ref: str, pinned: str) -> None:
    assert imagepin.by_digest(ref, DIGEST) == pinned


def test_pin_learns_the_digest_from_the_first_pod_running_the_admitted_image() -> None:
    pin = imagepin.observe(None, "reg/worker:1", 0, {})
    assert pin == {"ref": "reg/worker:1", "retryGeneration": 0}
    pin = imagepin.observe(pin, "reg/worker:1", 0, {1: pod(1, "reg/worker:1", f"reg/worker@{DIGEST}")})
    assert pin["digest"] == DIGEST and pin["pinned"] == f"reg/worker@{DIGEST}" and pin["attempt"] == 1
    # once known it never changes within the generation, whatever a later Pod or the spec says
    later = imagepin.observe(pin, "reg/worker:2", 0, {2: pod(2, f"reg/worker@{DIGEST}", f"x@{OTHER}")})
    assert later == pin
    assert imagepin.image_for_attempt(later) == f"reg/worker@{DIGEST}"


def test_no_digest_is_explicit_and_attempts_keep_the_admitted_reference() -> None:
    pin = imagepin.observe(None, "agentrun:dev", 0, {1: pod(1, "agentrun:dev", "")})
    assert "digest" not in pin and pin["note"] == imagepin.NO_DIGEST
    assert imagepin.image_for_attempt(pin) == "agentrun:dev"
    # a Pod not started yet says nothing (no note either)
    unstarted = model.PodInfo(name="r-1", attempt=1, image="agentrun:dev", image_id="")
    assert "note" not in imagepin.observe(None, "agentrun:dev", 0, {1: unstarted})


def test_a_retry_generation_repins_from_the_spec() -> None:
    pin = {"ref": "w:1", "retryGeneration": 0, "digest": DIGEST, "pinned": f"w@{DIGEST}", "attempt": 1}
    assert imagepin.observe(pin, "w:2", 1, {1: pod(1, "w:1", f"w@{DIGEST}")}) == {
        "ref": "w:2",
        "retryGeneration": 1,
    }


def test_reconciler_starts_the_next_attempt_with_the_pinned_digest_not_the_changed_spec() -> None:
    status = {
        "attempts": 1,
        "image": {
            "ref": "w:1",
            "retryGeneration": 0,
            "digest": DIGEST,
            "pinned": f"w@{DIGEST}",
            "attempt": 1,
        },
    }
    evicted = pod(1, "w:1", f"w@{DIGEST}", phase="Failed", reason="Evicted")
    plan = reconcile.decide(
        world(
            db="running",
            status=status,
            pods=[evicted],
            spec={"worker": {"image": "w:2"}, "retry": {"backoffSeconds": 0}},
        )
    )
    (create,) = [a for a in plan.actions if isinstance(a, actions.CreatePod)]
    assert create.image == f"w@{DIGEST}"
    assert not any(isinstance(a, actions.PinImage) for a in plan.actions)  # nothing new to record
    assert plan.status is not None and plan.status["image"] == status["image"]


def test_reconciler_records_a_learned_digest_once() -> None:
    status = {"attempts": 1, "phase": "Running", "image": {"ref": "w:1", "retryGeneration": 0}}
    running = pod(1, "w:1", f"docker-pullable://w@{DIGEST}", phase="Running")
    plan = reconcile.decide(
        world(db="running", status=status, pods=[running], spec={"worker": {"image": "w:1"}})
    )
    assert actions.PinImage("w:1", DIGEST, 0) in plan.actions
    assert any(e.reason == "ImagePinned" and f"w@{DIGEST}" in e.message for e in plan.events)
    assert plan.status is not None and plan.status["image"]["pinned"] == f"w@{DIGEST}"
    again = reconcile.decide(
        world(db="running", status=plan.status, pods=[running], spec={"worker": {"image": "w:1"}})
    )
    assert not any(isinstance(a, actions.PinImage) for a in again.actions)


def test_first_attempt_records_the_admitted_image_with_its_pod() -> None:
    plan = reconcile.decide(world(db="admitted", status={}, spec={"worker": {"image": "w:7"}}))
    assert actions.PinImage("w:7", None, 0) in plan.actions
    (create,) = [a for a in plan.actions if isinstance(a, actions.CreatePod)]
    assert create.image == "w:7"
    assert plan.status is not None and plan.status["image"] == {"ref": "w:7", "retryGeneration": 0}


def test_a_run_admitted_before_pins_keeps_what_its_first_pod_ran() -> None:
    pods = {1: pod(1, "w:old", ""), 2: pod(2, "w:old", "")}
    assert imagepin.observe(None, "w:new-default", 0, pods)["ref"] == "w:old"
    # after a retry the spec (or today's default) is what the new generation runs
    assert imagepin.observe(None, "w:new-default", 1, pods)["ref"] == "w:new-default"
