"""One reconcile of an AgentRun: ``decide(world) -> Plan``. Pure; the runner carries the plan out.

Order of concerns, each step able to end the reconcile:
1. finalizer, then the admission row (nothing else exists for a run before its row does);
2. decision annotations and approval deadlines (Postgres decides who wins); a human steering a stopped
   run — resolve an effect, retry (``steering``); a run Postgres shows reopened starts over with a fresh
   attempt budget from its checkpoint;
3. the outcome recorded in Postgres (Succeeded/Failed/Cancelled are final and sticky), TTL;
4. stop requests — delete, cancel, suspend: the worker Pod is deleted (SIGTERM: it drains at a step
   boundary), and the run is released only once the Pod is gone;
5. the attempt: start the first, watch the current one, and when it ended without finishing or parking the
   run, start the next one (reason, backoff, attempt limit). A Pod that looks alive while its Lease is no
   longer renewed is deleted (force) and replaced: the Lease is the backstop for hangs and lost nodes.

No destructive step rests on the watch cache alone: "the Pod is gone", "its Lease expired" and the
force-delete that follows are first confirmed by a fresh read (``plan.confirm``: the runner reads the Pod
and the Lease and decides again with ``world.live``). A watch that lags or stalls makes things
*unknown*, never *gone*.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from agent_operator import actions, approvals, edits, forks, imagepin, model, phases, pods, retry, steering
from agentrun_core import store

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
    control_plane_losses: int = 0
    reopened: int = 0  # agentrun_runs.reopened as last acted on (a higher one in Postgres: reopen now)
    observed_retry_generation: int = 0  # spec.retryGeneration last acted on (applied, waited or refused)
    image: dict[str, Any] | None = None  # status.image: the run's pinned image (agent_operator.imagepin)


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
        control_plane_losses=int(status.get("controlPlaneLosses") or 0),
        reopened=int(status.get("reopened") or 0),
        observed_retry_generation=int(status.get("observedRetryGeneration") or 0),
        image=dict(status["image"]) if status.get("image") else None,
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
    st = _initial(world.status)
    plan = _decide(world, st, poll_active, poll_idle)
    imagepin.keep(world, plan, st.image)  # runs keep their code: the pin in status, a new digest recorded
    return plan


def _decide(world: model.World, st: _State, poll_active: float, poll_idle: float) -> actions.Plan:
    plan = actions.Plan(requeue_after=poll_active)
    run, spec, db = world.run, world.spec, world.db

    # 1. Finalizer first, then the admission row.
    if model.FINALIZER not in run.finalizers and not run.deleting:
        plan.actions.append(actions.AddFinalizer())
    if db is None:
        if run.deleting:
            plan.done = True  # never admitted: nothing ran, nothing to release
            return plan
        problem, reason = phases.input_problem(spec.input), phases.INVALID_SPEC
        fork = world.fork_source
        if problem is None and fork is not None and fork.problem is not None:
            # A fork whose source, checkpoint, step or edits do not exist: refused before anything is copied.
            problem, reason = f"fork refused: {fork.problem}", forks.FORK_REFUSED
        if problem is not None or st.phase == "Failed":
            # Never admitted: a spec that cannot run fails here, contained to this run.
            if st.phase != "Failed":
                plan.warn(reason, problem or "")
            st.phase, st.reason = "Failed", (reason if problem else st.reason or reason)
            st.message = problem or st.message
            st.completion_time = st.completion_time or phases.iso(world.now)
            plan.status = _status(world, st)
            plan.soon(poll_idle)
            return plan
        if spec.fork_of is not None and fork is not None and fork.checkpoint_id and fork.run_id:
            plan.actions.append(actions.Admit(fork_source=fork.run_id, fork_checkpoint=fork.checkpoint_id))
            plan.info(
                "Forked",
                f"admitted as a fork of {spec.fork_of.run} at checkpoint {fork.checkpoint_id}"
                + (f" (edits: {', '.join(sorted(spec.fork_of.set))})" if spec.fork_of.set else ""),
            )
        elif spec.fork_of is not None:
            plan.soon(1.0)  # the source was not resolved in this reconcile (not looked up): look again
            return plan
        else:
            plan.actions.append(actions.Admit())
            plan.info("Admitted", f"admission row written for graph {spec.graph}")
        st.phase, st.reason, st.message = "Pending", "Admitted", "admitted; starting the first attempt"
        plan.status = _status(world, st, admitted_now=True)
        plan.soon(0)
        return plan

    current = max([st.attempts, *world.pods.keys()])
    st.attempts = current
    pod = world.pods.get(current)
    _reopened(world, plan, st, current)
    finished = db.status in model.DB_FINAL or st.phase in phases.FINAL_PHASES

    # 2. Approvals: annotations first (a human beats the clock within one reconcile), then the deadline.
    deciding = approvals.from_annotations(world, plan, finished)
    if deciding:
        plan.soon(0)  # the decision's outcome shows in Postgres; look again right away
    elif not finished and not run.deleting and not spec.cancel:
        st.escalated = approvals.deadline(world, plan, st.escalated)
        if any(isinstance(a, actions.Decide) for a in plan.actions):
            # Postgres's clock has the last word on the deadline: look again soon, not in a tight loop.
            plan.soon(1.0)
    if not steering.retried_since_expiry(world):  # a retry overrides an onTimeout: cancel that stopped it
        approvals.expiry_followups(world, plan)

    # 2b. Humans steering a stopped run (resolve, retry); Postgres applies each exactly once.
    stopped = finished or db.status == "needs_human"
    steering_planned = steering.resolve(world, plan)
    if not run.deleting and steering.retry(world, plan, stopped):
        steering_planned = True
    if stopped and world.spec.retry_generation > db.retry_generation:
        st.observed_retry_generation = world.spec.retry_generation
    if steering_planned:
        # Status stays as it is until Postgres shows the outcome: a status written now would carry the old
        # outcome with the new generation, and `agentrun wait` would take it for the retried run's.
        plan.soon(0)
        return plan

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
    if plan.queued:
        # Woken when a slot frees (agent_operator.throttle); polling a queue of 1,000 runs at the active
        # poll would cost the operator what idle runs used to. The idle poll is only the fallback.
        plan.soon(poll_idle)
    return plan


def _reopened(world: model.World, plan: actions.Plan, st: _State, current: int) -> None:
    """A human reopened the run (Postgres ``reopened`` grew): it is no longer final; the attempt after
    ``current`` starts once its worker is gone, with a fresh budget of lost attempts."""
    db = world.db
    assert db is not None
    if db.reopened <= st.reopened:
        return
    st.reopened = db.reopened
    reason, message = steering.reopen_reason(world)
    st.phase, st.reason, st.message = "Running", "Reopened", message
    st.completion_time = st.next_attempt_at = None
    st.restarts = 0
    st.last_end = {"attempt": current, "reason": reason, "message": message, "at": phases.iso(world.now)}
    plan.info("Reopened", message)


def _db_outcome(db: store.Run) -> tuple[str, str, str] | None:
    if db.status == "succeeded":
        return "Succeeded", "Succeeded", "the graph finished"
    if db.status == "failed":
        if db.status_reason == forks.FORK_EDIT_REFUSED:  # the fork's worker: an edit that does not fit
            return "Failed", forks.FORK_EDIT_REFUSED, db.error or "a fork edit does not fit the state"
        if phases.is_invalid_spec(db.status_reason, db.error):
            return "Failed", phases.INVALID_SPEC, db.error or db.status_reason or "the spec cannot run"
        return "Failed", phases.GRAPH_FAILED, db.error or db.status_reason or "the graph failed"
    if db.status == "cancelled":
        return "Cancelled", "Cancelled", db.status_reason or "cancelled"
    if db.status == "needs_human":
        return (
            "Failed",
            phases.NEEDS_HUMAN,
            (
                db.error
                or db.status_reason
                or "an effect has an unknown outcome that could not be reconciled; see `agentrun ledger`"
            )
            + "; settle it with `kubectl agentrun resolve NAME KEY --sent|--not-sent`",
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
    _note_pending_effects(world, st)
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
        # One clock: Postgres' finished_at against Postgres' now(); only a finish the operator decided
        # (no finished_at) uses the operator's clock, which wrote that completionTime.
        finished_at = world.db.finished_at if world.db is not None else None
        if finished_at is not None and world.db_now is not None:
            completed, now = finished_at, world.db_now
        else:
            completed, now = phases.parse_time(st.completion_time) or world.now, world.now
        remaining = (completed - now).total_seconds() + ttl
        if remaining <= 0:
            plan.actions.append(actions.DeleteRun())
            plan.info("Expired", f"deleting: finished more than ttlSecondsAfterFinished={ttl}s ago")
        else:
            plan.soon(remaining)


def _note_pending_effects(world: model.World, st: _State) -> None:
    """A run that stops with effects of unknown outcome says so in its message, from its first final status
    on (a reader who sees the final phase must see the pending effects with it)."""
    # An outcome the operator decided comes back from status with last time's note: replace it, so the
    # count is today's (a human may have resolved some) and the note is never repeated.
    st.message = _PENDING_NOTE.sub("", st.message or "")
    pending_effects = int(world.effects.get("pending") or 0)
    if pending_effects and st.phase != "Succeeded":
        # Surfaced, never guessed: the next attempt (after `agentrun retry`) reconciles them, or a human
        # resolves them (`agentrun resolve NAME KEY --sent|--not-sent`); `agentrun ledger NAME` lists them.
        st.message = (
            f"{st.message}; {pending_effects} effect(s) left pending (outcome unknown): "
            f"see `agentrun ledger {world.run.name}`"
        )


_PENDING_NOTE = re.compile(
    r"; \d+ effect\(s\) left pending \(outcome unknown\): see `agentrun ledger [^`]*`$"
)


def _stop(world: model.World, plan: actions.Plan, st: _State, pod: model.PodInfo | None) -> None:
    run, spec = world.run, world.spec
    why = (
        "the AgentRun is being deleted"
        if run.deleting
        else ("spec.cancel is true" if spec.cancel else "spec.suspend is true")
    )
    if pod is None and st.attempts and not world.live:
        _confirm(world, plan, st, "the worker Pod is missing from the watch cache")
        return
    if pod is not None and not pod.terminated:
        force = world.lease_expired_holder == pod.name
        if force and not world.live:
            _confirm(world, plan, st, f"the Lease of worker Pod {pod.name} looks expired")
            return
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
        _note_pending_effects(world, st)
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
        grace = world.pod_cache_grace
        if pod is None and world.pod_created_ago is not None and world.pod_created_ago < grace:
            plan.status = _status(world, st)  # just created; the watch has not delivered it yet
            plan.soon(min(0.5, grace - world.pod_created_ago))
            return
        if pod is None and not world.live:
            missing = model.pod_name(world.run.name, current)
            _confirm(world, plan, st, f"worker Pod {missing} is not in the watch cache")
            return
        expired = pod is not None and world.lease_expired_holder == pod.name and not pod.terminated
        if expired and not world.live:
            assert pod is not None
            _confirm(world, plan, st, f"the Lease of worker Pod {pod.name} looks expired")
            return
        if pod is not None and expired and world.lease_lapsed_in_outage:
            # The worker could not renew because the API server was unreachable (we could not read it
            # either): the control plane lost this attempt, not the run (pods.CONTROL_PLANE_REASONS).
            why = "its Lease lapsed in an API-server outage"
            plan.actions.append(actions.DeletePod(pod.name, why, force=True))
            plan.warn(
                "LeaseExpired",
                f"the Lease of worker Pod {pod.name} lapsed while the API server was unreachable; deleting "
                "it and starting the next attempt (a control-plane loss: not counted against maxAttempts)",
            )
            recorded = _lost(
                world, plan, st, current, "lease_lost", "the worker's Lease lapsed in an API-server outage"
            )
        elif pod is not None and expired:
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
            elif _unrunnable(world, plan, st, pod):
                return
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
    if recorded.get("reason") in steering.REOPEN_REASONS.values():
        if pod is not None and not pod.terminated:  # the stopped attempt's worker is still exiting
            plan.status = _status(world, st)
            plan.soon(1.0)
            return
        _start(world, plan, st, current + 1, str(recorded["reason"]))
        return
    if recorded.get("exhausted"):
        st.phase, st.reason = "Failed", phases.ATTEMPTS_EXHAUSTED
        st.message = (
            f"{st.restarts} attempts lost (last: {recorded.get('reason')}: "
            f"{recorded.get('message')}); spec.retry.maxAttempts={world.spec.retry.max_attempts}"
        )
        _note_pending_effects(world, st)
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


def _unrunnable(world: model.World, plan: actions.Plan, st: _State, pod: model.PodInfo) -> bool:
    """Fail the run when its attempt could not start for ``start_timeout`` (True: the plan is made)."""
    timeout = world.start_timeout
    if pod.blocked is not None and world.blocked_for is not None and world.blocked_for >= timeout:
        reason, why = pod.blocked
        message = f"worker Pod {pod.name} cannot start ({reason}): {why or 'no detail'}"
    elif world.unclaimed_for is not None and world.unclaimed_for >= timeout:
        reason = "LeaseNeverTaken"
        message = (
            f"worker Pod {pod.name} ran for {world.unclaimed_for:.0f}s without taking the run's Lease "
            "(is spec.worker.command an agentrun worker?)"
        )
    else:
        return False
    plan.actions.append(actions.DeletePod(pod.name, message))
    _fail(world, plan, st, reason, f"{message}; gave up after {timeout:.0f}s")
    return True


def _fail(world: model.World, plan: actions.Plan, st: _State, reason: str, message: str) -> None:
    st.phase, st.reason, st.message = "Failed", reason, message
    st.completion_time = phases.iso(world.now)
    st.next_attempt_at = None
    plan.warn(reason, message)
    plan.status = _status(world, st)


def _confirm(world: model.World, plan: actions.Plan, st: _State, why: str) -> None:
    """Ask the runner for a fresh read of the Pod and the Lease before acting on ``why``."""
    plan.confirm = why
    plan.status = _status(world, st)
    plan.soon(0)


def _last_expired(world: model.World) -> bool:
    decided = [a for a in world.approvals if a.status != "pending"]
    if not decided:
        return False
    latest = max(decided, key=lambda a: (a.decided_at is not None, a.decided_at or world.now))
    return latest.status == "expired"


def _lost(
    world: model.World, plan: actions.Plan, st: _State, attempt: int, reason: str, message: str
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "attempt": attempt,
        "reason": reason,
        "message": message,
        "at": phases.iso(world.now),
    }
    if reason in pods.CONTROL_PLANE_REASONS and st.control_plane_losses < pods.CONTROL_PLANE_LOSS_LIMIT:
        # The control plane lost this attempt, not the run: maxAttempts is not consumed (own limit).
        st.control_plane_losses += 1
        record["controlPlane"] = True
        loss = retry.on_control_plane_loss(world.spec.retry, attempt, reason, message, st.restarts, world.now)
    else:
        loss = retry.on_loss(world.spec.retry, attempt, reason, message, st.restarts, world.now)
    st.restarts = loss.restarts
    if loss.exhausted:
        record["exhausted"] = True
        st.next_attempt_at = None
    else:
        st.next_attempt_at = phases.iso(loss.next_attempt_at) if loss.next_attempt_at != world.now else None
        # Sub-second backoffs round to "now" in RFC 3339; keep the exact instant in the decision instead.
        if loss.next_attempt_at is not None and loss.next_attempt_at <= world.now:
            st.next_attempt_at = None
    st.last_end = record
    plan.actions.append(actions.RecordLoss(attempt, reason, message, bool(record.get("controlPlane"))))
    plan.warn("AttemptLost", f"attempt {attempt} ended before the run finished: {message} ({reason})")
    return record


def _start(
    world: model.World, plan: actions.Plan, st: _State, attempt: int, reason: str, lost: bool = False
) -> None:
    if world.spec.suspend:
        return
    refused = world.pod_refused
    if refused is not None and refused[0] == attempt:
        _, code, why, seconds = refused
        # 400/422: the Pod is invalid and stays so; others (403: missing ServiceAccount or PriorityClass,
        # quota) may heal, so they get the start timeout.
        if code in (400, 422) or seconds >= world.start_timeout:
            why = f"the API server refused the worker Pod of attempt {attempt}: {why}"
            _fail(world, plan, st, "PodRejected", why)
            return
    if not world.start_allowed:
        # The namespace has no free worker slot (agent_operator.throttle): wait in its queue, in order.
        plan.queued = True
        if st.phase not in {"Running"}:
            st.phase = "Pending"
        st.reason = "Queued"
        st.message = f"attempt {attempt} queued: the namespace is at its limit of live worker Pods ({reason})"
        plan.status = _status(world, st)
        return
    pin = imagepin.for_attempt(world, plan, st.image)
    st.image = pin  # the attempt runs the pinned image, never a spec changed since admission
    plan.actions.append(
        actions.CreatePod(attempt, reason, lost_observed=lost, image=imagepin.image_for_attempt(pin))
    )
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
    # Soon: the new Pod should show in the watch within a moment (``pod_created_ago`` here would be the
    # *previous* attempt's age, which could put the next look minutes away).
    plan.soon(1.0)


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
    if st.control_plane_losses:
        status["controlPlaneLosses"] = st.control_plane_losses
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
                        **edits.status_fields(a.payload),
                    }
                ).items()
                if v is not None
            }
            for a in sorted(decided, key=lambda a: (a.decided_at is None, phases.iso(a.decided_at) or ""))
        ]
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
    if st.completion_time and st.phase in phases.FINAL_PHASES:
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
    desired.update(_policy_condition(world))
    desired.update(_notify_condition(world))
    status["conditions"] = phases.conditions(
        world.status.get("conditions"), desired, world.run.generation, world.now
    )
    return status


def _policy_condition(world: model.World) -> dict[str, tuple[bool, str, str]]:
    """ApprovalPolicyMissing: True while decisions are refused for want of the admission policies."""
    if world.admission_ok is False:
        return {"ApprovalPolicyMissing": (True, "AdmissionPoliciesAbsent", approvals.POLICY_MISSING)}
    had = any(c.get("type") == "ApprovalPolicyMissing" for c in world.status.get("conditions") or ())
    if had and world.admission_ok:
        return {"ApprovalPolicyMissing": (False, "AdmissionPoliciesInstalled", "policies installed")}
    return {}


def _notify_condition(world: model.World) -> dict[str, tuple[bool, str, str]]:
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
            reason = str(cond["reason"]) if phase == "Failed" else phase
    message = f"{old.get('phase') or 'New'} -> {phase}: {new.get('message') or ''}".strip()
    return [actions.Event("Warning" if phase == "Failed" else "Normal", reason, message)]
