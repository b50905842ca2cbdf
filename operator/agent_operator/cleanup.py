"""Finished attempts' worker Pods are deleted; the last one is kept a bounded time for ``kubectl logs``.

Rule (pure; the runner adds these actions to a reconcile's plan):
* an **earlier attempt's** Pod (attempt < the run's current attempt) that has terminated is deleted at
  once: its outcome is recorded — a later attempt is only ever started in the plan that recorded the
  earlier one's end (``RecordLoss``), or after its worker recorded it (parked, drained);
* the **last attempt's** Pod of a finished run (Succeeded, Failed, Cancelled) is deleted once this operator
  has seen it terminated for ``AGENTRUN_FINISHED_POD_RETENTION_SECONDS`` (default 600 s): long enough to
  read its log, bounded so finished runs do not keep Pod objects. The time is the operator's own
  observation (monotonic, per process): a restarted operator counts again — a Pod is kept longer, never
  deleted earlier. The attempt rows, step events and ledger in Postgres keep the history.

Never touched: a Pod still running or already being deleted, the Pod of a run that is parked or between
attempts (the reconcile still reads its last state), and anything while the AgentRun itself is being
deleted (its finalizer waits for the worker; garbage collection removes the rest).
"""

from __future__ import annotations

from agent_operator import actions, model, phases


def finished_pods(world: model.World, plan: actions.Plan, retention_seconds: float) -> None:
    """Add a ``CleanupPod`` for each Pod the rule above deletes now; ask to look again when the last
    attempt's Pod is due later."""
    if world.run.deleting or not world.pods:
        return
    current = max([int((plan.status or world.status).get("attempts") or 0), *world.pods])
    phase = str((plan.status or world.status).get("phase") or "")
    final = phase in phases.FINAL_PHASES or (world.db is not None and world.db.status in model.DB_FINAL)
    for attempt, pod in sorted(world.pods.items()):
        if not pod.terminated or pod.deleting:
            continue
        if attempt < current:
            why = f"attempt {attempt} ended and attempt {current} started"
            plan.actions.append(actions.CleanupPod(pod.name, why))
            continue
        if not final:
            continue
        seen = world.pods_terminated_for.get(attempt, 0.0)
        if seen >= retention_seconds:
            plan.actions.append(
                actions.CleanupPod(pod.name, f"run finished; kept {retention_seconds:.0f}s for its log")
            )
        else:
            plan.soon(retention_seconds - seen)
