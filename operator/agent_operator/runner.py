"""Observe one AgentRun, decide (``reconcile.decide``), carry the plan out. The I/O side of a reconcile.

Runs in a worker thread (the handlers call it through ``asyncio.to_thread``): the Kubernetes calls go
through ``agent_operator.kube`` and the SQL through ``agent_worker.store``, both synchronous.
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
from collections.abc import Mapping
from typing import Any

from agent_operator import actions, kube, metrics, model, phases, pods, reconcile
from agent_operator import settings as settings_
from agent_worker import lease_math, store

logger = logging.getLogger(__name__)
COMPONENT = "agentrun-operator"


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


def spec_hash(spec: model.RunSpec) -> str:
    doc = {"graph": spec.graph, "input": spec.input, "durability": spec.durability}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:32]


class Runner:
    def __init__(self, settings: settings_.Settings, api: kube.ApiClient, db: store.Conn) -> None:
        self.settings = settings
        self.api = api
        self.db = db

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
        db_run = store.get_run(self.db, run.uid)
        db = model.DbRun.from_row(dataclasses.asdict(db_run)) if db_run is not None else None
        approvals: tuple[model.Approval, ...] = ()
        effects: dict[str, int] = {}
        if db_run is not None:
            approvals = tuple(
                model.Approval.from_row(dataclasses.asdict(a)) for a in store.list_approvals(self.db, run.uid)
            )
            effects = store.effect_counts(self.db, run.uid)
        by_attempt = {p.attempt: p for p in pod_bodies if p.attempt > 0}
        now_mono = time.monotonic()
        state = memory.observer.observe(lease, now_mono)
        holder = lease.holder if lease is not None else None
        expired_holder = holder if state == lease_math.LeaseState.EXPIRED else None
        self._renew_failure_metric(memory, lease, now_mono, run.namespace)
        current = max([int(status.get("attempts") or 0), *by_attempt.keys()])
        created = memory.created_pods.get(model.pod_name(run.name, current)) if current else None
        for info in by_attempt.values():
            memory.seen_pods[info.name] = info
        last_seen = None
        if current and current not in by_attempt:
            last_seen = memory.seen_pods.get(model.pod_name(run.name, current))
        return model.World(
            run=run,
            spec=spec,
            status=status,
            now=datetime.datetime.now(datetime.UTC),
            db=db,
            approvals=approvals,
            effects=effects,
            pods=by_attempt,
            lease_expired_holder=expired_holder,
            lease_holder=holder,
            pod_created_ago=(now_mono - created) if created is not None else None,
            annotations_handled=run.resource_version in memory.handled_rvs,
            last_seen_pod=last_seen,
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
        plan = reconcile.decide(
            world, self.settings.reconcile.poll_seconds, self.settings.reconcile.idle_poll_seconds
        )
        self._resume_latency(world, memory)
        self.execute(world, plan, memory)
        return plan

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
            self._do(world, action, memory)
        events = plan.events + reconcile.transition_events(world.status, plan.status)
        for event in events:
            self.event(run, event)
        if plan.status is not None:
            patch = phases.status_patch(world.status, plan.status)
            if patch is not None and not (run.deleting and plan.done):
                try:
                    kube.patch_status(self.api, run.namespace, run.name, patch)
                except kube.NotFound:
                    return
            memory.last_status = plan.status

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
            case actions.Admit():
                store.admit_run(
                    self.db,
                    run_id=run.uid,
                    namespace=ns,
                    name=name,
                    graph=spec.graph,
                    input=dict(spec.input),
                    spec_hash=spec_hash(spec),
                    durability=spec.durability,
                    approval_policy=spec.approval.as_json(),
                )
            case actions.CreatePod(attempt=attempt, reason=reason, lost_observed=lost):
                body = pods.manifest(run, spec, attempt, reason, self.settings)
                pod = str(body["metadata"]["name"])
                # The attempt row first: its start reason is on record even if the worker never starts.
                store.record_attempt_start(
                    self.db, run_id=run.uid, attempt=attempt, pod=pod, start_reason=reason
                )
                try:
                    created = kube.create_pod(self.api, ns, body)
                except kube.KubeError as exc:
                    refused = exc.status is not None and 400 <= exc.status < 500 and exc.status != 409
                    # Tell the user once per distinct refusal (a missing ServiceAccount, quota, ...).
                    if refused and memory.last_pod_error != str(exc):
                        memory.last_pod_error = str(exc)
                        self.event(run, actions.Event("Warning", "PodCreateFailed", f"{pod}: {exc}"))
                    raise
                memory.last_pod_error = None
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
            case actions.DeletePod(name=pod, force=force):
                kube.delete_pod(self.api, ns, pod, force=force)
                if memory.lost_at is None:
                    memory.lost_at = time.monotonic()
            case actions.RecordLoss(attempt=attempt, reason=reason, message=message):
                rows = {a.attempt: a for a in store.list_attempts(self.db, run.uid)}
                row = rows.get(attempt)
                if row is not None and row.outcome is None:
                    store.record_attempt_end(
                        self.db,
                        run_id=run.uid,
                        attempt=attempt,
                        outcome="lost",
                        detail=f"{reason}: {message}",
                    )
            case actions.Decide() as decide:
                won = store.decide_approval(
                    self.db,
                    approval_id=decide.approval_id,
                    run_id=run.uid,
                    decision=decide.decision,
                    decided_by=decide.decided_by,
                    comment=decide.comment,
                    deadline_action=decide.deadline_action,
                )
                self.event(run, _decision_event(decide, won))
            case actions.CancelRun(reason=reason):
                store.cancel_run(self.db, run.uid, reason)
            case actions.SetReadOnly():
                store.set_read_only(self.db, run.uid, True)
            case actions.RemoveDecisionAnnotations():
                memory.handled_rvs.add(run.resource_version)
                present = tuple(k for k in model.DECISION_ANNOTATIONS if k in run.annotations)
                if present:
                    kube.remove_annotations(self.api, ns, name, present)
            case actions.DeleteRun():
                kube.delete_run(self.api, ns, name)


def _decision_event(decide: actions.Decide, won: bool) -> actions.Event:
    if not won:
        return actions.Event(
            "Warning",
            "ApprovalNotApplied",
            f"{decide.decision} of {decide.approval_id} by {decide.decided_by} not applied: "
            "it was decided (or expired) first",
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
