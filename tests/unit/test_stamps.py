"""The stamps the CLI sends with each steering request: the caller's own identity (SelfSubjectReview), so a
VAP-only install (Kubernetes 1.34 / 1.35, deploy/admission-vap-only) admits it; nothing else is touched."""

from __future__ import annotations

from typing import Any

from agentrun import stamps

WHO = stamps.of_review(
    {"status": {"userInfo": {"username": "manager", "groups": ["managers", "system:authenticated"]}}}
)


def test_identity_from_a_self_subject_review() -> None:
    assert stamps.Identity("manager", ("managers", "system:authenticated")) == WHO
    assert stamps.of_review({"status": {"userInfo": {}}}) is None
    assert stamps.of_review({}) is None


def test_a_decision_carries_decided_by_and_groups_in_order() -> None:
    patch = stamps.annotation_patch({"agentrun.dev/approve": "a-1", "agentrun.dev/reject": None}, WHO)
    assert patch == {
        "agentrun.dev/approve": "a-1",
        "agentrun.dev/reject": None,
        "agentrun.dev/decided-by": "manager",
        "agentrun.dev/decided-by-groups": "managers,system:authenticated",
    }
    assert stamps.needs_identity(patch)


def test_a_resolve_carries_resolved_by_and_other_patches_nothing() -> None:
    patch = stamps.annotation_patch({"agentrun.dev/resolve": "k=sent"}, WHO)
    assert patch["agentrun.dev/resolved-by"] == "manager" and "agentrun.dev/decided-by" not in patch
    removal = {"agentrun.dev/approve": None, "note": "x"}
    assert not stamps.needs_identity(removal)
    assert stamps.annotation_patch(removal, WHO) == removal
    assert stamps.annotation_patch({"agentrun.dev/approve": "a-1"}, None) == {"agentrun.dev/approve": "a-1"}


def test_retry_and_create_carry_their_stamps() -> None:
    retry = stamps.run_patch({"spec": {"retryGeneration": 2}}, WHO)
    assert retry["metadata"]["annotations"] == {"agentrun.dev/retried-by": "manager"}
    assert stamps.run_patch({"spec": {"suspend": True}}, WHO) == {"spec": {"suspend": True}}
    annotations = {"agentrun.dev/created-by": "ceo", "a": "b"}
    body: dict[str, Any] = {"metadata": {"name": "r", "annotations": annotations}}
    created = stamps.created(body, WHO)
    assert created["metadata"]["annotations"] == {"agentrun.dev/created-by": "manager", "a": "b"}
    assert body["metadata"]["annotations"]["agentrun.dev/created-by"] == "ceo"  # the input is not changed
