"""Approval decisions from annotations and from deadlines. Pure.

The API server already refused what the admission policies forbid (no ``approve`` verb, self-approval,
forged stamps). The checks here are the operator's own line: they decide *which* approval an annotation
may apply to (only the pending one, by exact id) and repeat the identity checks so a cluster without the
policies installed still never applies an unverified decision.
"""

from __future__ import annotations

import dataclasses

from agent_operator import actions, model

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


def parse(annotations: dict[str, str] | None) -> tuple[Request | None, str | None]:
    """(request, refusal): at most one is set; both None when no decision annotation is present."""
    ann = annotations or {}
    approve = ann.get(model.ANN_APPROVE, "").strip()
    reject = ann.get(model.ANN_REJECT, "").strip()
    if not approve and not reject:
        return None, None
    if approve and reject:
        return None, "both agentrun.dev/approve and agentrun.dev/reject are set; set exactly one"
    decided_by = ann.get(model.ANN_DECIDED_BY, "").strip()
    if not decided_by:
        return None, (
            "the decision carries no agentrun.dev/decided-by stamp (is the agentrun MutatingAdmissionPolicy "
            "installed?); nothing applied"
        )
    return (
        Request(
            approval_id=approve or reject,
            decision="approved" if approve else "rejected",
            decided_by=decided_by,
            created_by=ann.get(model.ANN_CREATED_BY, "").strip(),
            comment=ann.get(model.ANN_COMMENT) or None,
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
    plan.actions.append(actions.RemoveDecisionAnnotations())
    if refusal is not None:
        plan.warn("ApprovalRefused", refusal)
        return False
    assert request is not None
    verb = "approval" if request.decision == "approved" else "rejection"
    approval = world.approval(request.approval_id)
    if approval is None:
        plan.warn(
            "UnknownApproval",
            f"{verb} of {request.approval_id!r} by {request.decided_by} refused: no such approval in this run"
            + _pending_hint(world),
        )
        return False
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
        return False
    if finished:
        plan.warn("ApprovalRefused", f"{verb} of {approval.approval_id} refused: the run is finished")
        return False
    if (
        request.decision == "approved"
        and not world.spec.approval.allow_self_approval
        and request.created_by
        and request.created_by == request.decided_by
    ):
        plan.warn(
            "SelfApprovalRefused",
            f"{request.decided_by} created this run and spec.approval.allowSelfApproval is false",
        )
        return False
    plan.actions.append(
        actions.Decide(
            approval_id=approval.approval_id,
            decision=request.decision,
            decided_by=request.decided_by,
            comment=request.comment,
        )
    )
    return True


def _latest_decided(world: model.World) -> model.Approval | None:
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
    if policy == "escalate":
        if not escalated:
            plan.warn(
                "ApprovalEscalated",
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
