"""Approvals from annotations (the pending id only, identity stamps) and deadlines."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from agent_operator.decide import actions, model, reconcile
from agentrun_core.api import meta, schedules
from tests.support import rowmaker
from tests.unit.reconcile_world import NOW, parked

PENDING = rowmaker.approval(
    approval_id="a-111111111111",
    status="pending",
    prompt={"q": "send?"},
    deadline=NOW + datetime.timedelta(seconds=60),
)
OLD = rowmaker.approval(
    approval_id="a-000000000000",
    status="approved",
    decided_by="manager",
    decided_at=NOW - datetime.timedelta(seconds=100),
)


def annotated(
    value: str,
    *,
    key: str = meta.APPROVE,
    by: str | None = "manager",
    extra_annotations: dict[str, str] | None = None,
    **kw: Any,
) -> model.World:
    ann = {key: value, meta.CREATED_BY: "alice", **(extra_annotations or {})}
    if by:
        ann[meta.DECIDED_BY] = by
    return parked(OLD, PENDING, annotations=ann, **kw)


def test_a_run_waiting_for_approval_needs_no_pod_and_no_fresh_read_of_it() -> None:
    """The parked attempt's Pod is deleted after the retention (agent_operator.decide.cleanup); the run goes
    on
    waiting without reading the API server at each look. Once decided, the round that starts the next
    attempt reads fresh first, as for any vanished Pod."""
    waiting = reconcile.decide(parked(PENDING, pods=[]))
    assert waiting.confirm is None and waiting.actions == []
    assert waiting.status is not None and waiting.status["phase"] == "WaitingApproval"
    assert waiting.idle_after is not None
    approved = dataclasses.replace(PENDING, status="approved", decided_by="manager", decided_at=NOW)
    decided = reconcile.decide(parked(approved, pods=[]))
    assert decided.confirm is not None
    assert not [a for a in decided.actions if isinstance(a, actions.CreatePod)]


def decides(plan: actions.Plan) -> list[actions.Decide]:
    return [a for a in plan.actions if isinstance(a, actions.Decide)]


def test_waiting_for_approval_shows_pending_id() -> None:
    plan = reconcile.decide(parked(PENDING))
    assert plan.actions == []
    assert plan.status is not None and plan.status["phase"] == "WaitingApproval"
    assert plan.status["pendingApproval"]["id"] == PENDING.approval_id
    assert plan.status["pendingApproval"]["deadline"] == "2026-01-01T12:01:00Z"
    assert plan.requeue_after <= 60


def test_approve_pending_id() -> None:
    plan = reconcile.decide(annotated(PENDING.approval_id))
    assert decides(plan) == [actions.Decide(PENDING.approval_id, "approved", "manager", None)]
    assert actions.RemoveDecisionAnnotations() in plan.actions
    assert plan.requeue_after == 0


def test_reject_with_comment() -> None:
    w = annotated(PENDING.approval_id, key=meta.REJECT)
    w = dataclasses.replace(
        w,
        run=dataclasses.replace(w.run, annotations={**w.run.annotations, meta.COMMENT: "not this one"}),
    )
    (decide,) = decides(reconcile.decide(w))
    assert decide.decision == "rejected" and decide.comment == "not this one"


def test_stale_id_is_refused_with_warning() -> None:
    plan = reconcile.decide(annotated(OLD.approval_id))
    assert decides(plan) == []
    assert [e.reason for e in plan.events] == ["ApprovalAlreadyDecided"] or [
        e.reason for e in plan.events
    ] == ["StaleApproval"]
    assert actions.RemoveDecisionAnnotations() in plan.actions


def test_unknown_id_is_refused_with_warning() -> None:
    plan = reconcile.decide(annotated("a-ffffffffffff"))
    assert decides(plan) == []
    (event,) = plan.events
    assert event.type == "Warning" and event.reason == "UnknownApproval"
    assert PENDING.approval_id in event.message


def test_unstamped_decision_is_refused() -> None:
    plan = reconcile.decide(annotated(PENDING.approval_id, by=None))
    assert decides(plan) == []
    assert plan.events[0].reason == "ApprovalRefused"


def test_self_approval_refused_by_the_operator_too() -> None:
    plan = reconcile.decide(annotated(PENDING.approval_id, by="alice"))
    assert decides(plan) == []
    assert plan.events[0].reason == "SelfApprovalRefused"
    allowed = annotated(PENDING.approval_id, by="alice", spec={"approval": {"allowSelfApproval": True}})
    assert len(decides(reconcile.decide(allowed))) == 1


def test_handled_annotations_are_not_processed_twice() -> None:
    plan = reconcile.decide(annotated(PENDING.approval_id, annotations_handled=True))
    assert decides(plan) == [] and plan.events == []


def test_decided_approval_starts_next_attempt() -> None:
    decided = dataclasses.replace(PENDING, status="approved", decided_by="manager", decided_at=NOW)
    plan = reconcile.decide(parked(decided))
    assert [a for a in plan.actions if not isinstance(a, actions.PinImage)] == [
        actions.CreatePod(2, "approval", image="agentrun:dev")
    ]
    assert plan.status is not None
    assert plan.status["approvals"] == [
        {"id": PENDING.approval_id, "decision": "approved", "by": "manager", "at": "2026-01-01T12:00:00Z"}
    ]


def overdue(on_timeout: str) -> model.World:
    late = dataclasses.replace(PENDING, deadline=NOW - datetime.timedelta(seconds=1))
    return parked(late, spec={"approval": {"onTimeout": on_timeout}})


def test_deadline_escalate_once_and_keep_waiting() -> None:
    plan = reconcile.decide(overdue("escalate"))
    assert decides(plan) == []
    assert [e.reason for e in plan.events] == ["ApprovalEscalated"]
    assert plan.status is not None and plan.status["pendingApproval"]["escalated"] is True
    cond = {c["type"]: c["status"] for c in plan.status["conditions"]}
    assert cond["ApprovalEscalated"] == "True" and cond["WaitingApproval"] == "True"
    again = reconcile.decide(dataclasses.replace(overdue("escalate"), status=plan.status))
    assert again.events == []


def test_deadline_cancel_and_read_only_expire_in_postgres() -> None:
    (cancel,) = decides(reconcile.decide(overdue("cancel")))
    assert cancel.decision == "expired" and cancel.deadline_action == "cancel"
    (ro,) = decides(reconcile.decide(overdue("readOnly")))
    assert ro.decision == "expired" and ro.deadline_action == "read_only"


def test_annotation_beats_deadline_in_the_same_reconcile() -> None:
    w = overdue("cancel")
    w = dataclasses.replace(
        w,
        run=dataclasses.replace(
            w.run, annotations={meta.APPROVE: PENDING.approval_id, meta.DECIDED_BY: "manager"}
        ),
    )
    (decide,) = decides(reconcile.decide(w))
    assert decide.decision == "approved"


def test_expired_cancel_is_followed_by_cancel_run_then_read_only_resumes() -> None:
    expired = dataclasses.replace(PENDING, status="expired", deadline_action="cancel", decided_at=NOW)
    plan = reconcile.decide(parked(expired))
    assert any(isinstance(a, actions.CancelRun) for a in plan.actions)
    ro = dataclasses.replace(expired, deadline_action="read_only")
    plan = reconcile.decide(parked(ro))
    assert actions.SetReadOnly() in plan.actions
    assert actions.CreatePod(2, "deadline", image="agentrun:dev") in plan.actions


# --- issue 10/11: the decision is stored first; the recorded policy; no policies, no decisions ------------


def test_decision_is_stored_before_the_annotations_go() -> None:
    plan = reconcile.decide(annotated(PENDING.approval_id))
    kinds = [type(a) for a in plan.actions]
    assert kinds.index(actions.Decide) < kinds.index(actions.RemoveDecisionAnnotations)


def _with_policy(policy: dict[str, Any], by: str = "manager", groups: str = "") -> model.World:
    approval = dataclasses.replace(PENDING, policy=policy)
    w = annotated(approval.approval_id, by=by)
    ann = {**w.run.annotations, meta.DECIDED_BY_GROUPS: groups}
    return dataclasses.replace(w, run=dataclasses.replace(w.run, annotations=ann), approvals=(OLD, approval))


def test_approvers_are_checked_against_the_policy_recorded_with_the_approval() -> None:
    # The live spec says nothing about approvers; the snapshot taken when the approval was asked does.
    policy = {"approvers": {"users": ["finance-lead"], "groups": ["finance"]}}
    plan = reconcile.decide(_with_policy(policy))
    assert decides(plan) == [] and [e.reason for e in plan.events] == ["ApproverRefused"]
    assert actions.RemoveDecisionAnnotations() in plan.actions
    assert decides(reconcile.decide(_with_policy(policy, by="finance-lead")))
    assert decides(reconcile.decide(_with_policy(policy, groups="system:authenticated,finance")))


def test_self_approval_checked_against_the_recorded_policy() -> None:
    plan = reconcile.decide(_with_policy({"allowSelfApproval": False}, by="alice"))
    assert decides(plan) == [] and [e.reason for e in plan.events] == ["SelfApprovalRefused"]
    assert decides(reconcile.decide(_with_policy({"allowSelfApproval": True}, by="alice")))


def test_no_decision_without_the_admission_policies() -> None:
    w = dataclasses.replace(annotated(PENDING.approval_id), admission_ok=False)
    plan = reconcile.decide(w)
    assert decides(plan) == []
    assert [e.reason for e in plan.events] == ["ApprovalPolicyMissing"]
    assert actions.RemoveDecisionAnnotations() in plan.actions
    assert plan.status is not None
    cond = {c["type"]: c for c in plan.status["conditions"]}["ApprovalPolicyMissing"]
    assert cond["status"] == "True" and cond["reason"] == "AdmissionPoliciesAbsent"


def test_unknown_admission_state_decides_nothing_and_keeps_the_annotations() -> None:
    plan = reconcile.decide(dataclasses.replace(annotated(PENDING.approval_id), admission_ok=None))
    assert decides(plan) == [] and actions.RemoveDecisionAnnotations() not in plan.actions


def test_a_four_eyes_namespace_overrides_allow_self_approval() -> None:
    """Issue 35.5: the namespace's label wins over the run's spec (and the policy recorded with it)."""
    selfish = {"approval": {"allowSelfApproval": True}}
    plan = reconcile.decide(
        annotated(PENDING.approval_id, by="alice", spec=selfish, namespace_four_eyes=True)
    )
    assert decides(plan) == [] and [e.reason for e in plan.events] == ["SelfApprovalRefused"]
    assert "requires four eyes" in plan.events[0].message
    assert decides(reconcile.decide(annotated(PENDING.approval_id, by="bob", namespace_four_eyes=True)))
    rejected = annotated(PENDING.approval_id, key=meta.REJECT, by="alice", namespace_four_eyes=True)
    assert decides(reconcile.decide(rejected))  # a creator can always stop their own run


def test_the_namespace_names_who_decides() -> None:
    ann = {meta.DECIDED_BY_GROUPS: "devs,system:authenticated"}
    plan = reconcile.decide(
        annotated(PENDING.approval_id, namespace_approver_groups=("managers",), extra_annotations=ann)
    )
    assert decides(plan) == [] and [e.reason for e in plan.events] == ["ApproverRefused"]
    assert "approver groups of namespace" in plan.events[0].message and "managers" in plan.events[0].message
    ann = {meta.DECIDED_BY_GROUPS: "managers"}
    ok = annotated(PENDING.approval_id, namespace_approver_groups=("managers",), extra_annotations=ann)
    assert decides(reconcile.decide(ok))


def test_the_author_of_a_schedule_may_not_approve_its_ticks_run() -> None:
    """The operator created the run (created-by); the schedule's author, carried on the run, is refused as
    its creator would be — unless self-approval is allowed and the namespace does not require four eyes."""
    tick = {meta.CREATED_BY: "system:serviceaccount:agentrun-system:agentrun-operator"}
    tick[schedules.ANN_AUTHOR] = "carol"
    plan = reconcile.decide(annotated(PENDING.approval_id, by="carol", extra_annotations=tick))
    assert decides(plan) == [] and [e.reason for e in plan.events] == ["SelfApprovalRefused"]
    assert "carol wrote the AgentRunSchedule" in plan.events[0].message
    assert "allowSelfApproval is false" in plan.events[0].message
    assert decides(reconcile.decide(annotated(PENDING.approval_id, by="manager", extra_annotations=tick)))
    selfish = {"approval": {"allowSelfApproval": True}}
    allowed = annotated(PENDING.approval_id, by="carol", extra_annotations=tick, spec=selfish)
    assert decides(reconcile.decide(allowed))
    four_eyes = annotated(
        PENDING.approval_id, by="carol", extra_annotations=tick, spec=selfish, namespace_four_eyes=True
    )
    plan = reconcile.decide(four_eyes)
    assert decides(plan) == [] and "requires four eyes" in plan.events[0].message
    rejected = annotated(PENDING.approval_id, key=meta.REJECT, by="carol", extra_annotations=tick)
    assert decides(reconcile.decide(rejected))  # the author can always stop the run
