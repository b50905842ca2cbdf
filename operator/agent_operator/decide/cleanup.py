"""Finished attempts' worker Pods are deleted; the last one is kept a bounded time for ``kubectl logs``.

Rule (pure; the runner adds these actions to a reconcile's plan):
* an **earlier attempt's** Pod (attempt < the run's current attempt) that has terminated is deleted at
  once: its outcome is recorded — a later attempt is only ever started in the plan that recorded the
  earlier one's end (``RecordLoss``), or after its worker recorded it (parked, drained);
* the **last attempt's** Pod of a finished run (Succeeded, Failed, Cancelled), or of a run parked on an
  approval still pending (``World.parked_waiting``: its worker parked and exited, and the run may wait for
  days), is deleted once this operator has seen it terminated for ``AGENTRUN_FINISHED_POD_RETENTION_SECONDS``
  (default 600 s): long enough to read its log, bounded so finished and waiting runs do not keep Pod
  objects. The time is the operator's own observation (monotonic, per process): a restarted operator counts
  again — a Pod is kept longer, never deleted earlier. The attempt rows, step events and ledger in Postgres
  keep the history; a waiting run needs no Pod (``attempts._check_worker``), and the decision starts the
  next attempt.

Never touched: a Pod still running or already being deleted, the Pod of a run between attempts (the
reconcile still reads its last state: a parked run whose approval was just decided is one), and anything
while the AgentRun itself is being deleted (its finalizer waits for the worker; garbage collection removes
the rest).

Rule for the Pod finalizer (``protocol.POD_FINALIZER``; ``releasable``): a deleted worker Pod stays in the
API, with its final status, until a reconcile that saw that status has carried out its whole plan (the
attempt's end recorded in Postgres and in the run's status); only then is the finalizer removed. So why an
attempt ended (evicted, OOMKilled, an exit code) is read from the Pod itself, even by an operator that was
restarted, or became leader, after the kubelet finished with it. A deleted Pod is released when
* it has terminated (the kubelet wrote its final status), or
* it was deleted with grace period 0 (a force delete: no final status is coming, as before the finalizer),
  or
* a later attempt exists (this attempt's end was recorded before the later one started), or
* the AgentRun is being deleted and its worker is gone (``plan.done``): then every Pod of the run, deleted
  or not, is released, so garbage collection can remove them once the run is gone.
A held Pod whose AgentRun is gone already (its finalizer removed by hand, ``--cascade=orphan``) is released
by the Pod watch (``handlers.pod_changed``) after a fresh read shows no run of that uid.
"""

from __future__ import annotations

from agent_operator.decide import actions, model
from agentrun_core.api import status as api_status


def releasable(world: model.World, plan: actions.Plan) -> list[str]:
    """Names of the run's deleted Pods whose finalizer may go once ``plan`` is carried out (rule above)."""
    current = max([int((plan.status or world.status).get("attempts") or 0), *world.pods])
    released = world.run.deleting and plan.done
    return [
        pod.name
        for attempt, pod in sorted(world.pods.items())
        if pod.held
        and (released or (pod.deleting and (pod.terminated or pod.force_deleted or attempt < current)))
    ]


def finished_pods(world: model.World, plan: actions.Plan, retention_seconds: float) -> None:
    """Add a ``CleanupPod`` for each Pod the rule above deletes now; ask to look again when the last
    attempt's Pod is due later."""
    if world.run.deleting or not world.pods:
        return
    current = max([int((plan.status or world.status).get("attempts") or 0), *world.pods])
    phase = str((plan.status or world.status).get("phase") or "")
    final = phase in api_status.FINAL_PHASES or (world.db is not None and world.db.status in model.DB_FINAL)
    # No worker runs and none is starting: the last Pod only keeps its log.
    why_done = "run finished" if final else "run waits for an approval" if world.parked_waiting else None
    for attempt, pod in sorted(world.pods.items()):
        if not pod.terminated or pod.deleting:
            continue
        if attempt < current:
            why = f"attempt {attempt} ended and attempt {current} started"
            plan.actions.append(actions.CleanupPod(pod.name, why))
            continue
        if why_done is None:
            continue
        seen = world.pods_terminated_for.get(attempt, 0.0)
        if seen >= retention_seconds:
            plan.actions.append(
                actions.CleanupPod(pod.name, f"{why_done}; kept {retention_seconds:.0f}s for its log")
            )
        else:
            plan.soon(retention_seconds - seen)
