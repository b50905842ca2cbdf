"""Observe one AgentRun: the ``model.World`` a reconcile decides on, from the watch caches and Postgres.

Rule: what the watch caches show is a view that may lag or stall; ``world`` reads them as they are, and
``confirm`` replaces the current attempt's Pod and the run's Lease with a fresh read from the API server
before anything destructive is decided (it raises when it cannot read them: the view is then unknown).
Postgres is read through ``agentrun_core.store`` only.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from collections.abc import Mapping
from typing import Any

from agent_operator import kube
from agent_operator import settings as settings_
from agent_operator.decide import forks, model
from agent_operator.observe import memory as memory_
from agent_operator.observe import metrics, throttle
from agentrun_core import budget, lease_math, store
from agentrun_core.api import meta, protocol
from agentrun_core.api import status as api_status
from agentrun_core.store import connect

logger = logging.getLogger(__name__)

ADMISSION_CHECK_SECONDS = 10.0  # how long a look at the admission policies serves the status condition


@dataclasses.dataclass(frozen=True)
class Watched:
    """What the watch caches show of one run when a reconcile starts: the AgentRun's body, its Pods and its
    Lease (kopf's indexes). ``deleting`` overrides the body's deletionTimestamp (the delete handler's)."""

    body: Mapping[str, Any]
    pods: list[model.PodInfo]
    lease: lease_math.LeaseSummary | None
    deleting: bool | None = None


class Observer:
    """Reads one run's World (synchronous: the handlers call the runner in a worker thread)."""

    def __init__(
        self, settings: settings_.Settings, api: kube.ApiClient, db: store.Conn, throttle_: throttle.Starts
    ) -> None:
        self.settings = settings
        self.api = api
        self.db = db
        self.throttle = throttle_
        self._admission: tuple[float, bool | None] | None = None  # (monotonic time, ok)
        self.admission_missing: tuple[str, ...] = ()  # what the last look found absent or not as shipped
        self.admission_mode: str | None = None  # which shipped install the last look found (admission.MODES)

    def _usage(
        self, run_id: str, spec: model.RunSpec, approvals: tuple[store.Approval, ...]
    ) -> dict[str, Any] | None:
        """status.usage of a run with spec.budget: what it spent and the limits in force (one more round
        trip, for budgeted runs only). None when spec.budget cannot be read (the worker fails the run)."""
        try:
            spec_budget = budget.Budget.from_json(spec.budget)
        except budget.BudgetError:
            return None
        spent, calls = store.model_usage(self.db, run_id)
        limits = budget.replay(spec_budget, [(a.prompt, a.status, a.payload) for a in approvals])
        return {
            "calls": calls,
            **spent.to_json(spec_budget.currency),
            "limits": budget.show_limits(limits),
        }

    def admission_ok(self, fresh: bool = False) -> bool | None:
        """Whether the steering-guarding admission policies are installed as shipped (None: unknown).
        ``fresh`` for a steering request about to be applied: never from the cache, which only serves the
        status condition."""
        now = time.monotonic()
        cached = self._admission
        if not fresh and cached is not None and now - cached[0] < ADMISSION_CHECK_SECONDS:
            return cached[1]
        ok: bool | None
        try:
            mode, missing = kube.admission_state(self.api)
            ok = not missing
            self.admission_missing = tuple(missing)
            if missing:
                logger.warning("admission policies missing, steering refused: %s", ", ".join(missing))
            elif mode != self.admission_mode:
                logger.info("admission policies installed as shipped: mode %s", mode)
            self.admission_mode = mode
            metrics.admission_mode(mode)
        except kube.KubeError as exc:
            logger.warning("could not check the admission policies: %s", exc)
            ok = None
            metrics.admission_mode("unknown")
        self._admission = (now, ok)
        return ok

    def world(self, watched: Watched, memory: memory_.RunMemory) -> model.World:
        body, pod_bodies, lease = watched.body, watched.pods, watched.lease
        run = model.RunRef.from_body(body)
        if watched.deleting is not None:
            run = dataclasses.replace(run, deleting=watched.deleting)
        spec = model.RunSpec.from_body(body.get("spec") or {})
        status = memory_.status_base(memory, body)
        # The run, its approvals, effect counts and interventions, in one round trip; and the policy a future
        # approval is requested under follows spec.approval (never while one is pending: that one keeps its
        # snapshot; never for a finished run).
        unstorable = None
        try:
            seen = store.observe_run(self.db, run.uid, spec.approval.as_json())
        except connect.DataError as exc:
            # spec.approval holds what Postgres cannot store (U+0000): read without syncing it, and say so
            # (reconcile refuses to admit such a run) instead of failing every reconcile.
            why = ": ".join(m for m in (exc.diag.message_primary, exc.diag.message_detail) if m) or str(exc)
            unstorable = f"spec.approval cannot be stored in Postgres: {why}"
            seen = store.observe_run(self.db, run.uid, None)
        db, approvals = seen.run, seen.approvals
        by_attempt = {p.attempt: p for p in pod_bodies if p.attempt > 0}
        now_mono = time.monotonic()
        state = memory_.feed_lease(memory, lease, now_mono)
        lease = memory.observer.last
        holder = lease.holder if lease is not None else None
        expired_holder = holder if state == lease_math.LeaseState.EXPIRED else None
        self._renew_failure_metric(memory, lease, now_mono, run.namespace)
        current = max([int(status.get("attempts") or 0), *by_attempt.keys()])
        created = memory.created_pods.get(protocol.pod_name(run.name, current)) if current else None
        for info in by_attempt.values():
            memory.seen_pods[info.name] = info
        terminated_for = memory_.terminated_for(memory, by_attempt, now_mono)
        last_seen = None
        if current and current not in by_attempt:
            name = protocol.pod_name(run.name, current)
            last_seen = memory.final_pods.get(name) or memory.seen_pods.get(name)
        deciding = any(k in run.annotations for k in (meta.APPROVE, meta.REJECT))
        steering = deciding or _steering_requested(run, spec, status, db)
        guarded = steering or any(a.status == "pending" for a in approvals)
        pod = by_attempt.get(current)
        alive = pod is not None and pod.alive
        memory.blocked = memory_.since(
            memory.blocked, pod.name if alive and pod and pod.blocked else None, now_mono
        )
        unclaimed = (
            alive
            and pod is not None
            and pod.phase == api_status.POD_RUNNING
            and holder != pod.name
            and (db is None or db.holder != pod.name)
        )
        memory.unclaimed = memory_.since(memory.unclaimed, pod.name if unclaimed and pod else None, now_mono)
        refused = memory.pod_refused
        fork_source = None
        if db is None and spec.fork_of is not None and not run.deleting:
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
            carried = forks.carried_problem(fork.run, found.checkpoint_id, found.carried, fork.approve)
            problem = fork.problem or found.problem or carried
            fork_source = model.ForkSource(found.run_id, found.checkpoint_id, problem)
        ok = self.admission_ok(fresh=steering) if guarded else None
        four_eyes: bool = False
        approver_groups: tuple[str, ...] = ()
        if deciding and ok:
            try:
                four_eyes, approver_groups = kube.namespace_approval_policy(self.api, run.namespace)
            except kube.KubeError as exc:
                logger.warning("could not read namespace %s's approval policy: %s", run.namespace, exc)
                ok = None  # decide nothing until it is read
        clock = None
        if spec.has_deadline and db is not None and db.status not in model.DB_FINAL:
            clock = store.deadline_clock(self.db, run.uid)  # a second round trip only for such runs
        group = spec.concurrency.group if spec.concurrency is not None else None
        wait = self.throttle.waits_for(run.namespace, run.uid, group)
        return model.World(
            run=run,
            spec=spec,
            unstorable=unstorable,
            status=status,
            now=datetime.datetime.now(datetime.UTC),
            db=db,
            approvals=approvals,
            interventions=seen.interventions,
            effects=seen.effects,
            usage=self._usage(run.uid, spec, approvals) if spec.budget and db is not None else None,
            pods=by_attempt,
            lease_expired_holder=expired_holder,
            lease_holder=holder,
            pod_created_ago=(now_mono - created) if created is not None else None,
            annotations_handled=run.resource_version in memory.handled_rvs,
            last_seen_pod=last_seen,
            # None: not looked at (nothing to guard)
            admission_ok=ok,
            admission_missing=self.admission_missing if ok is False else (),
            namespace_four_eyes=four_eyes,
            namespace_approver_groups=approver_groups,
            db_now=seen.db_now,
            blocked_for=now_mono - memory.blocked[1] if memory.blocked else None,
            unclaimed_for=now_mono - memory.unclaimed[1] if memory.unclaimed else None,
            pod_refused=(refused[0], refused[1], refused[2], now_mono - refused[3]) if refused else None,
            start_allowed=wait is None,
            start_wait=wait or "",
            pods_terminated_for=terminated_for,
            default_image=self.settings.worker.image,
            fork_source=fork_source,
            notify_problem=memory.notify_problem,
            deadline_clock=clock,
        )

    def confirm(self, world: model.World, memory: memory_.RunMemory) -> model.World:
        """The World with the current attempt's Pod and the run's Lease read fresh from the API server.

        Raises ``kube.KubeError`` when either cannot be read: the caller then does nothing destructive.
        """
        run = world.run
        current = max([int(world.status.get("attempts") or 0), *world.pods.keys()])
        by_attempt = dict(world.pods)
        last_seen = world.last_seen_pod
        if current:
            name = protocol.pod_name(run.name, current)
            try:
                body = kube.get_pod(self.api, run.namespace, name)
            except kube.NotFound:
                body = None
            info = (
                model.PodInfo.from_body(body) if body is not None and memory_.owned(body, run.uid) else None
            )
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
                self.api, run.namespace, protocol.lease_name(run.name), timeout=kube.TIMEOUT
            )
        except kube.NotFound:
            lease_body = None
        if lease_body is not None and memory_.foreign(lease_body, run.uid):
            lease_body = None  # an earlier run's Lease of the same name: nothing about this run's worker
        fresh = lease_math.LeaseSummary.from_body(lease_body) if lease_body is not None else None
        now = time.monotonic()
        state = memory_.feed_lease(memory, fresh, now)
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
            lease_lapsed_in_outage=expired and memory_.lapsed_in(memory.outage, memory.observer, now),
            last_seen_pod=last_seen,
            live=True,
        )

    def _renew_failure_metric(
        self, memory: memory_.RunMemory, lease: lease_math.LeaseSummary | None, now: float, namespace: str
    ) -> None:
        if lease is None or lease.free:
            return
        overdue = memory.observer.unchanged_for(now) > lease_math.renew_deadline(memory.observer.duration())
        if overdue and memory.renew_failure_version != lease.version():
            memory.renew_failure_version = lease.version()
            metrics.lease_renew_failure(namespace)

    # --- reconcile ---------------------------------------------------------------------------------------


def _steering_requested(
    run: model.RunRef, spec: model.RunSpec, status: Mapping[str, Any], db: store.Run | None
) -> bool:
    """A steering verb waits to be applied (resolve, retry, a fork to admit, a resume), or a refusal is
    shown: the admission policies must be looked at, fresh (agent_operator.decide.admission)."""
    if meta.RESOLVE in run.annotations:
        return True
    conditions = status.get("conditions") or ()
    if any(c.get("type") == "ApprovalPolicyMissing" and c.get("status") == "True" for c in conditions):
        return True  # keep looking until the policies are back, so the condition says so
    if db is None:
        return spec.fork_of is not None
    wanted = spec.retry_generation
    if wanted > db.retry_generation and int(status.get("observedRetryGeneration") or 0) < wanted:
        return True
    return not spec.suspend and status.get("phase") == api_status.SUSPENDED
