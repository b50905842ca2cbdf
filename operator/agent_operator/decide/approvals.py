"""Approval decisions from annotations and from deadlines. Pure.

The API server already refused what the admission policies forbid (no ``approve`` verb, a decision judged
against the policy in force before the request, self-approval, forged stamps). The checks here are the
operator's own line: they decide *which* approval an annotation may apply to (only the pending one, by exact
id) and repeat the identity checks against the policy Postgres recorded when the approval was requested
(approvers, self-approval), never against the live spec.

Rules of a plan that carries a human's decision: the decision is stored first (``Decide``, exactly once in
Postgres), the annotations are removed only after it (``RemoveDecisionAnnotations``): a failed store or an
operator exit between the two leaves the annotations, and the next reconcile applies them again (a no-op
if the first store did land). Without the admission policies (``world.admission_ok`` False) the stamps are
just annotations anyone who can patch the run can write, so no decision is applied at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from agent_operator.decide import actions, edits, model
from agentrun_core import hitl, store
from agentrun_core.api import meta, schedules
from agentrun_core.api import status as api_status

OPERATOR_IDENTITY = "agentrun-operator"

# spec.approval.onTimeout -> agentrun_approvals.deadline_action
DEADLINE_ACTIONS = {"escalate": "escalate", "cancel": "cancel", "readOnly": "read_only"}


@dataclasses.dataclass(frozen=True)
class Request:
    """A decision requested through annotations."""

    approval_id: str
    decision: str  # approved | rejected
    decided_by: str
    created_by: str
    comment: str | None
    groups: tuple[str, ...] = ()  # the decider's groups, stamped by the API server
    edits: Mapping[str, str] = dataclasses.field(default_factory=dict)  # field -> text (with an approval)
    response: str | None = None  # the human's text for the graph (with a rejection)
    decisions: str | None = None  # per-action decisions of a middleware batch (JSON, agentrun_core.hitl)
    # Who wrote the AgentRunSchedule whose tick created the run (the operator is its creator then): they
    # may not approve it where its creator may not. "" for runs not of a tick.
    schedule_author: str = ""

    def self_approval(self) -> str | None:
        """Why an approval by ``decided_by`` would be their own run's (None: it would not)."""
        if self.decision != "approved":
            return None
        if self.created_by and self.created_by == self.decided_by:
            return f"{self.decided_by} created this run"
        if self.schedule_author and self.schedule_author == self.decided_by:
            return (
                f"{self.decided_by} wrote the AgentRunSchedule whose tick created this run "
                f"({schedules.ANN_AUTHOR})"
            )
        return None


def parse(annotations: dict[str, str] | None) -> tuple[Request | None, str | None]:
    """(request, refusal): at most one is set; both None when no decision annotation is present."""
    ann = annotations or {}
    approve = ann.get(meta.APPROVE, "").strip()
    reject = ann.get(meta.REJECT, "").strip()
    if not approve and not reject:
        return None, None
    if approve and reject:
        return None, f"both {meta.APPROVE} and {meta.REJECT} are set; set exactly one"
    decided_by = ann.get(meta.DECIDED_BY, "").strip()
    if not decided_by:
        return None, unstamped("the decision", meta.DECIDED_BY, "agentrun")
    return (
        Request(
            approval_id=approve or reject,
            decision="approved" if approve else "rejected",
            decided_by=decided_by,
            created_by=ann.get(meta.CREATED_BY, "").strip(),
            comment=ann.get(meta.COMMENT) or None,
            groups=tuple(g for g in ann.get(meta.DECIDED_BY_GROUPS, "").split(",") if g),
            edits=edits.from_annotations(ann)[0],
            response=edits.from_annotations(ann)[1],
            decisions=ann.get(meta.DECISIONS),
            schedule_author=ann.get(schedules.ANN_AUTHOR, "").strip(),
        ),
        None,
    )


def from_annotations(world: model.World, plan: actions.Plan, finished: bool) -> bool:
    """Add the actions/events for a decision annotation; True when a Decide action was planned."""
    if world.annotations_handled:
        return False
    request, refusal = parse(dict(world.run.annotations))
    if request is None and refusal is None:
        return False
    if world.admission_ok is None:
        plan.soon(5.0)  # could not tell whether the policies are installed: decide nothing, look again
        return False
    remove = actions.RemoveDecisionAnnotations()
    if not world.admission_ok:
        plan.warn("ApprovalPolicyMissing", "decision annotations ignored: " + policy_missing(world))
        plan.actions.append(remove)
        return False
    if refusal is not None:
        plan.warn("ApprovalRefused", refusal)
        plan.actions.append(remove)
        return False
    assert request is not None
    decide = _check(world, plan, request, finished)
    if decide is not None:
        plan.actions.append(decide)  # stored first ...
    plan.actions.append(remove)  # ... the annotations go only once it is stored
    return decide is not None


POLICY_MISSING = (
    "the agentrun admission policies (deploy/admission: ValidatingAdmissionPolicies agentrun-approvals, "
    "agentrun-decision-payload, agentrun-steering, agentrun-fork, agentrun-schedule-author, the "
    "MutatingAdmissionPolicies that stamp who did it, and their bindings) are not installed as shipped, so "
    "anyone who can patch this run could "
    "have written it; install deploy/admission (Kubernetes 1.36+) or deploy/admission-vap-only (1.34, 1.35) "
    "whole and steer again"
)


def unstamped(what: str, stamp: str, policies: str) -> str:
    """The refusal of a request that reached us without its stamp: who asked is then unknown, so nothing
    is applied."""
    return (
        f"{what} carries no {stamp} stamp (is the {policies} MutatingAdmissionPolicy installed?); "
        "nothing applied"
    )


def policy_missing(world: model.World) -> str:
    """Why steering is refused, naming each policy object that is absent or not as shipped."""
    which = "; ".join(world.admission_missing)
    return POLICY_MISSING + (f" (not as shipped: {which})" if which else "")


def _check(world: model.World, plan: actions.Plan, request: Request, finished: bool) -> actions.Decide | None:
    verb = "approval" if request.decision == "approved" else "rejection"
    approval = world.approval(request.approval_id)
    if approval is None:
        plan.warn(
            "UnknownApproval",
            f"{verb} of {request.approval_id!r} by {request.decided_by} refused: no such approval in this run"
            + _pending_hint(world),
        )
        return None
    if approval.status != "pending":
        latest = _latest_decided(world)
        repeat = (
            latest is not None
            and latest.approval_id == approval.approval_id
            and latest.status == request.decision
        )
        message = (
            f"{verb} of {approval.approval_id} by {request.decided_by} ignored: it was already "
            f"{approval.status} by {approval.decided_by or 'unknown'}" + _pending_hint(world)
        )
        if repeat:
            plan.info("ApprovalAlreadyDecided", message)
        else:
            plan.warn("StaleApproval", message)
        return None
    if finished:
        plan.warn("ApprovalRefused", f"{verb} of {approval.approval_id} refused: the run is finished")
        return None
    # The policy the approval was requested under (Postgres's snapshot), not today's spec.
    policy = model.ApprovalPolicy.from_json(approval.policy) if approval.policy else world.spec.approval
    if not _is_approver(policy, request):
        plan.warn(
            "ApproverRefused",
            f"{verb} of {approval.approval_id} by {request.decided_by} refused: not among "
            f"spec.approval.approvers in force when it was requested (users {list(policy.approver_users)}, "
            f"groups {list(policy.approver_groups)})",
        )
        return None
    groups = world.namespace_approver_groups
    if groups and not any(g in groups for g in request.groups):
        plan.warn(
            "ApproverRefused",
            f"{verb} of {approval.approval_id} by {request.decided_by} refused: not in the approver groups "
            f"of namespace {world.run.namespace} ({', '.join(groups)}; its annotation "
            f"{meta.APPROVER_GROUPS})",
        )
        return None
    own = request.self_approval()
    if own and world.namespace_four_eyes:
        plan.warn(
            "SelfApprovalRefused",
            f"{own} and namespace {world.run.namespace} requires four eyes "
            f"(label {meta.LABEL_FOUR_EYES}), whatever spec.approval.allowSelfApproval says",
        )
        return None
    if own and not policy.allow_self_approval:
        plan.warn("SelfApprovalRefused", f"{own} and spec.approval.allowSelfApproval is false")
        return None
    refused = edits.problem(request.decision, request.edits, request.response, approval.prompt)
    decisions = None
    if refused is None:
        decisions, refused = edits.batch_decisions(
            request.decision, request.edits, request.response, request.decisions, approval.prompt
        )
    if refused is not None:
        who = f"{verb} of {approval.approval_id} by {request.decided_by}"
        plan.warn("DecisionPayloadRefused", f"{who} refused: {refused}")
        return None
    return actions.Decide(
        approval_id=approval.approval_id,
        decision=request.decision,
        decided_by=request.decided_by,
        comment=request.comment,
        edits=dict(request.edits),
        response=request.response,
        action=edits.action(approval.prompt),
        decisions=decisions,
    )


def _is_approver(policy: model.ApprovalPolicy, request: Request) -> bool:
    if not policy.approver_users and not policy.approver_groups:
        return True
    if request.decided_by in policy.approver_users:
        return True
    return any(g in policy.approver_groups for g in request.groups)


def _latest_decided(world: model.World) -> store.Approval | None:
    decided = [a for a in world.approvals if a.status != "pending" and a.decided_at is not None]
    if not decided:
        return None
    return max(decided, key=lambda a: a.decided_at or world.now)


def _pending_hint(world: model.World) -> str:
    pending = world.pending_approval
    return f" (pending approval: {pending.approval_id})" if pending else " (no approval is pending)"


def deadline(world: model.World, plan: actions.Plan, escalated: bool) -> bool:
    """Apply ``spec.approval.onTimeout`` to an overdue pending approval; return the new ``escalated``.

    escalate: Event + condition once, the approval stays pending (a late approval still applies);
    cancel / readOnly: ``decide_approval(expired)`` — Postgres lets exactly one of approve/expire win.
    """
    pending = world.pending_approval
    if pending is None or pending.deadline is None:
        return escalated
    remaining = (pending.deadline - world.now).total_seconds()
    if remaining > 0:
        plan.soon(remaining)
        return escalated
    policy = world.spec.approval.on_timeout
    batch = None
    if hitl.actions(pending.prompt) is not None:  # the middleware resumes only with one decision per action
        batch = hitl.decide(pending.prompt, "expired")
    if policy == "escalate":
        if not escalated:
            plan.warn(
                api_status.APPROVAL_ESCALATED,
                f"approval {pending.approval_id} is past its deadline ({pending.deadline.isoformat()}); "
                "still waiting for a decision",
            )
        return True
    plan.actions.append(
        actions.Decide(
            approval_id=pending.approval_id,
            decision="expired",
            decided_by=OPERATOR_IDENTITY,
            comment=f"deadline {pending.deadline.isoformat()} passed",
            deadline_action=DEADLINE_ACTIONS.get(policy, policy),
            decisions=batch,
        )
    )
    return escalated


def expiry_followups(world: model.World, plan: actions.Plan) -> None:
    """Make an applied expiry take effect (idempotent: repeats until Postgres shows it)."""
    if world.db is None or world.db.status in model.DB_FINAL:
        return
    for approval in world.approvals:
        if approval.status != "expired":
            continue
        if approval.deadline_action == "cancel":
            plan.actions.append(
                actions.CancelRun(f"approval {approval.approval_id} expired (onTimeout: cancel)")
            )
            return
        if approval.deadline_action == "read_only" and not world.db.read_only:
            plan.actions.append(actions.SetReadOnly())
