"""Observe one AgentRun, decide (``reconcile.decide``), carry the plan out. The I/O side of a reconcile.

Runs in a worker thread (the handlers call it through ``asyncio.to_thread``): the Kubernetes calls go
through ``agent_operator.kube`` and the SQL through ``agentrun_core.store``, both synchronous.
Per-run memory (``RunMemory``) lives as long as the run's daemon: the Lease observer (expiry by locally
observed time), what this process wrote last (the watch may lag behind its own writes), when it created
the current Pod (the watch may lag behind that too), and timing for the resume-latency metric.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from agent_operator import (
    actions,
    cleanup,
    edits,
    forks,
    kube,
    metrics,
    model,
    notifier,
    phases,
    pods,
    reconcile,
    tenants,
    throttle,
)
from agent_operator import settings as settings_
from agentrun_core import lease_math, store

logger = logging.getLogger(__name__)
COMPONENT = "agentrun-operator"


OUTAGE_SLACK_SECONDS = 5.0  # reconcile and poll delays between a Lease looking expired and our fresh read


@dataclasses.dataclass
class RunMemory:
    observer: lease_math.LeaseObserver = dataclasses.field(default_factory=lease_math.LeaseObserver)
    last_status: dict[str, Any] | None = None
    created_pods: dict[str, float] = dataclasses.field(default_factory=dict)  # pod name -> monotonic
    handled_rvs: set[str] = dataclasses.field(default_factory=set)
    lost_at: float | None = None  # monotonic time the last attempt was judged lost
    lost_reason: str = "other"
    waiting_running: str | None = None  # pod name whose Running we wait for (resume latency)
    renew_failure_version: tuple[object, ...] | None = None
    last_pod_error: str | None = None
    failures: int = 0  # reconciles failed in a row (error backoff)
    seen_pods: dict[str, model.PodInfo] = dataclasses.field(default_factory=dict)  # last state per Pod name
    # The final state of each of the run's Pods, from the watch's DELETED event (pod name -> state); see
    # ``pod_deleted``. Written only by the watch handler, never by a reconcile, so a reconcile holding an
    # older view of the index cannot overwrite it.
    final_pods: dict[str, model.PodInfo] = dataclasses.field(default_factory=dict)
    # resourceVersions of the run's Lease that a fresh read showed to be replaced already: the watch cache
    # may still serve them (it lags or stalls), and feeding them to the observer again would be a step back.
    superseded: set[str] = dataclasses.field(default_factory=set)
    unknown_since: float | None = None  # monotonic: fresh reads failing since (the view is "unknown")
    outage: tuple[float, float] | None = None  # (since, until) monotonic: the last period fresh reads failed
    written_rv: tuple[str, str] | None = None  # (resourceVersion we patched from, the one our patch made)
    blocked: tuple[str, float] | None = None  # (pod name, monotonic since) the current Pod cannot start
    unclaimed: tuple[str, float] | None = None  # (pod name, since) Running, its worker without the Lease
    pod_refused: tuple[int, int, str, float] | None = None  # (attempt, HTTP status, message, since)
    terminated_seen: dict[str, float] = dataclasses.field(default_factory=dict)  # pod name -> monotonic
    notify_problem: tuple[str, str] | None = None  # (reason, message): the NotificationFailed condition
    notify_warned: set[str] = dataclasses.field(default_factory=set)  # notification Warnings already posted


def pod_deleted(memory: RunMemory, body: Mapping[str, Any]) -> None:
    """Keep the final state of a run's Pod that the watch delivered in its DELETED event.

    Rule: why an attempt's Pod ended is read from the last state the API server had of it, not from what a
    reconcile happened to sample. The watch-fed index drops a Pod on DELETED, and a reconcile sees only what
    the index holds when it runs; on a real kubelet an evicted worker that drains at once goes Running →
    DisruptionTarget → Failed → deleted within a second, often between two reconciles (kopf also batches a
    Pod's events and hands over only the latest). The DELETED event's object still carries the
    DisruptionTarget condition and the exit code, so it is kept here: without it the run's last view of its
    Pod is ``Running``, and the eviction would be recorded as a plain ``deleted``.
    """
    info = model.PodInfo.from_body(body)
    if info.name:
        memory.final_pods[info.name] = info


def _since(mark: tuple[str, float] | None, name: str | None, now: float) -> tuple[str, float] | None:
    """Keep the start of a condition of Pod ``name`` (None: the condition does not hold now)."""
    if name is None:
        return None
    return mark if mark is not None and mark[0] == name else (name, now)


def _lapsed_in(
    outage: tuple[float, float] | None, observer: lease_math.LeaseObserver, now: float
) -> bool:
    """Whether the Lease stopped changing shortly before, or during, a period in which our own fresh reads
    failed: the API server was unreachable for us, so (most likely) for the worker's renewals too.

    We only try a fresh read once the Lease already looks expired, so the failures start a lease duration
    (plus a poll) after its last change: the window reaches back two durations and ``OUTAGE_SLACK_SECONDS``.
    A Lease that stopped changing earlier than that was lost to something else (a hung worker)."""
    if outage is None:
        return False
    unchanged_since = now - observer.unchanged_for(now)
    earliest = outage[0] - 2 * observer.duration() - OUTAGE_SLACK_SECONDS
    return earliest <= unchanged_since <= outage[1]


def feed_lease(memory: RunMemory, lease: lease_math.LeaseSummary | None, now: float) -> lease_math.LeaseState:
    """Feed one reading of the run's Lease (cache or fresh) to the observer, never going back in time."""
    if lease is not None and lease.resource_version in memory.superseded:
        return memory.observer.state(now)  # an older version than one already seen: ignore it
    last = memory.observer.last
    if last is not None and last.resource_version and (lease is None or lease.version() != last.version()):
        if len(memory.superseded) > 256:
            memory.superseded.clear()  # bounded; a forgotten old version only restarts the timer (safe side)
        memory.superseded.add(last.resource_version)
    return memory.observer.observe(lease, now)


def spec_hash(spec: model.RunSpec) -> str:
    doc = {"graph": spec.graph, "input": spec.input, "durability": spec.durability}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:32]


ADMISSION_CHECK_SECONDS = 10.0  # how long a look at the admission policies serves the status condition


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
        throttle_: throttle.Throttle | None = None,
    ) -> None:
        self.settings = settings
        # Start throttling per namespace (agent_operator.throttle); the handlers pass the process-wide one.
        self.throttle = throttle_ or throttle.Throttle(settings.reconcile.max_workers_per_namespace)
        self.api = api
        self.db = db
        self.tenants = tenants.Tenants(settings, api, db)
        self._admission: tuple[float, bool | None] | None = None  # (monotonic time, ok)
        # The leader's renew-deadline check (``leader.Elector.may_act``); always True without election.
        self.may_write = may_write or (lambda: True)
        self.notifier = notifier.Notifier(api, db, settings.leader.identity, self.event)

    def admission_ok(self, fresh: bool = False) -> bool | None:
        """Whether the decision-guarding admission policies are installed (None: unknown). ``fresh`` for a
        decision about to be applied: never from the cache, which only serves the status condition."""
        now = time.monotonic()
        cached = self._admission
        if not fresh and cached is not None and now - cached[0] < ADMISSION_CHECK_SECONDS:
            return cached[1]
        ok: bool | None
        try:
            missing = kube.missing_admission_objects(self.api)
            ok = not missing
            if missing:
                logger.warning("admission policies missing, decisions refused: %s", ", ".join(missing))
        except kube.KubeError as exc:
            logger.warning("could not check the admission policies: %s", exc)
            ok = None
        self._admission = (now, ok)
        return ok

    def _fence(self, run: model.RunRef) -> None:
        if not self.may_write():
            raise NotLeader(f"not writing for {run.namespace}/{run.name}: leadership is not current")

    # --- observe -----------------------------------------------------------------------------------------

    def observe(
        self,
        body: Mapping[str, Any],
        pod_bodies: list[model.PodInfo],
        lease: lease_math.LeaseSummary | None,
        memory: RunMemory,
        *,
        deleting: bool | None = None,
    ) -> model.World:
        run = model.RunRef.from_body(body)
        if deleting is not None:
            run = dataclasses.replace(run, deleting=deleting)
        spec = model.RunSpec.from_body(body.get("spec") or {})
        status = memory.last_status if memory.last_status is not None else dict(body.get("status") or {})
        db_run, db_now = store.get_run_now(self.db, run.uid)
        db = db_run
        approvals: tuple[store.Approval, ...] = ()
        interventions: tuple[store.Intervention, ...] = ()
        effects: dict[str, int] = {}
        if db_run is not None:
            if db_run.status not in model.DB_FINAL:
                # The policy a future approval is requested under follows spec.approval (never while one is
                # pending: that one keeps its snapshot).
                store.sync_approval_policy(self.db, run.uid, spec.approval.as_json())
            approvals = tuple(store.list_approvals(self.db, run.uid))
            effects = store.effect_counts(self.db, run.uid)
            if db_run.interventions:  # most runs never had one: no fourth query for them
                interventions = tuple(store.list_interventions(self.db, run.uid))
        by_attempt = {p.attempt: p for p in pod_bodies if p.attempt > 0}
        now_mono = time.monotonic()
        state = feed_lease(memory, lease, now_mono)
        lease = memory.observer.last
        holder = lease.holder if lease is not None else None
        expired_holder = holder if state == lease_math.LeaseState.EXPIRED else None
        self._renew_failure_metric(memory, lease, now_mono, run.namespace)
        current = max([int(status.get("attempts") or 0), *by_attempt.keys()])
        created = memory.created_pods.get(model.pod_name(run.name, current)) if current else None
        for info in by_attempt.values():
            memory.seen_pods[info.name] = info
        terminated_for = _terminated_for(memory, by_attempt, now_mono)
        last_seen = None
        if current and current not in by_attempt:
            name = model.pod_name(run.name, current)
            last_seen = memory.final_pods.get(name) or memory.seen_pods.get(name)
        deciding = any(k in run.annotations for k in (model.ANN_APPROVE, model.ANN_REJECT))
        guarded = deciding or any(a.status == "pending" for a in approvals)
        pod = by_attempt.get(current)
        alive = pod is not None and pod.alive
        memory.blocked = _since(memory.blocked, pod.name if alive and pod and pod.blocked else None, now_mono)
        unclaimed = (
            alive
            and pod is not None
            and pod.phase == "Running"
            and holder != pod.name
            and (db is None or db.holder != pod.name)
        )
        memory.unclaimed = _since(memory.unclaimed, pod.name if unclaimed and pod else None, now_mono)
        refused = memory.pod_refused
        fork_source = None
        if db_run is None and spec.fork_of is not None and not run.deleting:
            fork = spec.fork_of
            found = store.find_fork_source(
                self.db,
                namespace=run.namespace,  # never another namespace: the tenant boundary
                name=fork.run,
                run_uid=fork.run_uid,
                checkpoint_id=fork.checkpoint,
                step=fork.step,
                set_keys=fork.set_keys,
            )
            fork_source = model.ForkSource(found.run_id, found.checkpoint_id, fork.problem or found.problem)
        return model.World(
            run=run,
            spec=spec,
            status=status,
            now=datetime.datetime.now(datetime.UTC),
            db=db,
            approvals=approvals,
            interventions=interventions,
            effects=effects,
            pods=by_attempt,
            lease_expired_holder=expired_holder,
            lease_holder=holder,
            pod_created_ago=(now_mono - created) if created is not None else None,
            annotations_handled=run.resource_version in memory.handled_rvs,
            last_seen_pod=last_seen,
            # None: not looked at (nothing to guard)
            admission_ok=self.admission_ok(fresh=deciding) if guarded else None,
            pod_cache_grace=self.settings.reconcile.pod_cache_grace_seconds,
            start_timeout=self.settings.reconcile.start_timeout_seconds,
            db_now=db_now,
            blocked_for=now_mono - memory.blocked[1] if memory.blocked else None,
            unclaimed_for=now_mono - memory.unclaimed[1] if memory.unclaimed else None,
            pod_refused=(refused[0], refused[1], refused[2], now_mono - refused[3]) if refused else None,
            start_allowed=self.throttle.allowed(run.namespace, run.uid),
            pods_terminated_for=terminated_for,
            default_image=self.settings.worker.image,
            fork_source=fork_source,
            notify_problem=memory.notify_problem,
        )

    def confirm(self, world: model.World, memory: RunMemory) -> model.World:
        """The World with the current attempt's Pod and the run's Lease read fresh from the API server.

        Raises ``kube.KubeError`` when either cannot be read: the caller then does nothing destructive.
        """
        run = world.run
        current = max([int(world.status.get("attempts") or 0), *world.pods.keys()])
        by_attempt = dict(world.pods)
        last_seen = world.last_seen_pod
        if current:
            name = model.pod_name(run.name, current)
            try:
                body = kube.get_pod(self.api, run.namespace, name)
            except kube.NotFound:
                body = None
            info = model.PodInfo.from_body(body) if body is not None and _owned(body, run.uid) else None
            if info is None:
                # Gone now: its final state from the watch's DELETED event (read again here: the event may
                # have been handled since ``observe``), else what the cache last showed of it (an eviction's
                # DisruptionTarget, an OOM), says why it ended.
                cached = by_attempt.pop(current, None)
                last_seen = memory.final_pods.get(name) or last_seen or cached or memory.seen_pods.get(name)
            else:
                by_attempt[current] = memory.seen_pods[name] = info
                last_seen = None
        try:
            lease_body: dict[str, Any] | None = kube.get_lease(
                self.api, run.namespace, model.lease_name(run.name), timeout=kube.TIMEOUT
            )
        except kube.NotFound:
            lease_body = None
        if lease_body is not None and _foreign(lease_body, run.uid):
            lease_body = None  # an earlier run's Lease of the same name: nothing about this run's worker
        fresh = lease_math.LeaseSummary.from_body(lease_body) if lease_body is not None else None
        now = time.monotonic()
        state = feed_lease(memory, fresh, now)
        holder = fresh.holder if fresh is not None else None
        if memory.unknown_since is not None:
            memory.outage = (memory.unknown_since, now)
        memory.unknown_since = None
        expired = state == lease_math.LeaseState.EXPIRED
        return dataclasses.replace(
            world,
            pods=by_attempt,
            lease_holder=holder,
            lease_expired_holder=holder if expired else None,
            lease_lapsed_in_outage=expired and _lapsed_in(memory.outage, memory.observer, now),
            last_seen_pod=last_seen,
            live=True,
        )

    def _renew_failure_metric(
        self, memory: RunMemory, lease: lease_math.LeaseSummary | None, now: float, namespace: str
    ) -> None:
        if lease is None or lease.free:
            return
        overdue = memory.observer.unchanged_for(now) > lease_math.renew_deadline(memory.observer.duration())
        if overdue and memory.renew_failure_version != lease.version():
            memory.renew_failure_version = lease.version()
            metrics.lease_renew_failure(namespace)

    # --- reconcile ---------------------------------------------------------------------------------------

    def reconcile(
        self,
        body: Mapping[str, Any],
        pod_bodies: list[model.PodInfo],
        lease: lease_math.LeaseSummary | None,
        memory: RunMemory,
        *,
        deleting: bool | None = None,
    ) -> actions.Plan:
        """One observe-decide-act round. Raises on I/O errors (the caller retries)."""
        body = copy.deepcopy(dict(body))
        world = self.observe(body, pod_bodies, lease, memory, deleting=deleting)
        poll, idle = self.settings.reconcile.poll_seconds, self.settings.reconcile.idle_poll_seconds
        plan = reconcile.decide(world, poll, idle)
        if plan.confirm is not None:
            try:
                world = self.confirm(world, memory)
            except kube.KubeError as exc:
                return self._unknown(world, plan.confirm, exc, memory)
            plan = reconcile.decide(world, poll, idle)
        world, plan = self._slot(world, plan, memory)
        cleanup.finished_pods(world, plan, self.settings.reconcile.finished_pod_retention_seconds)
        self._resume_latency(world, memory)
        self.execute(world, plan, memory)
        self._account(world, plan, memory)
        self._notify(world, plan, memory)
        return plan

    def _slot(
        self, world: model.World, plan: actions.Plan, memory: RunMemory
    ) -> tuple[model.World, actions.Plan]:
        """A plan that creates a Pod first takes one of the namespace's worker slots; when another run took
        the last one meanwhile, decide again as queued (nothing of the first plan has been carried out)."""
        if not any(isinstance(a, actions.CreatePod) for a in plan.actions):
            return world, plan
        run = world.run
        if self.throttle.take(run.namespace, run.uid, run.name):
            return world, plan
        world = dataclasses.replace(world, start_allowed=False)
        poll, idle = self.settings.reconcile.poll_seconds, self.settings.reconcile.idle_poll_seconds
        return world, reconcile.decide(world, poll, idle)

    def _account(self, world: model.World, plan: actions.Plan, memory: RunMemory) -> None:
        """Tell the throttle whether this run holds a live worker Pod now, and whether it waits to start."""
        run = world.run
        created = any(isinstance(a, actions.CreatePod) for a in plan.actions)
        grace = self.settings.reconcile.pod_cache_grace_seconds
        fresh = world.pod_created_ago is not None and world.pod_created_ago < grace
        alive = any(not p.terminated for p in world.pods.values())
        self.throttle.observed(
            run.namespace, run.uid, run.name, live=created or fresh or alive, waiting=plan.queued
        )

    def _notify(self, world: model.World, plan: actions.Plan, memory: RunMemory) -> None:
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

    def _unknown(self, world: model.World, why: str, exc: Exception, memory: RunMemory) -> actions.Plan:
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

    def _clear_foreign_lease(self, run: model.RunRef) -> None:
        """Delete the run Lease if it is an earlier run's (same name, other uid) before a worker starts.

        Left in place, the new worker would adopt it and garbage collection of the old run would delete it
        under the new one (its ownerReference names the old uid). Fresh read: the cache may lag.
        """
        name = model.lease_name(run.name)
        try:
            body = kube.get_lease(self.api, run.namespace, name, timeout=kube.TIMEOUT)
        except kube.NotFound:
            return
        if _foreign(body, run.uid):
            meta = body.get("metadata") or {}
            self.event(
                run,
                actions.Event(
                    "Normal", "StaleLease", f"deleting Lease {name} of an earlier run with this name"
                ),
            )
            kube.delete_exact(self.api, run.namespace, "lease", name, str(meta.get("uid") or ""))

    def _check_existing_pod(self, run: model.RunRef, pod: str) -> None:
        """``AlreadyExists`` is "mine" only when the Pod carries this run's uid; an earlier run's Pod of the
        same name is deleted (precondition on its uid) and the attempt retried once it is gone."""
        try:
            body = kube.get_pod(self.api, run.namespace, pod)
        except kube.NotFound as exc:
            raise StaleObject(f"Pod {pod} existed and is gone now; creating it again") from exc
        if _owned(body, run.uid):
            return
        meta = body.get("metadata") or {}
        self.event(
            run,
            actions.Event(
                "Warning",
                "StalePod",
                f"Pod {pod} belongs to an earlier run with this name (uid "
                f"{(meta.get('labels') or {}).get(model.LABEL_RUN_UID) or '?'}): deleting it first",
            ),
        )
        if not meta.get("deletionTimestamp"):
            kube.delete_exact(self.api, run.namespace, "pod", pod, str(meta.get("uid") or ""))
        raise StaleObject(f"waiting for Pod {pod} of an earlier run with this name to be deleted")

    def _resume_latency(self, world: model.World, memory: RunMemory) -> None:
        lost_at = memory.lost_at
        if memory.waiting_running is None or lost_at is None:
            return
        for pod in world.pods.values():
            if pod.name == memory.waiting_running and pod.phase in {"Running", "Succeeded", "Failed"}:
                metrics.resume_latency(time.monotonic() - lost_at, memory.lost_reason)
                memory.waiting_running = memory.lost_at = None

    def execute(self, world: model.World, plan: actions.Plan, memory: RunMemory) -> None:
        run = world.run
        for action in plan.actions:
            self._fence(run)
            self._do(world, action, memory)
        events = plan.events + reconcile.transition_events(world.status, plan.status)
        for event in events:
            self.event(run, event)
        if plan.status is not None:
            patch = phases.status_patch(world.status, plan.status)
            if patch is not None and not (run.deleting and plan.done):
                try:
                    self._write_status(world, patch, memory)
                except kube.NotFound:
                    return
            memory.last_status = plan.status

    def _write_status(self, world: model.World, patch: dict[str, Any], memory: RunMemory) -> None:
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

    def _do(self, world: model.World, action: actions.Action, memory: RunMemory) -> None:
        run, spec = world.run, world.spec
        ns, name = run.namespace, run.name
        match action:
            case actions.AddFinalizer():
                kube.add_finalizer(self.api, ns, name, run.finalizers, run.resource_version)
            case actions.Admit(fork_source=source, fork_checkpoint=checkpoint):
                # What admission records of any run; a fork adds where it starts (copied in one statement).
                admitted: dict[str, Any] = {
                    "run_id": run.uid,
                    "namespace": ns,
                    "name": name,
                    "graph": spec.graph,
                    "input": dict(spec.input),
                    "spec_hash": spec_hash(spec),
                    "durability": spec.durability,
                    "approval_policy": spec.approval.as_json(),
                    "retry_generation": spec.retry_generation,
                }
                if source and checkpoint:
                    fork = spec.fork_of
                    assert fork is not None  # decide plans a fork's admission only for a spec with forkOf
                    record = forks.admission_record(source, fork.run, checkpoint, fork.step, fork.set)
                    store.admit_fork(self.db, **admitted, fork_of=record)
                else:
                    store.admit_run(self.db, **admitted)
            case actions.CreatePod(attempt=attempt, reason=reason, lost_observed=lost, image=image):
                body = pods.manifest(run, spec, attempt, reason, self.settings, image=image)
                pod = str(body["metadata"]["name"])
                try:  # the namespace's worker role and DSN Secret, before its first Pod
                    self.tenants.ensure(ns)
                except tenants.TenantError as exc:
                    if memory.last_pod_error != str(exc):  # once per distinct cause
                        memory.last_pod_error = str(exc)
                        self.event(run, actions.Event("Warning", "TenantProvisioningFailed", str(exc)))
                    raise
                self._clear_foreign_lease(run)
                # The attempt row first: its start reason is on record even if the worker never starts.
                store.record_attempt_start(
                    self.db, run_id=run.uid, attempt=attempt, pod=pod, start_reason=reason
                )
                try:
                    created = kube.create_pod(self.api, ns, body)
                    if not created:
                        self._check_existing_pod(run, pod)
                except kube.KubeError as exc:
                    refused = exc.status is not None and 400 <= exc.status < 500 and exc.status != 409
                    # Tell the user once per distinct refusal (a missing ServiceAccount, quota, ...).
                    if refused and memory.last_pod_error != str(exc):
                        memory.last_pod_error = str(exc)
                        self.event(run, actions.Event("Warning", "PodCreateFailed", f"{pod}: {exc}"))
                    if refused and exc.status is not None:
                        since = memory.pod_refused[3] if memory.pod_refused else time.monotonic()
                        memory.pod_refused = (attempt, exc.status, str(exc), since)
                    raise
                memory.last_pod_error = None
                memory.pod_refused = None
                memory.created_pods[pod] = time.monotonic()
                if created:
                    metrics.attempt_started(reason, ns)
                if lost:
                    memory.waiting_running = pod
                    if memory.lost_at is None:
                        memory.lost_at = time.monotonic()
                    memory.lost_reason = reason
                    if reason == "lease_expired":
                        metrics.lease_takeover(ns)
            case actions.CleanupPod(name=pod, reason=why):
                logger.info("%s/%s: deleting finished worker Pod %s (%s)", ns, name, pod, why)
                kube.delete_pod(self.api, ns, pod)
            case actions.DeletePod(name=pod, force=force):
                kube.delete_pod(self.api, ns, pod, force=force)
                if memory.lost_at is None:
                    memory.lost_at = time.monotonic()
            case actions.RecordLoss(attempt=attempt, reason=reason, message=message, control_plane=cp):
                store.record_attempt_loss(
                    self.db, run_id=run.uid, attempt=attempt, detail=f"{reason}: {message}", control_plane=cp
                )
            case actions.Decide() as decide:
                # Postgres judges decision vs deadline (its clock, its stored deadline) and who was first.
                outcome = store.decide_approval_detail(
                    self.db,
                    approval_id=decide.approval_id,
                    run_id=run.uid,
                    decision=decide.decision,
                    decided_by=decide.decided_by,
                    comment=decide.comment,
                    deadline_action=decide.deadline_action,
                    edits=decide.edits,
                    response=decide.response,
                    action=decide.action,
                )
                if outcome.won or decide.decision != "expired":
                    self.event(run, _decision_event(decide, outcome))
                elif outcome.status == "pending":
                    logger.debug("%s/%s: %s not due by Postgres's clock", ns, name, decide.approval_id)
            case actions.CancelRun(reason=reason):
                store.cancel_run(self.db, run.uid, reason)
            case actions.SetReadOnly():
                store.set_read_only(self.db, run.uid, True)
            case actions.RemoveDecisionAnnotations():
                memory.handled_rvs.add(run.resource_version)
                present = tuple(k for k in model.DECISION_ANNOTATIONS if k in run.annotations)
                present += edits.payload_annotations(run.annotations)
                if present:
                    kube.remove_annotations(self.api, ns, name, present)
            case actions.PinImage(ref=ref, digest=digest, generation=generation):
                store.pin_image(self.db, run_id=run.uid, image=ref, digest=digest, generation=generation)
            case actions.ReopenRun(generation=generation, by=by):
                reopened = store.reopen_run(
                    self.db,
                    run_id=run.uid,
                    generation=generation,
                    by=by,
                    reason=f"retry {generation} by {by}",
                )
                if reopened is not None:
                    text = f"retry generation {generation} by {by}"
                    self.event(run, actions.Event("Normal", "Retried", text))
                else:
                    self.event(
                        run,
                        actions.Event(
                            "Warning",
                            "RetryNotApplied",
                            f"retry generation {generation} by {by} not applied: the run succeeded or that "
                            "generation was applied already",
                        ),
                    )
            case actions.ResolveEffect() as resolve:
                done = store.resolve_effect(
                    self.db,
                    run_id=run.uid,
                    key=resolve.key,
                    outcome=resolve.outcome,
                    by=resolve.by,
                    result=resolve.result,
                )
                shown = resolve.outcome.replace("_", "-")
                if done.resolved:
                    text = f"effect {resolve.key} resolved as {shown} by {resolve.by}"
                    if done.reopened:
                        text += "; the run continues from its checkpoint"
                    self.event(run, actions.Event("Normal", "EffectResolved", text))
                else:
                    self.event(
                        run,
                        actions.Event(
                            "Warning",
                            "ResolveRefused",
                            f"resolving effect {resolve.key} as {shown} by {resolve.by} refused: "
                            f"{done.refusal}",
                        ),
                    )
            case actions.RemoveResolveAnnotations():
                memory.handled_rvs.add(run.resource_version)
                present = tuple(k for k in model.RESOLVE_ANNOTATIONS if k in run.annotations)
                if present:
                    kube.remove_annotations(self.api, ns, name, present)
            case actions.DeleteRun():
                # TTL: the run's rows and checkpoints go too (marked first: a crash in between still purges).
                store.mark_for_purge(self.db, run.uid, after_seconds=0, reason="ttl")
                kube.delete_run(self.api, ns, name)


def _terminated_for(
    memory: RunMemory, by_attempt: Mapping[int, model.PodInfo], now: float
) -> dict[int, float]:
    """attempt -> seconds this process has seen its Pod terminated (``cleanup``'s clock)."""
    seen = memory.terminated_seen
    for name in [n for n in seen if n not in {p.name for p in by_attempt.values()}]:
        del seen[name]  # gone: bounded memory
    return {
        attempt: now - seen.setdefault(pod.name, now) for attempt, pod in by_attempt.items() if pod.terminated
    }


class StaleObject(kube.KubeError):
    """A Pod or Lease of the name this run needs belongs to an earlier run of the same name."""


def _claimed_by(body: Mapping[str, Any]) -> set[str]:
    """The run uids a Pod or Lease names: its ``agentrun.dev/run-uid`` label, else its AgentRun owners."""
    meta = body.get("metadata") or {}
    label = (meta.get("labels") or {}).get(model.LABEL_RUN_UID)
    if label is not None:
        return {str(label)}
    return {str(o.get("uid")) for o in meta.get("ownerReferences") or () if o.get("kind") == "AgentRun"}


def _foreign(body: Mapping[str, Any], run_uid: str) -> bool:
    """Positively another run's object: its run-uid label or its AgentRun owner names another uid."""
    claims = _claimed_by(body)
    return bool(claims) and run_uid not in claims


def _owned(body: Mapping[str, Any], run_uid: str) -> bool:
    """The object belongs to the run with this uid (its ``agentrun.dev/run-uid`` label or owner reference).

    A run recreated under the same name must never take the earlier run's Pods or Lease for its own.
    """
    return run_uid in _claimed_by(body)


def _decision_event(decide: actions.Decide, outcome: store.Decision) -> actions.Event:
    if not outcome.won:
        if outcome.status == "pending" and outcome.past_deadline:
            why = "it arrived after the approval's deadline (onTimeout expires it)"
        elif outcome.status is None:
            why = "no such approval"
        else:
            why = f"it was {outcome.status} first"
        return actions.Event(
            "Warning",
            "ApprovalNotApplied",
            f"{decide.decision} of {decide.approval_id} by {decide.decided_by} not applied: {why}",
        )
    if decide.decision == "approved":
        text = f"approval {decide.approval_id} approved by {decide.decided_by}"
        return actions.Event("Normal", "Approved", text + (f": {decide.comment}" if decide.comment else ""))
    if decide.decision == "rejected":
        text = f"approval {decide.approval_id} rejected by {decide.decided_by}"
        return actions.Event("Normal", "Rejected", text + (f": {decide.comment}" if decide.comment else ""))
    return actions.Event(
        "Warning",
        "ApprovalExpired",
        f"approval {decide.approval_id} expired ({decide.comment}); "
        f"onTimeout action: {decide.deadline_action}",
    )
