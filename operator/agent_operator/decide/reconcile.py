"""One reconcile of an AgentRun: ``decide(world, settings) -> Plan``. Pure; the runner carries the plan out.

Order of concerns, each step able to end the pass:
1. finalizer, then the admission row (nothing else exists for a run before its row does) — written once
   only: a run whose status shows it was admitted and whose row is gone is never admitted again
   (``LedgerMissing``);
2. decision annotations and approval deadlines (Postgres decides who wins); a human steering a stopped
   run — resolve an effect, retry (``steering``); a run Postgres shows reopened starts over with a fresh
   attempt budget from its checkpoint;
3. the outcome recorded in Postgres (Succeeded/Failed/Cancelled are final and sticky), TTL (``endings``);
4. stop requests — delete, cancel, suspend (``endings.stop``);
5. deadlines: past one, the run fails (``deadlines``); else the pass asks to be woken at it;
6. the attempt: start the first, watch the current one, start the next (``attempts``).

The steps change the decided ``walk.State`` and say whether status is written; ``decide`` builds that
status once, at the end of the pass (``run_status.build``). The settings (polls, the Pod cache grace, the
start timeout) reach the pass as an argument: nothing here reads a constant in their place.

No destructive step rests on the watch cache alone: "the Pod is gone", "its Lease expired" and the
force-delete that follows are first confirmed by a fresh read (``plan.confirm``: the runner reads the Pod
and the Lease and decides again with ``world.live``). A watch that lags or stalls makes things
*unknown*, never *gone*.
"""

from __future__ import annotations

from agent_operator import settings as settings_
from agent_operator.decide import (
    actions,
    approvals,
    attempts,
    deadlines,
    endings,
    imagepin,
    model,
    phases,
    run_status,
    steering,
    walk,
)
from agentrun_core.api import meta
from agentrun_core.api import status as api_status

DEFAULTS = settings_.ReconcileSettings()


def decide(world: model.World, settings: settings_.ReconcileSettings = DEFAULTS) -> actions.Plan:
    w = walk.Walk(
        world, settings, actions.Plan(requeue_after=settings.poll_seconds), walk.initial(world.status)
    )
    _walk(w)
    # Runs keep their code: the pin in the status written, a digest just reported recorded once.
    pin, learned = imagepin.keep(world, w.plan, w.st.image)
    if w.write:
        w.plan.status = run_status.build(
            world, w.st, admitted_now=w.admitted_now, new_pod=w.new_pod, image=pin
        )
    elif learned:
        w.plan.status = {**world.status, "image": pin}  # a status write of its own for the new digest
    return w.plan


# Conditions True while a run waits on something no watch of the run reports (the cluster's admission
# policies; a notification receiver or its Secret): only a look notices it is back, so no stretching.
_POLLED_CONDITIONS = frozenset({"ApprovalPolicyMissing", "NotificationFailed"})


def quiet(world: model.World, plan: actions.Plan) -> bool:
    """A round of a run that waits (``Plan.idle``) and changed nothing: no action, no Event, its status as it
    was, and no problem only a look can see go away. The runner counts these in a row to stretch the idle
    look (``Plan.stretch_idle``). Deleting a finished Pod (``cleanup``) does not count as a change: the run
    waits as before, and the Pod's deletion wakes its loop anyway (a watch event); otherwise every run
    whose Pod went after the retention would start over at the shortest look."""
    housekeeping = all(isinstance(a, actions.CleanupPod) for a in plan.actions)
    if plan.idle_after is None or not housekeeping or plan.events or plan.queued:
        return False
    status = world.status if plan.status is None else plan.status
    conditions = status.get("conditions") or ()
    if any(c.get("type") in _POLLED_CONDITIONS and c.get("status") == "True" for c in conditions):
        return False
    return plan.status is None or phases.status_patch(world.status, plan.status) is None


def _walk(w: walk.Walk) -> None:
    world, plan, st = w.world, w.plan, w.st
    run, spec, db = world.run, world.spec, world.db

    # 1. Finalizer first, then the admission row.
    if meta.FINALIZER not in run.finalizers and not run.deleting:
        plan.actions.append(actions.AddFinalizer())
    if db is None:
        if walk.shows_admission(world.status):
            _ledger_missing(w)
        else:
            _admit(w)
        return

    current = max([st.attempts, *world.pods.keys()])
    st.attempts = current
    pod = world.pods.get(current)
    _reopened(w, current)
    finished = db.status in model.DB_FINAL or st.phase in api_status.FINAL_PHASES

    # 2. Approvals and humans steering a stopped run.
    if _steer(w, finished):
        return

    # 3. The outcome Postgres records.
    outcome = endings.db_outcome(db)
    if outcome is None and st.phase in api_status.FINAL_PHASES:
        outcome = (st.phase, st.reason, st.message)  # decided by the operator (attempt limit, InvalidSpec)
    if outcome is not None:
        endings.finish(w, outcome, pod)
        return

    # 4. Stop requests: applied whatever the admission policies say (stopping makes nothing happen).
    if run.deleting or spec.cancel or spec.suspend:
        endings.stop(w, pod)
        return
    if st.phase == api_status.SUSPENDED and world.admission_ok is not True:
        _resume_refused(w)
        return

    # 5. Deadlines (spec.activeDeadlineSeconds, progressDeadlineSeconds): fail the run, or wake at them.
    if deadlines.expire(w):
        return

    # 6. Attempts.
    attempts.attempt(w, current, pod)
    if plan.queued:
        # Woken when a slot frees (agent_operator.observe.throttle); polling a queue of 1,000 runs at the
        # active
        # poll would cost the operator what idle runs used to. The idle poll is only the fallback.
        plan.soon(w.settings.idle_poll_seconds)


def _admit(w: walk.Walk) -> None:
    """No admission row yet: admit the run (a fork: once its source is resolved), or refuse a spec that
    cannot run — contained to this run, before anything exists for it."""
    world, plan, st = w.world, w.plan, w.st
    spec = world.spec
    if world.run.deleting:
        plan.done = True  # never admitted: nothing ran, nothing to release
        return
    problem, reason = phases.input_problem(spec.input), api_status.INVALID_SPEC
    if problem is None and world.unstorable is not None:
        problem, reason = world.unstorable, api_status.UNSTORABLE
    fork = world.fork_source
    if problem is None and spec.fork_of is not None and world.admission_ok is not True:
        if world.admission_ok is None:
            plan.soon(5.0)  # could not tell whether the policies are installed: admit nothing, look again
            return
        problem, reason = f"fork refused: {approvals.policy_missing(world)}", api_status.FORK_REFUSED
    if problem is None and fork is not None and fork.problem is not None:
        # A fork whose source, checkpoint, step or edits do not exist: refused before anything is copied.
        problem, reason = f"fork refused: {fork.problem}", api_status.FORK_REFUSED
    if problem is not None or st.phase == api_status.FAILED:
        if st.phase != api_status.FAILED:
            plan.warn(reason, problem or "")
        st.phase, st.reason = api_status.FAILED, (reason if problem else st.reason or reason)
        st.message = problem or st.message
        st.completion_time = st.completion_time or phases.iso(world.now)
        w.show()
        plan.idle(w.settings.idle_poll_seconds)
        return
    if spec.fork_of is not None and fork is not None and fork.checkpoint_id and fork.run_id:
        plan.actions.append(actions.Admit(fork_source=fork.run_id, fork_checkpoint=fork.checkpoint_id))
        plan.info(
            "Forked",
            f"admitted as a fork of {spec.fork_of.run} at checkpoint {fork.checkpoint_id}"
            + (f" (edits: {', '.join(sorted(spec.fork_of.set))})" if spec.fork_of.set else ""),
        )
    elif spec.fork_of is not None:
        plan.soon(1.0)  # the source was not resolved in this reconcile (not looked up): look again
        return
    else:
        plan.actions.append(actions.Admit())
        plan.info(api_status.ADMITTED, f"admission row written for graph {spec.graph}")
    st.phase, st.reason, st.message = (
        api_status.PENDING,
        api_status.ADMITTED,
        "admitted; starting the first attempt",
    )
    w.show(admitted_now=True)
    plan.soon(0)


def _ledger_missing(w: walk.Walk) -> None:
    """The status proves the run was admitted, and Postgres has no row of it: its rows were purged while the
    AgentRun still existed, or the database was restored from an older backup. Admitting it again would run
    every effect again on an empty ledger, so nothing is done but say so (condition and Event, once); the
    phase it showed stays. A delete is let through: nothing in Postgres is left to cancel, and the run's
    Pods are released with it (``cleanup.releasable``)."""
    world, plan = w.world, w.plan
    if world.run.deleting:
        plan.done = True
        return
    status, new = run_status.ledger_missing(world)
    if new:
        plan.warn(api_status.LEDGER_MISSING, run_status.LEDGER_MISSING)
    plan.status = status
    plan.idle(w.settings.idle_poll_seconds)


def _steer(w: walk.Walk, finished: bool) -> bool:
    """Decision annotations, approval deadlines, resolve and retry. True: the pass ends here (a steering
    action is planned whose outcome Postgres shows next time)."""
    world, plan, st = w.world, w.plan, w.st
    run, db = world.run, world.db
    assert db is not None
    # Annotations first (a human beats the clock within one reconcile), then the deadline.
    deciding = approvals.from_annotations(world, plan, finished)
    if deciding:
        plan.soon(0)  # the decision's outcome shows in Postgres; look again right away
    elif not finished and not run.deleting and not world.spec.cancel:
        st.escalated = approvals.deadline(world, plan, st.escalated)
        if any(isinstance(a, actions.Decide) for a in plan.actions):
            # Postgres's clock has the last word on the deadline: look again soon, not in a tight loop.
            plan.soon(1.0)
    if not steering.retried_since_expiry(world):  # a retry overrides an onTimeout: cancel that stopped it
        approvals.expiry_followups(world, plan)

    if world.admission_ok is False or (world.admission_ok and run_status.policy_condition(world)):
        w.show()  # the ApprovalPolicyMissing condition (True, or back to False), whatever else this pass does
    # Humans steering a stopped run (resolve, retry); Postgres applies each exactly once.
    stopped = finished or db.status == "needs_human"
    steering_planned = steering.resolve(world, plan)
    if not run.deleting and steering.retry(world, plan, stopped):
        steering_planned = True
    if stopped and world.spec.retry_generation > db.retry_generation and world.admission_ok is not None:
        st.observed_retry_generation = world.spec.retry_generation  # acted on: applied or refused
    if steering_planned:
        # Status stays as it is until Postgres shows the outcome: a status written now would carry the old
        # outcome with the new generation, and `agentrun wait` would take it for the retried run's.
        plan.soon(0)
    return steering_planned


def _reopened(w: walk.Walk, current: int) -> None:
    """A human reopened the run (Postgres ``reopened`` grew): it is no longer final; the attempt after
    ``current`` starts once its worker is gone, with a fresh budget of lost attempts."""
    world, st = w.world, w.st
    db = world.db
    assert db is not None
    if db.reopened <= st.reopened:
        return
    st.reopened = db.reopened
    reason, message = steering.reopen_reason(world)
    st.phase, st.reason, st.message = api_status.RUNNING, api_status.REOPENED, message
    st.completion_time = st.next_attempt_at = None
    st.restarts = 0
    st.last_end = {"attempt": current, "reason": reason, "message": message, "at": phases.iso(world.now)}
    w.plan.info(api_status.REOPENED, message)


def _resume_refused(w: walk.Walk) -> None:
    """spec.suspend went false while a steering policy is absent or not as shipped: anyone with ``patch``
    could have done it, so the run stays Suspended until the policies are back (None: look again soon)."""
    world, plan, st = w.world, w.plan, w.st
    if world.admission_ok is None:
        plan.soon(5.0)
        return
    message = "resume refused: " + approvals.policy_missing(world)
    if st.message != message:
        plan.warn("SteeringPolicyMissing", message)
    st.message = message
    w.show()
    plan.idle(w.settings.idle_poll_seconds)
