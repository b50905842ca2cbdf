"""The status of an AgentRun, built once per reconcile from the decided ``walk.State``. Pure.

Rule: only ``build`` turns a pass's decision into a status; everything in status the operator does not
decide itself (Postgres's step, result, error, approvals, effects, interventions) is copied from the World
here, so every status written shows the same view of Postgres, whichever step of the pass decided it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agent_operator.decide import actions, approvals, edits, forks, model, phases, pods, steering, walk
from agentrun_core import hitl, results
from agentrun_core.api import protocol
from agentrun_core.api import status as api_status


def build(
    world: model.World,
    st: walk.State,
    *,
    admitted_now: bool = False,
    new_pod: str | None = None,
    image: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole status for ``st`` (``image``: the run's pin, agent_operator.decide.imagepin; None: no pin
    shown)."""
    db = world.db
    pending = world.pending_approval
    read_only = bool(db and db.read_only)
    status: dict[str, Any] = {
        "observedGeneration": world.run.generation,
        "phase": st.phase,
        "message": st.message,
        "attempts": st.attempts,
        "restarts": st.restarts,
    }
    if st.control_plane_losses:
        status["controlPlaneLosses"] = st.control_plane_losses
    if st.attempt_reason:
        status["attemptReason"] = st.attempt_reason
    if st.last_end:
        status["lastAttemptEnd"] = st.last_end
    if st.next_attempt_at:
        status["nextAttemptAt"] = st.next_attempt_at
    worker_pod = new_pod or (protocol.pod_name(world.run.name, st.attempts) if st.attempts else None)
    if worker_pod:
        status["workerPod"] = worker_pod
    if db is not None:
        if db.current_step:
            status["currentStep"] = db.current_step
        status["lease"] = {"holder": world.lease_holder or db.holder or "", "epoch": db.lease_epoch}
        status["readOnly"] = read_only
        if db.result is not None:
            status["result"] = results.summarise(db.result)
        if db.error:
            status["error"] = db.error[:4000]
    if pending is not None and st.phase not in api_status.FINAL_PHASES:
        status["pendingApproval"] = phases.jsonable(
            {
                "id": pending.approval_id,
                "prompt": pending.prompt,
                "deadline": pending.deadline,
                "escalated": st.escalated,
                # A HumanInTheLoopMiddleware batch: each action, decided on its own (agentrun_core.hitl)
                "actions": hitl.pending_actions(pending.prompt),
            }
        )
        if status["pendingApproval"]["actions"] is None:
            del status["pendingApproval"]["actions"]
    decided = [a for a in world.approvals if a.status != "pending"]
    if decided:
        status["approvals"] = [
            {
                k: v
                for k, v in phases.jsonable(
                    {
                        "id": a.approval_id,
                        "decision": a.status,
                        "by": a.decided_by,
                        "at": a.decided_at,
                        "comment": a.comment,
                        "deadlineAction": a.deadline_action,
                        **edits.status_fields(a.payload),
                        "actions": hitl.decided_actions(a.prompt, a.payload),
                    }
                ).items()
                if v is not None
            }
            for a in sorted(decided, key=lambda a: (a.decided_at is None, phases.iso(a.decided_at) or ""))
        ]
    if world.usage is not None:
        status["usage"] = dict(world.usage)
    if world.effects:
        status["effects"] = {k: int(v) for k, v in world.effects.items()}
    if db is not None and (db.retry_generation or st.reopened or st.observed_retry_generation):
        status["retryGeneration"] = db.retry_generation
        status["observedRetryGeneration"] = max(st.observed_retry_generation, db.retry_generation)
        status["reopened"] = st.reopened
    if db is not None and db.fork_of:
        status["forkOf"] = forks.status_entry(db.fork_of)
    if world.interventions:
        status["interventions"] = phases.jsonable(steering.status_entries(world))
    if st.start_time:
        status["startTime"] = st.start_time
    if st.completion_time and st.phase in api_status.FINAL_PHASES:
        status["completionTime"] = st.completion_time
    desired = dict(
        phases.desired_conditions(
            st.phase,
            st.reason,
            st.message,
            admitted=admitted_now or db is not None,
            escalated=st.escalated,
            read_only=read_only,
        )
    )
    desired.update(policy_condition(world))
    desired.update(notify_condition(world))
    desired.update(compat_condition(world, st))
    status["conditions"] = phases.conditions(
        world.status.get("conditions"), desired, world.run.generation, world.now
    )
    if image is not None:
        status["image"] = image
    return status


LEDGER_MISSING = (
    "the run was admitted (its status shows it) but Postgres has no row of it: its rows were purged, or the "
    "database was restored from an older backup. It is never admitted again, so no effect runs twice; to "
    "run the graph again, create a new AgentRun"
)


def ledger_missing(world: model.World) -> tuple[dict[str, Any], bool]:
    """The status of an admitted run whose rows are gone (``reconcile._ledger_missing``): as it was, with
    the condition LedgerMissing True; and whether that condition is new (its Event is posted once)."""
    old = [dict(c) for c in world.status.get("conditions") or ()]
    had = any(c.get("type") == api_status.LEDGER_MISSING and c.get("status") == "True" for c in old)
    missing = phases.conditions(
        old,
        {api_status.LEDGER_MISSING: (True, api_status.LEDGER_MISSING, LEDGER_MISSING)},
        world.run.generation,
        world.now,
    )
    kept = [c for c in old if c.get("type") != api_status.LEDGER_MISSING]
    return {**world.status, "conditions": kept + missing}, not had


def policy_condition(world: model.World) -> dict[str, tuple[bool, str, str]]:
    """ApprovalPolicyMissing: True while steering is refused for want of the admission policies as shipped
    (the message names each object that is absent or differs)."""
    if world.admission_ok is False:
        message = "steering (approvals, fork, retry, resolve, resume) refused: " + approvals.policy_missing(
            world
        )
        return {"ApprovalPolicyMissing": (True, "AdmissionPoliciesAbsent", message)}
    had = any(c.get("type") == "ApprovalPolicyMissing" for c in world.status.get("conditions") or ())
    if had and world.admission_ok:
        return {"ApprovalPolicyMissing": (False, "AdmissionPoliciesInstalled", "policies installed")}
    return {}


def compat_condition(world: model.World, st: walk.State) -> dict[str, tuple[bool, str, str]]:
    """WorkerIncompatible: True while the run waits because its worker refused the schema (exit 15,
    docs/upgrading.md), until a later attempt's worker holds the run; False after that."""
    end = st.last_end or {}
    had = any(c.get("type") == "WorkerIncompatible" for c in world.status.get("conditions") or ())
    compatible = {"WorkerIncompatible": (False, "Compatible", "the worker runs against the schema")}
    if end.get("reason") != pods.INCOMPATIBLE:
        return compatible if had else {}
    # Waiting: the refusing attempt is the current one, or the next one's worker has not taken the run yet.
    # Any attempt after that one was started after a compatible worker held the run.
    current = protocol.pod_name(world.run.name, st.attempts) if st.attempts else None
    claimed = world.db is not None and world.db.holder == current
    gap = st.attempts - int(end.get("attempt") or 0)
    if st.phase in api_status.FINAL_PHASES or gap > 1 or (gap == 1 and claimed):
        return compatible
    return {"WorkerIncompatible": (True, "WorkerIncompatible", str(end.get("message") or ""))}


def notify_condition(world: model.World) -> dict[str, tuple[bool, str, str]]:
    """NotificationFailed: True while spec.approval.notify cannot deliver (missing Secret, receiver down,
    unknown outcome); False again after a later delivery. Never touches the run's phase."""
    if world.notify_problem is not None:
        reason, message = world.notify_problem
        return {"NotificationFailed": (True, reason, message)}
    had = any(c.get("type") == "NotificationFailed" for c in world.status.get("conditions") or ())
    if had:
        return {
            "NotificationFailed": (False, "NoProblem", "no notification problem since this operator started")
        }
    return {}


def transition_events(old: Mapping[str, Any], new: Mapping[str, Any] | None) -> list[actions.Event]:
    """One Event per phase change (Warning for Failed)."""
    if not new or old.get("phase") == new.get("phase"):
        return []
    phase = str(new.get("phase"))
    reason = phase
    for cond in new.get("conditions") or ():
        if cond.get("type") == phase and cond.get("status") == "True" and cond.get("reason"):
            reason = str(cond["reason"]) if phase == api_status.FAILED else phase
    message = f"{old.get('phase') or 'New'} -> {phase}: {new.get('message') or ''}".strip()
    return [actions.Event("Warning" if phase == api_status.FAILED else "Normal", reason, message)]


def note_pending_effects(world: model.World, st: walk.State) -> None:
    """A run that stops with effects of unknown outcome says so in its message, from its first final status
    on (a reader who sees the final phase must see the pending effects with it)."""
    # An outcome the operator decided comes back from status with last time's note: replace it, so the
    # count is today's (a human may have resolved some) and the note is never repeated.
    st.message = _PENDING_NOTE.sub("", st.message or "")
    pending_effects = int(world.effects.get("pending") or 0)
    if pending_effects and st.phase != api_status.SUCCEEDED:
        # Surfaced, never guessed: the next attempt (after `agentrun retry`) reconciles them, or a human
        # resolves them (`agentrun resolve NAME KEY --sent|--not-sent`); `agentrun ledger NAME` lists them.
        st.message = (
            f"{st.message}; {pending_effects} effect(s) left pending (outcome unknown): "
            f"see `agentrun ledger {world.run.name}`"
        )


_PENDING_NOTE = re.compile(
    r"; \d+ effect\(s\) left pending \(outcome unknown\): see `agentrun ledger [^`]*`$"
)
