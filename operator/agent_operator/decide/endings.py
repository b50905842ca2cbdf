"""How a run ends: the outcome Postgres records (final and sticky), its TTL, and stop requests. Pure.

Rule: Succeeded/Failed/Cancelled, once Postgres records them (or the operator decided them: attempt limit,
InvalidSpec), never change again; a stop request (delete, cancel, suspend) deletes the worker Pod (SIGTERM:
it drains at a step boundary), and the run is released only once the Pod is gone — confirmed by a fresh
read, never by the watch cache alone.
"""

from __future__ import annotations

from agent_operator.decide import actions, model, phases, run_status, walk
from agentrun_core import deadline_math, store
from agentrun_core.api import status as api_status


def db_outcome(db: store.Run) -> tuple[str, str, str] | None:
    """(phase, reason, message) of the outcome Postgres records, or None while the run is not final."""
    if db.status == "succeeded":
        return api_status.SUCCEEDED, api_status.SUCCEEDED, "the graph finished"
    if db.status == "failed":
        if db.status_reason in deadline_math.REASONS:  # agent_operator.decide.deadlines: store.expire_run
            return api_status.FAILED, db.status_reason, db.error or db.status_reason
        if db.status_reason == api_status.FORK_EDIT_REFUSED:  # the fork's worker: an edit that does not fit
            return (
                api_status.FAILED,
                api_status.FORK_EDIT_REFUSED,
                db.error or "a fork edit does not fit the state",
            )
        if (
            db.status_reason == api_status.BUDGET_EXCEEDED
        ):  # spec.budget reached and the raise rejected (or expired)
            return (
                api_status.FAILED,
                api_status.BUDGET_EXCEEDED,
                db.error or "the budget was reached and not raised",
            )
        if phases.is_invalid_spec(db.status_reason, db.error):
            return (
                api_status.FAILED,
                api_status.INVALID_SPEC,
                db.error or db.status_reason or "the spec cannot run",
            )
        return api_status.FAILED, api_status.GRAPH_FAILED, db.error or db.status_reason or "the graph failed"
    if db.status == "cancelled":
        return api_status.CANCELLED, api_status.CANCELLED, db.status_reason or "cancelled"
    if db.status == "needs_human":
        return (
            api_status.FAILED,
            api_status.NEEDS_HUMAN,
            (
                db.error
                or db.status_reason
                or "an effect has an unknown outcome that could not be reconciled; see `agentrun ledger`"
            )
            + "; settle it with `kubectl agentrun resolve NAME KEY --sent|--not-sent`",
        )
    return None


def finish(w: walk.Walk, outcome: tuple[str, str, str], pod: model.PodInfo | None) -> None:
    """The run is final: show the outcome, wait for an exiting worker on delete, expire it after its TTL."""
    world, plan, st = w.world, w.plan, w.st
    st.phase, st.reason, st.message = outcome
    st.next_attempt_at = None
    run_status.note_pending_effects(world, st)
    if st.completion_time is None:
        finished_at = world.db.finished_at if world.db is not None else None
        st.completion_time = phases.iso(finished_at or world.now)
    if st.reason in deadline_math.REASONS and pod is not None and pod.alive:
        # Failed by a deadline while its worker ran (fenced already: it can write nothing more): stop it
        # the way a cancel does. A worker inside a long step reaches no step boundary by itself.
        plan.actions.append(actions.DeletePod(pod.name, f"the run failed: {st.reason}"))
        plan.info("StoppingWorker", f"deleting worker Pod {pod.name} ({st.reason})")
    if world.run.deleting:
        # A finished run's worker may still be exiting; the finalizer waits for it.
        if pod is not None and not pod.terminated:
            if not pod.deleting:
                plan.actions.append(actions.DeletePod(pod.name, "the AgentRun is being deleted"))
            plan.soon(1.0)
        else:
            plan.done = True
    w.show()
    ttl = world.spec.ttl_seconds_after_finished
    plan.idle(w.settings.idle_poll_seconds)
    if ttl is not None and not world.run.deleting:
        # One clock: Postgres' finished_at against Postgres' now(); only a finish the operator decided
        # (no finished_at) uses the operator's clock, which wrote that completionTime.
        finished_at = world.db.finished_at if world.db is not None else None
        if finished_at is not None and world.db_now is not None:
            completed, now = finished_at, world.db_now
        else:
            completed, now = phases.parse_time(st.completion_time) or world.now, world.now
        remaining = (completed - now).total_seconds() + ttl
        if remaining <= 0 and world.status.get("phase") == st.phase:
            plan.actions.append(actions.DeleteRun())
            plan.info("Expired", f"deleting: finished more than ttlSecondsAfterFinished={ttl}s ago")
        else:
            # The final status is written before the delete, in a round of its own: a delete that is
            # refused or fails (the round stops at it) never keeps the run from showing how it ended.
            plan.soon(max(0.0, remaining))


def stop(w: walk.Walk, pod: model.PodInfo | None) -> None:
    """Delete, cancel or suspend: stop the worker first; release, cancel or suspend once it is gone."""
    world, plan, st = w.world, w.plan, w.st
    run, spec = world.run, world.spec
    why = (
        "the AgentRun is being deleted"
        if run.deleting
        else ("spec.cancel is true" if spec.cancel else "spec.suspend is true")
    )
    if pod is None and st.attempts and not world.live:
        w.confirm("the worker Pod is missing from the watch cache")
        return
    if pod is not None and not pod.terminated:
        force = world.lease_expired_holder == pod.name
        if force and not world.live:
            w.confirm(f"the Lease of worker Pod {pod.name} looks expired")
            return
        if not pod.deleting or force:
            plan.actions.append(actions.DeletePod(pod.name, why, force=force))
            plan.info(
                "StoppingWorker", f"deleting worker Pod {pod.name} ({why}); it stops at a step boundary"
            )
        st.message = f"waiting for worker Pod {pod.name} to stop ({why})"
        w.show()
        plan.soon(1.0)
        return
    # The worker is gone.
    if run.deleting:
        plan.actions.append(actions.CancelRun("the AgentRun was deleted"))
        plan.done = True
        return
    if spec.cancel:
        plan.actions.append(actions.CancelRun("cancelled (spec.cancel)"))
        st.phase, st.reason, st.message = (
            api_status.CANCELLED,
            api_status.CANCELLED,
            "cancelled (spec.cancel)",
        )
        run_status.note_pending_effects(world, st)
        st.completion_time = phases.iso(world.now)
        w.show()
        plan.soon(0)
        return
    if pod is not None and (st.last_end is None or st.last_end.get("attempt") != pod.attempt):
        st.last_end = {"attempt": pod.attempt, "reason": "suspended", "message": "stopped by spec.suspend"}
    st.phase, st.reason, st.message = (
        api_status.SUSPENDED,
        api_status.SUSPENDED,
        "suspended (spec.suspend); no worker runs",
    )
    st.next_attempt_at = None
    w.show()
    plan.idle(w.settings.idle_poll_seconds)  # resumed by a spec change: a watch event
