"""One reconcile of an AgentRun: ``decide(world) -> Plan``. Pure; the runner carries the plan out.

Order of concerns, each step able to end the reconcile:
1. finalizer, then the admission row (nothing else exists for a run before its row does);
2. decision annotations and approval deadlines (Postgres decides who wins);
3. the outcome recorded in Postgres (Succeeded/Failed/Cancelled are final and sticky), TTL;
4. stop requests — delete, cancel, suspend: the worker Pod is deleted (SIGTERM: it drains at a step
   boundary), and the run is released only once the Pod is gone;
5. the attempt: start the first, watch the current one, and when it ended without finishing or parking the
   run, start the next one (reason, backoff, attempt limit). A Pod that looks alive while its Lease is no
   longer renewed is deleted (force) and replaced: the Lease is the backstop for hangs and lost nodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agent_operator import actions, approvals, model, phases, pods, retry

POLL_ACTIVE = 2.0  # seconds; overridden by the runner from settings
POLL_IDLE = 30.0


@dataclasses.dataclass
class _State:
    """Status being built (a mutable copy of the last written status)."""

    phase: str
    reason: str
    message: str
    attempts: int
    attempt_reason: str | None
    restarts: int
    last_end: dict[str, Any] | None
    next_attempt_at: str | None
    start_time: str | None
    completion_time: str | None
    escalated: bool


def _initial(status: Mapping[str, Any]) -> _State:
    pending = status.get("pendingApproval") or {}
    return _State(
        phase=str(status.get("phase") or "Pending"),
        reason=str(_condition(status, status.get("phase") or "") or "Created"),
        message=str(status.get("message") or ""),
        attempts=int(status.get("attempts") or 0),
        attempt_reason=status.get("attemptReason"),
        restarts=int(status.get("restarts") or 0),
        last_end=dict(status["lastAttemptEnd"]) if status.get("lastAttemptEnd") else None,
        next_attempt_at=status.get("nextAttemptAt"),
        start_time=status.get("startTime"),
        completion_time=status.get("completionTime"),
        escalated=bool(pending.get("escalated")),
    )


def _condition(status: Mapping[str, Any], phase: str) -> str | None:
    """Reason of the condition that names the phase (Failed -> Failed's reason), for sticky phases."""
    for cond in status.get("conditions") or ():
        if cond.get("type") == phase and cond.get("status") == "True":
            return str(cond.get("reason") or "")
    return None


def decide(
    world: model.World, poll_active: float = POLL_ACTIVE, poll_idle: float = POLL_IDLE
) -> actions.Plan:
    plan = actions.Plan(requeue_after=poll_active)
    run, spec, db = world.run, world.spec, world.db
    st = _initial(world.status)

    # 1. Finalizer first, then the admission row.
    if model.FINALIZER not in run.finalizers and not run.deleting:
        plan.actions.append(actions.AddFinalizer())
    if db is None:
        if run.deleting:
            plan.done = True  # never admitted: nothing ran, nothing to release
            return plan
        plan.actions.append(actions.Admit())
        plan.info("Admitted", f"admission row written for graph {spec.graph}")
        st.phase, st.reason, st.message = "Pending", "Admitted", "admitted; starting the first attempt"
        plan.status = _status(world, st, admitted_now=True)
        plan.soon(0)
        return plan

    finished = db.status in model.DB_FINAL or st.phase in phases.FINAL_PHASES
    current = max([st.attempts, *world.pods.keys()])
    st.attempts = current
    pod = world.pods.get(current)

    # 2. Approvals: annotations first (a human beats the clock within one reconcile), then the deadline.
    deciding = approvals.from_annotations(world, plan, finished)
    if not deciding and not finished and not run.deleting and not spec.cancel:
        st.escalated = approvals.deadline(world, plan, st.escalated)
        deciding = any(isinstance(a, actions.Decide) for a in plan.actions)
    approvals.expiry_followups(world, plan)
    if deciding:
        plan.soon(0)  # the decision's outcome shows in Postgres; look again right away

    # 3. The outcome Postgres records.
    outcome = _db_outcome(db)
    if outcome is None and st.phase in phases.FINAL_PHASES:
        outcome = (st.phase, st.reason, st.message)  # decided by the operator (attempt limit, InvalidSpec)
    if outcome is not None:
        _finish(world, plan, st, outcome, pod, poll_idle)
        return plan

    # 4. Stop requests.
    if run.deleting or spec.cancel or spec.suspend:
        _stop(world, plan, st, pod)
        return plan

    # 5. Attempts.
    _attempt(world, plan, st, current, pod, poll_active, poll_idle)
    return plan


def _db_outcome(db: model.DbRun) -> tuple[str, str, str] | None:
    if db.status == "succeeded":
        return "Succeeded", "Succeeded", "the graph finished"
    if db.status == "failed":
        if phases.is_invalid_spec(db.status_reason, db.error):
            return "Failed", phases.INVALID_SPEC, db.error or db.status_reason or "the spec cannot run"
        return "Failed", phases.GRAPH_FAILED, db.error or db.status_reason or "the graph failed"
    if db.status == "cancelled":
        return "Cancelled", "Cancelled", db.status_reason or "cancelled"
    if db.status == "needs_human":
        return (
            "Failed",
            phases.NEEDS_HUMAN,
            db.error
            or db.status_reason
            or ("an effect has an unknown outcome that could not be reconciled; see `agentrun ledger`"),
        )
    return None


def _finish(
    world: model.World,
    plan: actions.Plan,
    st: _State,
    outcome: tuple[str, str, str],
    pod: model.PodInfo | None,
    poll_idle: float,
) -> None:
    st.phase, st.reason, st.message = outcome
    st.next_attempt_at = None
    if st.completion_time is None:
        finished_at = world.db.finished_at if world.db is not None else None
        st.completion_time = phases.iso(finished_at or world.now)
    if world.run.deleting:
        # A finished run's worker may still be exiting; the finalizer waits for it.
        if pod is not None and not pod.terminated:
            if not pod.deleting:
                plan.actions.append(actions.DeletePod(pod.name, "the AgentRun is being deleted"))
            plan.soon(1.0)
        else:
            plan.done = True
    plan.status = _status(world, st)
    ttl = world.spec.ttl_seconds_after_finished
    plan.soon(poll_idle)
    if ttl is not None and not world.run.deleting:
        completed = phases.parse_time(st.completion_time) or world.now
        remaining = (completed - world.now).total_seconds() + ttl
        if remaining <= 0:
            plan.actions.append(actions.DeleteRun())
            plan.info("Expired", f"deleting: finished more than ttlSecondsAfterFinished={ttl}s ago")
        else:
            plan.soon(remaining)


def _stop(world: model.World, plan: actions.Plan, st: _State, pod: model.PodInfo | None) -> None:
    run, spec = world.run, world.spec
    why = (
        "the AgentRun is being deleted"
        if run.deleting
        else ("spec.cancel is true" if spec.cancel else "spec.suspend is true")
    )
    if pod is not None and not pod.terminated:
        force = world.lease_expired_holder == pod.name
        if not pod.deleting or force:
            plan.actions.append(actions.DeletePod(pod.name, why, force=force))
            plan.info(
                "StoppingWorker", f"deleting worker Pod {pod.name} ({why}); it stops at a step boundary"
            )
        st.message = f"waiting for worker Pod {pod.name} to stop ({why})"
        plan.status = _status(world, st)
        plan.soon(1.0)
        return
    # The worker is gone.
    if run.deleting:
        plan.actions.append(actions.CancelRun("the AgentRun was deleted"))
        plan.done = True
        return
    if spec.cancel:
        plan.actions.append(actions.CancelRun("cancelled (spec.cancel)"))
        st.phase, st.reason, st.message = "Cancelled", "Cancelled", "cancelled (spec.cancel)"
        st.completion_time = phases.iso(world.now)
        plan.status = _status(world, st)
        plan.soon(0)
        return
    if pod is not None and (st.last_end is None or st.last_end.get("attempt") != pod.attempt):
        st.last_end = {"attempt": pod.attempt, "reason": "suspended", "message": "stopped by spec.suspend"}
    st.phase, st.reason, st.message = "Suspended", "Suspended", "suspended (spec.suspend); no worker runs"
    st.next_attempt_at = None
    plan.status = _status(world, st)
    plan.soon(POLL_IDLE)


def _attempt(
    world: model.World,
    plan: actions.Plan,
    st: _State,
    current: int,
    pod: model.PodInfo | None,
    poll_active: float,
    poll_idle: float,
) -> None:
    db = world.db
    assert db is not None
    if current == 0:
        _start(world, plan, st, 1, "first")
        return
    recorded = st.last_end if st.last_end and st.last_end.get("attempt") == current else None

    # Is the current attempt's worker still there?
    if recorded is None:
        if pod is None and world.pod_created_ago is not None and world.pod_created_ago < 5.0:
            plan.status = _status(world, st)  # just created; the watch has not delivered it yet
            plan.soon(0.5)
            return
        if pod is not None and world.lease_expired_holder == pod.name and not pod.terminated:
            plan.actions.append(actions.DeletePod(pod.name, "its Lease expired", force=True))
            plan.warn(
                "LeaseExpired",
                f"the Lease of worker Pod {pod.name} was not renewed for a full lease duration "
                "(hung process or lost node); deleting it and starting the next attempt, which fences it off",
            )
            recorded = _lost(world, plan, st, current, "lease_expired", "the worker's Lease expired")
        elif pod is not None and not pod.terminated:
            # Alive, or draining after a delete/eviction: wait for it (its Lease still protects the run).
            if pod.deleting:
                st.message = f"worker Pod {pod.name} is stopping"
            else:
                running = pod.phase == "Running" or db.status == "running"
                st.phase = "Running" if running or st.phase == "Running" else "Pending"
                st.reason = "AttemptRunning" if running else "AttemptStarting"
                st.message = f"attempt {current} ({pod.name})" + (
                    f" at step {db.current_step}" if db.current_step else ""
                )
            st.next_attempt_at = None
            plan.status = _status(world, st)
            plan.soon(poll_active)
            return

    if recorded is None:
        # The worker ended (or its Pod is gone). Postgres says how far the run got.
        if db.status == "parked":
            pending = world.pending_approval
            if pending is not None:
                st.phase, st.reason = "WaitingApproval", "ApprovalPending"
                st.message = (
                    f"waiting for approval {pending.approval_id}: kubectl annotate ar "
                    f"{world.run.name} agentrun.dev/approve={pending.approval_id}"
                )
                st.next_attempt_at = None
                plan.status = _status(world, st)
                plan.soon(poll_idle)
                return
            reason = "deadline" if _last_expired(world) else "approval"
            _start(world, plan, st, current + 1, reason)
            return
        if pod is not None and pod.exit_code == pods.EXIT_USAGE:
            st.phase, st.reason = "Failed", phases.INVALID_SPEC
            st.message = f"the worker refused its configuration (exit code 2): {pod.message or 'see its log'}"
            plan.warn(phases.INVALID_SPEC, st.message)
            st.completion_time = phases.iso(world.now)
            plan.status = _status(world, st)
            return
        seen = world.last_seen_pod
        if pod is None and seen is not None and (seen.disruption or seen.terminated):
            reason, message = pods.end_reason(seen)  # its last state says why; the object is gone now
        else:
            reason, message = pods.end_reason(pod)
        recorded = _lost(world, plan, st, current, reason, message)

    if recorded.get("reason") == "suspended":
        _start(world, plan, st, current + 1, "resumed")
        return
    if recorded.get("exhausted"):
        st.phase, st.reason = "Failed", phases.ATTEMPTS_EXHAUSTED
        st.message = (
            f"{st.restarts} attempts lost (last: {recorded.get('reason')}: "
            f"{recorded.get('message')}); spec.retry.maxAttempts={world.spec.retry.max_attempts}"
        )
        st.completion_time = phases.iso(world.now)
        st.next_attempt_at = None
        plan.warn(phases.ATTEMPTS_EXHAUSTED, st.message)
        plan.status = _status(world, st)
        return
    due = phases.parse_time(st.next_attempt_at)
    if due is not None and due > world.now:
        st.phase = "Running" if st.phase != "Pending" else st.phase
        st.reason, st.message = (
            "Restarting",
            (
                f"attempt {current} lost ({recorded.get('reason')}); "
                f"attempt {current + 1} at {st.next_attempt_at}"
            ),
        )
        plan.status = _status(world, st)
        plan.soon((due - world.now).total_seconds())
        return
    _start(world, plan, st, current + 1, str(recorded.get("reason") or "other"), lost=True)


def _last_expired(world: model.World) -> bool:
    decided = [a for a in world.approvals if a.status != "pending"]
    if not decided:
        return False
    latest = max(decided, key=lambda a: (a.decided_at is not None, a.decided_at or world.now))
    return latest.status == "expired"


def _lost(
    world: model.World, plan: actions.Plan, st: _State, attempt: int, reason: str, message: str
) -> dict[str, Any]:
    loss = retry.on_loss(world.spec.retry, attempt, reason, message, st.restarts, world.now)
    st.restarts = loss.restarts
    record: dict[str, Any] = {
        "attempt": attempt,
        "reason": reason,
        "message": message,
        "at": phases.iso(world.now),
    }
    if loss.exhausted:
        record["exhausted"] = True
        st.next_attempt_at = None
    else:
        st.next_attempt_at = phases.iso(loss.next_attempt_at) if loss.next_attempt_at != world.now else None
        # Sub-second backoffs round to "now" in RFC 3339; keep the exact instant in the decision instead.
        if loss.next_attempt_at is not None and loss.next_attempt_at <= world.now:
            st.next_attempt_at = None
    st.last_end = record
    plan.actions.append(actions.RecordLoss(attempt, reason, message))
    plan.warn("AttemptLost", f"attempt {attempt} ended before the run finished: {message} ({reason})")
    return record


def _start(
    world: model.World, plan: actions.Plan, st: _State, attempt: int, reason: str, lost: bool = False
) -> None:
    if world.spec.suspend:
        return
    plan.actions.append(actions.CreatePod(attempt, reason, lost_observed=lost))
    plan.info(
        "AttemptStarted", f"attempt {attempt}: Pod {model.pod_name(world.run.name, attempt)} ({reason})"
    )
    st.attempts, st.attempt_reason = attempt, reason
    st.next_attempt_at = None
    if st.start_time is None:
        st.start_time = phases.iso(world.now)
    if st.phase not in {"Running"}:
        st.phase = "Pending" if attempt == 1 else "Running"
    st.reason, st.message = "AttemptStarting", f"attempt {attempt} starting ({reason})"
    plan.status = _status(world, st, new_pod=model.pod_name(world.run.name, attempt))
    plan.soon(world.pod_created_ago or 1.0)


def _status(
    world: model.World, st: _State, *, admitted_now: bool = False, new_pod: str | None = None
) -> dict[str, Any]:
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
    if st.attempt_reason:
        status["attemptReason"] = st.attempt_reason
    if st.last_end:
        status["lastAttemptEnd"] = st.last_end
    if st.next_attempt_at:
        status["nextAttemptAt"] = st.next_attempt_at
    worker_pod = new_pod or (model.pod_name(world.run.name, st.attempts) if st.attempts else None)
    if worker_pod:
        status["workerPod"] = worker_pod
    if db is not None:
        if db.current_step:
            status["currentStep"] = db.current_step
        status["lease"] = {"holder": world.lease_holder or db.holder or "", "epoch": db.lease_epoch}
        status["readOnly"] = read_only
        if db.result is not None:
            status["result"] = phases.summarise_result(db.result)
        if db.error:
            status["error"] = db.error[:4000]
    if pending is not None and st.phase not in phases.FINAL_PHASES:
        status["pendingApproval"] = phases.jsonable(
            {
                "id": pending.approval_id,
                "prompt": pending.prompt,
                "deadline": pending.deadline,
                "escalated": st.escalated,
            }
        )
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
                    }
                ).items()
                if v is not None
            }
            for a in sorted(decided, key=lambda a: (a.decided_at is None, phases.iso(a.decided_at) or ""))
        ]
    if world.effects:
        status["effects"] = {k: int(v) for k, v in world.effects.items()}
    if st.start_time:
        status["startTime"] = st.start_time
    if st.completion_time and st.phase in phases.FINAL_PHASES:
        status["completionTime"] = st.completion_time
    status["conditions"] = phases.conditions(
        world.status.get("conditions"),
        phases.desired_conditions(
            st.phase,
            st.reason,
            st.message,
            admitted=admitted_now or db is not None,
            escalated=st.escalated,
            read_only=read_only,
        ),
        world.run.generation,
        world.now,
    )
    return status


def transition_events(old: Mapping[str, Any], new: Mapping[str, Any] | None) -> list[actions.Event]:
    """One Event per phase change (Warning for Failed)."""
    if not new or old.get("phase") == new.get("phase"):
        return []
    phase = str(new.get("phase"))
    reason = phase
    for cond in new.get("conditions") or ():
        if cond.get("type") == phase and cond.get("status") == "True" and cond.get("reason"):
            reason = str(cond["reason"]) if phase == "Failed" else phase
    message = f"{old.get('phase') or 'New'} -> {phase}: {new.get('message') or ''}".strip()
    return [actions.Event("Warning" if phase == "Failed" else "Normal", reason, message)]
