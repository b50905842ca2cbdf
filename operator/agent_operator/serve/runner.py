"""One reconcile round of an AgentRun: observe (``observe``), decide (``reconcile.decide``), carry the plan
out (``execute``), write the status. The I/O side of a reconcile, kept thin.

Rule: the round decides once (again only after a fresh read, or when the namespace's last worker slot was
taken meanwhile) and writes the status the plan carries, with a resourceVersion precondition and only while
this replica leads (``NotLeader``, ``StaleStatus``). Runs in a worker thread (the handlers call it through
``asyncio.to_thread``): the Kubernetes calls go through ``agent_operator.kube`` and the SQL through
``agentrun_core.store``, both synchronous. Per-run memory is ``memory.RunMemory``.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from agent_operator import kube
from agent_operator import settings as settings_
from agent_operator.act import execute, notifier, tenants
from agent_operator.decide import actions, cleanup, model, phases, reconcile, run_status, walk
from agent_operator.observe import memory as memory_
from agent_operator.observe import metrics, throttle
from agent_operator.observe import world as observe
from agentrun_core import store
from agentrun_core.api import status as api_status

logger = logging.getLogger(__name__)
COMPONENT = "agentrun-operator"


class NotLeader(Exception):
    """This replica is past its leader renew deadline: it must not write (a standby may lead by now)."""


class StaleStatus(Exception):
    """The run's status changed under this replica since it last read or wrote it: write refused."""


class Runner:
    def __init__(
        self,
        settings: settings_.Settings,
        api: kube.ApiClient,
        db: store.Conn,
        may_write: Callable[[], bool] | None = None,
        throttle_: throttle.Starts | None = None,
    ) -> None:
        self.settings = settings
        # Start throttling per namespace and per spec.concurrency key (agent_operator.observe.throttle); the
        # handlers
        # pass the process-wide one.
        self.throttle = throttle_ or throttle.Starts(settings.reconcile.max_workers_per_namespace)
        self.api = api
        self.db = db
        self.tenants = tenants.Tenants(settings, api, db)
        # The leader's renew-deadline check (``leader.Elector.may_act``); always True without election.
        self.may_write = may_write or (lambda: True)
        self.notifier = notifier.Notifier(api, db, settings.leader.identity, self.event, settings.notify)
        self.observer = observe.Observer(settings, api, db, self.throttle)
        self.executor = execute.Executor(settings, api, db, self.tenants, self.event)

    def _fence(self, run: model.RunRef) -> None:
        if not self.may_write():
            raise NotLeader(f"not writing for {run.namespace}/{run.name}: leadership is not current")

    def confirm(self, world: model.World, memory: memory_.RunMemory) -> model.World:
        """``world`` with the current Pod and the Lease read fresh (raises ``kube.KubeError``: unknown)."""
        return self.observer.confirm(world, memory)

    def reconcile(self, watched: observe.Watched, memory: memory_.RunMemory) -> actions.Plan:
        """One observe-decide-act round. Raises on I/O errors (the caller retries)."""
        watched = dataclasses.replace(watched, body=copy.deepcopy(dict(watched.body)))
        world = self.observer.world(watched, memory)
        plan = reconcile.decide(world, self.settings.reconcile)
        if plan.confirm is not None:
            try:
                world = self.confirm(world, memory)
            except kube.KubeError as exc:
                return self._unknown(world, plan.confirm, exc, memory)
            plan = reconcile.decide(world, self.settings.reconcile)
        world, plan = self._slot(world, plan, memory)
        cleanup.finished_pods(world, plan, self.settings.reconcile.finished_pod_retention_seconds)
        self._resume_latency(world, memory)
        self.execute(world, plan, memory)
        self._release(world, plan)
        self._account(world, plan, memory)
        self._notify(world, plan, memory)
        memory.quiet_rounds = memory.quiet_rounds + 1 if reconcile.quiet(world, plan) else 0
        plan.stretch_idle(memory.quiet_rounds, self.settings.reconcile.idle_poll_max_seconds)
        return plan

    def _slot(
        self, world: model.World, plan: actions.Plan, memory: memory_.RunMemory
    ) -> tuple[model.World, actions.Plan]:
        """A plan that creates a Pod first takes one of the namespace's worker slots; when another run took
        the last one meanwhile, decide again as queued (nothing of the first plan has been carried out)."""
        if not any(isinstance(a, actions.CreatePod) for a in plan.actions):
            return world, plan
        run = world.run
        group = _group(world)
        if self.throttle.take(run.namespace, run.uid, run.name, group):
            return world, plan
        wait = self.throttle.waits_for(run.namespace, run.uid, group) or "another run took the last slot"
        world = dataclasses.replace(world, start_allowed=False, start_wait=wait)
        return world, reconcile.decide(world, self.settings.reconcile)

    def _account(self, world: model.World, plan: actions.Plan, memory: memory_.RunMemory) -> None:
        """Tell the throttle whether this run holds a live worker Pod now, and whether it waits to start."""
        run = world.run
        created = any(isinstance(a, actions.CreatePod) for a in plan.actions)
        live = created or holds_slot(world, self.settings.reconcile.pod_cache_grace_seconds)
        self.throttle.observed(
            run.namespace,
            run.uid,
            run.name,
            live=live,
            waiting=plan.queued,
            group=_group(world),
        )

    def _notify(self, world: model.World, plan: actions.Plan, memory: memory_.RunMemory) -> None:
        """After the plan (a decision is never held up by a webhook): what is owed, one call each; any error
        stays here — a notification never fails the reconcile."""
        if not world.spec.notify or not self.may_write():
            return
        try:
            wait = self.notifier.sync(world, memory)
        except Exception as exc:
            logger.warning("%s/%s: notifications: %s", world.run.namespace, world.run.name, exc)
            wait = 5.0
        problem = memory.notify_problem
        if problem != (world.notify_problem or None):
            wait = 0.1 if wait is None else min(wait, 0.1)  # show the condition change soon
        if wait is not None:
            plan.soon(wait)

    def _unknown(
        self, world: model.World, why: str, exc: Exception, memory: memory_.RunMemory
    ) -> actions.Plan:
        """A fresh read failed: the view is unknown, so nothing is deleted, lost or started this round."""
        now = time.monotonic()
        if memory.unknown_since is None:
            memory.unknown_since = now
        logger.warning(
            "%s/%s: %s, and a fresh read failed (%s) for %.0fs: not acting on a stale view",
            world.run.namespace,
            world.run.name,
            why,
            exc,
            now - memory.unknown_since,
        )
        return actions.Plan(requeue_after=min(1.0, self.settings.reconcile.poll_seconds))

    def _resume_latency(self, world: model.World, memory: memory_.RunMemory) -> None:
        lost_at = memory.lost_at
        if memory.waiting_running is None or lost_at is None:
            return
        for pod in world.pods.values():
            if pod.name == memory.waiting_running and pod.phase in {
                api_status.POD_RUNNING,
                *api_status.POD_TERMINAL,
            }:
                metrics.resume_latency(time.monotonic() - lost_at, memory.lost_reason)
                memory.waiting_running = memory.lost_at = None

    def execute(self, world: model.World, plan: actions.Plan, memory: memory_.RunMemory) -> None:
        run = world.run
        for action in plan.actions:
            self._fence(run)
            try:
                self.executor.do(world, action, memory)
            except execute.Unstorable as exc:
                _failed_unstorable(world, plan, str(exc))
                break
        events = plan.events + run_status.transition_events(world.status, plan.status)
        for event in events:
            self.event(run, event)
        if plan.status is not None:
            patch = phases.status_patch(world.status, plan.status)
            if patch is None:
                return  # the status the round started from stands (``memory.status_base``): no copy kept
            if not (run.deleting and plan.done):
                try:
                    self._write_status(world, patch, memory)
                except kube.NotFound:
                    return
            memory.last_status = plan.status

    def _release(self, world: model.World, plan: actions.Plan) -> None:
        """After the whole plan (the attempt's end on record), deleted Pods may go: ``cleanup.releasable``."""
        run = world.run
        for name in cleanup.releasable(world, plan):
            self._fence(run)
            logger.debug("%s/%s: releasing deleted worker Pod %s", run.namespace, run.name, name)
            kube.release_pod(self.api, run.namespace, name)

    def _write_status(self, world: model.World, patch: dict[str, Any], memory: memory_.RunMemory) -> None:
        """The status patch, with a resourceVersion precondition: refused when the status changed since
        this replica based its decision on it (a newer leader wrote it), never silently overwritten."""
        run = world.run
        version = run.resource_version
        if memory.written_rv is not None and memory.written_rv[0] == version:
            version = memory.written_rv[1]  # the watch has not delivered our own last write yet
        self._fence(run)
        try:
            written = kube.patch_status(self.api, run.namespace, run.name, patch, version)
        except kube.Conflict:
            # Something changed the object. Only a change of *status* makes our decision stale; metadata or
            # spec changes (annotations, a finalizer, kubectl) are seen by the next reconcile anyway.
            fresh = kube.get_run(self.api, run.namespace, run.name)
            if dict(fresh.get("status") or {}) != dict(world.status):
                memory.last_status = None  # re-base on what the API server holds
                raise StaleStatus(
                    f"status of {run.namespace}/{run.name} changed under this replica: write refused"
                ) from None
            self._fence(run)
            version = str((fresh.get("metadata") or {}).get("resourceVersion") or "")
            written = kube.patch_status(self.api, run.namespace, run.name, patch, version)
        made = str((written.get("metadata") or {}).get("resourceVersion") or "")
        memory.written_rv = (run.resource_version, made)

    def event(self, run: model.RunRef, event: actions.Event) -> None:
        log = logger.warning if event.type == "Warning" else logger.info
        log("%s/%s %s: %s", run.namespace, run.name, event.reason, event.message)
        try:
            kube.post_event(self.api, run, event.type, event.reason, event.message, COMPONENT)
        except kube.KubeError as exc:  # an Event is information, never a reason to fail a reconcile
            logger.warning(
                "could not post event %s for %s/%s: %s", event.reason, run.namespace, run.name, exc
            )


def _failed_unstorable(world: model.World, plan: actions.Plan, message: str) -> None:
    """``plan`` once its run's admission was refused for good: the run ``Failed`` (reason ``Unstorable``)
    with a Warning, nothing else of it done. The next reconcile finds the run Failed and never admitted, and
    keeps it so (reconcile._admit) without trying again."""
    st = walk.initial(world.status)
    st.phase, st.reason, st.message = api_status.FAILED, api_status.UNSTORABLE, message
    st.completion_time = phases.iso(world.now)
    st.next_attempt_at = None
    plan.actions = []
    plan.events = [actions.Event("Warning", api_status.UNSTORABLE, message)]
    plan.status = run_status.build(world, st)


def _group(world: model.World) -> throttle.Group | None:
    return world.spec.concurrency.group if world.spec.concurrency is not None else None


def holds_slot(world: model.World, grace_seconds: float) -> bool:
    """Whether the run has a live worker Pod, for the start throttle. A Pod created less than
    ``grace_seconds`` ago may not be in the watch cache yet: it counts as live until the cache shows the
    current attempt's Pod; from then on what the cache shows counts (a run done within the grace frees its
    slot at once, not at its next reconcile, which for a finished run may be the idle poll away)."""
    current = max([int(world.status.get("attempts") or 0), *world.pods.keys()])
    unseen = current not in world.pods
    fresh = world.pod_created_ago is not None and world.pod_created_ago < grace_seconds and unseen
    return fresh or any(not p.terminated for p in world.pods.values())
