"""Attempts of a run that is not finished and not stopped: start, watch, judge lost, start the next. Pure.

Rule: an attempt is a worker Pod holding the run's Lease. The current one is watched while it is alive; when
it ended without finishing or parking the run it is recorded *lost* (reason, backoff, attempt limit:
``agent_operator.decide.retry``) and the next one starts. A Pod that looks alive while its Lease is no longer
renewed
is deleted (force) and replaced: the Lease is the backstop for hangs and lost nodes. "Gone" and "expired"
rest on a fresh read (``Walk.confirm``), never on the watch cache alone.
"""

from __future__ import annotations

from typing import Any

from agent_operator.decide import actions, imagepin, model, phases, pods, retry, run_status, steering, walk
from agentrun_core.api import meta, protocol
from agentrun_core.api import status as api_status


def attempt(w: walk.Walk, current: int, pod: model.PodInfo | None) -> None:
    """Start the first attempt, watch the current one, or start the next once the current one ended."""
    if current == 0:
        start(w, 1, "first")
        return
    st = w.st
    recorded = st.last_end if st.last_end and st.last_end.get("attempt") == current else None
    if recorded is None:
        recorded = _check_worker(w, current, pod)
        if recorded is None:
            return  # the worker is (or may be) still there: the pass is decided
    _next(w, current, pod, recorded)


def _check_worker(w: walk.Walk, current: int, pod: model.PodInfo | None) -> dict[str, Any] | None:
    """Is the current attempt's worker still there? None: yes, or not known yet (the plan says what to do);
    else the record of the attempt's end."""
    world, plan = w.world, w.plan
    grace = w.settings.pod_cache_grace_seconds
    if pod is None and world.pod_created_ago is not None and world.pod_created_ago < grace:
        w.show()  # just created; the watch has not delivered it yet
        plan.soon(min(0.5, grace - world.pod_created_ago))
        return None
    if pod is None and world.parked_waiting:
        # Waiting needs no Pod (the parked attempt's is deleted after the retention,
        # agent_operator.decide.cleanup),
        # so no fresh read of it at every look: nothing starts until the decision, a round that reads fresh.
        return _ended(w, current, None)
    if pod is None and not world.live:
        missing = protocol.pod_name(world.run.name, current)
        w.confirm(f"worker Pod {missing} is not in the watch cache")
        return None
    expired = pod is not None and world.lease_expired_holder == pod.name and not pod.terminated
    if expired and not world.live:
        assert pod is not None
        w.confirm(f"the Lease of worker Pod {pod.name} looks expired")
        return None
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
        return _lost(w, current, "lease_lost", "the worker's Lease lapsed in an API-server outage")
    if pod is not None and expired:
        plan.actions.append(actions.DeletePod(pod.name, "its Lease expired", force=True))
        # We watched it unchanged for a full duration: free it (by CAS on that version) so the next
        # worker takes it at once, not after watching it for another full duration of its own.
        plan.actions.append(actions.FreeLapsedLease(pod.name))
        plan.warn(
            "LeaseExpired",
            f"the Lease of worker Pod {pod.name} was not renewed for a full lease duration "
            "(hung process or lost node); deleting it and starting the next attempt, which fences it off",
        )
        return _lost(w, current, "lease_expired", "the worker's Lease expired")
    if pod is not None and not pod.terminated:
        _watch(w, current, pod)
        return None
    return _ended(w, current, pod)


def _watch(w: walk.Walk, current: int, pod: model.PodInfo) -> None:
    """The worker is alive, or draining after a delete/eviction: wait for it (its Lease protects the run)."""
    st, db = w.st, w.world.db
    assert db is not None
    if pod.deleting:
        st.message = f"worker Pod {pod.name} is stopping"
    elif _unrunnable(w, pod):
        return
    else:
        running = pod.phase == api_status.POD_RUNNING or db.status == "running"
        st.phase = api_status.RUNNING if running or st.phase == api_status.RUNNING else api_status.PENDING
        st.reason = "AttemptRunning" if running else "AttemptStarting"
        st.message = f"attempt {current} ({pod.name})" + (
            f" at step {db.current_step}" if db.current_step else ""
        )
    st.next_attempt_at = None
    w.show()
    w.plan.soon(w.settings.poll_seconds)


def _ended(w: walk.Walk, current: int, pod: model.PodInfo | None) -> dict[str, Any] | None:
    """The worker ended (or its Pod is gone): Postgres says how far the run got. None: the pass is decided
    (parked, or the worker refused its configuration); else the record of the lost attempt."""
    world, plan, st = w.world, w.plan, w.st
    db = world.db
    assert db is not None
    if db.status == "parked":
        pending = world.pending_approval
        if pending is not None:
            st.phase, st.reason = api_status.WAITING_APPROVAL, api_status.APPROVAL_PENDING
            st.message = (
                f"waiting for approval {pending.approval_id}: kubectl annotate ar "
                f"{world.run.name} {meta.APPROVE}={pending.approval_id}"
            )
            st.next_attempt_at = None
            w.show()
            plan.idle(w.settings.idle_poll_seconds)  # the decision arrives as a watch event
            return None
        start(w, current + 1, "deadline" if _last_expired(world) else "approval")
        return None
    if pod is not None and pod.exit_code == protocol.EXIT_USAGE:
        st.phase, st.reason = api_status.FAILED, api_status.INVALID_SPEC
        st.message = f"the worker refused its configuration (exit code 2): {pod.message or 'see its log'}"
        plan.warn(api_status.INVALID_SPEC, st.message)
        st.completion_time = phases.iso(world.now)
        w.show()
        return None
    seen = world.last_seen_pod
    if pod is None and seen is not None and (seen.disruption or seen.terminated):
        reason, message = pods.end_reason(seen)  # its last state says why; the object is gone now
    else:
        reason, message = pods.end_reason(pod)
    return _lost(w, current, reason, message)


def _next(w: walk.Walk, current: int, pod: model.PodInfo | None, recorded: dict[str, Any]) -> None:
    """The current attempt ended as ``recorded``: resume, fail at the attempt limit, back off, or start."""
    world, plan, st = w.world, w.plan, w.st
    if recorded.get("reason") == "suspended":
        start(w, current + 1, "resumed")
        return
    if recorded.get("reason") in steering.REOPEN_REASONS.values():
        if pod is not None and not pod.terminated:  # the stopped attempt's worker is still exiting
            w.show()
            plan.soon(1.0)
            return
        start(w, current + 1, str(recorded["reason"]))
        return
    if recorded.get("exhausted"):
        st.phase, st.reason = api_status.FAILED, api_status.ATTEMPTS_EXHAUSTED
        st.message = (
            f"{st.restarts} attempts lost (last: {recorded.get('reason')}: "
            f"{recorded.get('message')}); spec.retry.maxAttempts={world.spec.retry.max_attempts}"
        )
        run_status.note_pending_effects(world, st)
        st.completion_time = phases.iso(world.now)
        st.next_attempt_at = None
        plan.warn(api_status.ATTEMPTS_EXHAUSTED, st.message)
        w.show()
        return
    due = phases.parse_time(st.next_attempt_at)
    if due is not None and due > world.now:
        st.phase = api_status.RUNNING if st.phase != api_status.PENDING else st.phase
        if recorded.get("reason") == pods.INCOMPATIBLE:
            st.reason = "WorkerIncompatible"
            st.message = f"{recorded.get('message')}; attempt {current + 1} at {st.next_attempt_at}"
            w.show()
            plan.soon((due - world.now).total_seconds())
            return
        st.reason, st.message = (
            "Restarting",
            (
                f"attempt {current} lost ({recorded.get('reason')}); "
                f"attempt {current + 1} at {st.next_attempt_at}"
            ),
        )
        w.show()
        plan.soon((due - world.now).total_seconds())
        return
    reason = str(recorded.get("reason") or "other")
    gone = pod or world.last_seen_pod
    # A Lease that expired while its Pod looked alive: the worker hung, or its node was cut off. The next
    # Pod prefers another node (pods.manifest); its first step need not wait for the node controller.
    avoid = gone.node if reason == "lease_expired" and gone is not None else None
    start(w, current + 1, reason, lost=True, avoid_node=avoid)


def _unrunnable(w: walk.Walk, pod: model.PodInfo) -> bool:
    """Fail the run when its attempt could not start for ``start_timeout`` (True: the plan is made)."""
    world = w.world
    timeout = w.settings.start_timeout_seconds
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
    w.plan.actions.append(actions.DeletePod(pod.name, message))
    w.fail(reason, f"{message}; gave up after {timeout:.0f}s")
    return True


def _last_expired(world: model.World) -> bool:
    decided = [a for a in world.approvals if a.status != "pending"]
    if not decided:
        return False
    latest = max(decided, key=lambda a: (a.decided_at is not None, a.decided_at or world.now))
    return latest.status == "expired"


def _lost(w: walk.Walk, attempt: int, reason: str, message: str) -> dict[str, Any]:
    """Record ``attempt`` as lost: its end record, restart count and backoff
    (``agent_operator.decide.retry``)."""
    world, plan, st = w.world, w.plan, w.st
    record: dict[str, Any] = {
        "attempt": attempt,
        "reason": reason,
        "message": message,
        "at": phases.iso(world.now),
    }
    if reason == pods.INCOMPATIBLE:
        # Waiting for an upgrade to finish (or for a newer image): counted apart, for the backoff only.
        before = st.last_end if st.last_end and st.last_end.get("reason") == pods.INCOMPATIBLE else {}
        waits = int(before.get("incompatibleWaits") or 0) + 1
        record["incompatibleWaits"] = waits
        record["controlPlane"] = True
        loss = retry.on_incompatible(world.spec.retry, st.restarts, world.now, waits)
    elif reason in pods.CONTROL_PLANE_REASONS and st.control_plane_losses < pods.CONTROL_PLANE_LOSS_LIMIT:
        # The control plane lost this attempt, not the run: maxAttempts is not consumed (own limit).
        st.control_plane_losses += 1
        record["controlPlane"] = True
        loss = retry.on_control_plane_loss(world.spec.retry, st.restarts, world.now)
    else:
        loss = retry.on_loss(world.spec.retry, st.restarts, world.now)
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
    if reason == pods.INCOMPATIBLE:
        plan.warn(
            "WorkerIncompatible",
            f"attempt {attempt}: {message}; the run waits and tries again at {st.next_attempt_at or 'once'}",
        )
    else:
        plan.warn("AttemptLost", f"attempt {attempt} ended before the run finished: {message} ({reason})")
    return record


def start(w: walk.Walk, attempt: int, reason: str, lost: bool = False, avoid_node: str | None = None) -> None:
    """Start ``attempt`` (its Pod, with the run's pinned image), or queue it when the namespace is full."""
    world, plan, st = w.world, w.plan, w.st
    if world.spec.suspend:
        return
    refused = world.pod_refused
    if refused is not None and refused[0] == attempt:
        _, code, why, seconds = refused
        # 400/422: the Pod is invalid and stays so; others (403: missing ServiceAccount or PriorityClass,
        # quota) may heal, so they get the start timeout.
        if code in (400, 422) or seconds >= w.settings.start_timeout_seconds:
            w.fail("PodRejected", f"the API server refused the worker Pod of attempt {attempt}: {why}")
            return
    if not world.start_allowed:
        # No free worker slot (agent_operator.observe.throttle: the namespace's, or the spec.concurrency
        # key's): wait
        # in its queue, in order.
        plan.queued = True
        if st.phase not in {api_status.RUNNING}:
            st.phase = api_status.PENDING
        st.reason = "Queued"
        wait = world.start_wait or "the namespace is at its limit of live worker Pods"
        st.message = f"attempt {attempt} queued: {wait} ({reason})"
        w.show()
        return
    pin = imagepin.for_attempt(world, plan, st.image)
    st.image = pin  # the attempt runs the pinned image, never a spec changed since admission
    plan.actions.append(
        actions.CreatePod(
            attempt,
            reason,
            lost_observed=lost,
            image=imagepin.image_for_attempt(pin),
            avoid_node=avoid_node,
        )
    )
    pod = protocol.pod_name(world.run.name, attempt)
    plan.info("AttemptStarted", f"attempt {attempt}: Pod {pod} ({reason})")
    st.attempts, st.attempt_reason = attempt, reason
    st.next_attempt_at = None
    if st.start_time is None:
        st.start_time = phases.iso(world.now)
    if st.phase not in {api_status.RUNNING}:
        st.phase = api_status.PENDING if attempt == 1 else api_status.RUNNING
    st.reason, st.message = "AttemptStarting", f"attempt {attempt} starting ({reason})"
    w.show(new_pod=pod)
    # Soon: the new Pod should show in the watch within a moment (``pod_created_ago`` here would be the
    # *previous* attempt's age, which could put the next look minutes away).
    plan.soon(1.0)
