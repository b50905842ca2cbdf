"""Run deadlines: ``spec.activeDeadlineSeconds`` and ``spec.progressDeadlineSeconds``. Pure.

The arithmetic is ``agentrun_core.deadline_math`` (what counts as active, what counts as progress, on
Postgres' clock: ``world.deadline_clock``). This module decides what a reconcile does about it:

* Past a deadline, the run fails as a cancel stops it, in one statement (``store.expire_run``): Postgres
  records it ``failed`` with the reason (DeadlineExceeded / ProgressDeadlineExceeded) and raises the run's
  fencing epoch, so the worker — which may be sleeping inside a step and would reach no step boundary for
  a long time — can write nothing more from that moment: no new effect is reserved, and an effect in flight
  keeps its ledger row as it stands (``pending``: its outcome unknown, reconciled by its key if a human
  retries the run). The outcome then shows like any other (``endings.finish``), which deletes the worker Pod.
* Before that, the reconcile asks to be woken at the earliest deadline (``Plan.soon``): a run is looked at
  when its deadline falls, not by polling.
"""

from __future__ import annotations

from agent_operator.decide import actions, walk
from agentrun_core import deadline_math

REASONS = deadline_math.REASONS


def expire(w: walk.Walk) -> bool:
    """Fail the run if it is past a deadline (True: the pass ends here); else ask to be woken at it."""
    world, plan = w.world, w.plan
    clock, spec = world.deadline_clock, world.spec
    if clock is None or world.parked_waiting:
        # Parked: no worker runs, whatever its attempt row says (an end not recorded is not a running worker).
        return False
    active, progress = spec.active_deadline_seconds, spec.progress_deadline_seconds
    verdict = deadline_math.check(clock, active, progress)
    if verdict is not None:
        # The status stays as it is until Postgres shows the outcome (next pass, at once); its Failed phase
        # brings the Warning Event (run_status.transition_events).
        plan.actions.append(actions.ExpireRun(verdict.reason, verdict.message))
        plan.soon(0)
        return True
    wait = deadline_math.wake_in(clock, active, progress)
    if wait is not None:
        plan.soon(wait)
    return False
