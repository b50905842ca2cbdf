"""Plain data the reconciler decides over: the AgentRun's spec, the Postgres rows, Pods, approvals.

Built from API bodies and store rows at the I/O edge (``observe``), consumed by pure functions
(``reconcile``, ``phases``, ``pods``). No I/O here. Postgres rows are the store's own row classes
(``store.Run``, ``store.Approval``, ``store.Intervention``), used as they are read, never copied.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from agentrun_core import deadline_math, store
from agentrun_core.api import protocol
from agentrun_core.api import status as api_status
from agentrun_core.api.run_spec import ApprovalPolicy as ApprovalPolicy
from agentrun_core.api.run_spec import Concurrency as Concurrency
from agentrun_core.api.run_spec import ForkRequest as ForkRequest
from agentrun_core.api.run_spec import ForkSource as ForkSource
from agentrun_core.api.run_spec import RetryPolicy as RetryPolicy
from agentrun_core.api.run_spec import RunSpec as RunSpec

# The steering contract's names (agentrun_core.api.annotations), under the names this package reads them by.

# Container waiting reasons that mean "this Pod will not start by itself" (kubelet's names).
_WAITING = "CreateContainerConfigError CreateContainerError ErrImagePull ImagePullBackOff InvalidImageName"
BLOCKED_WAITING_REASONS = frozenset((*_WAITING.split(), "ErrImageNeverPull", "RunContainerError"))

# Steering (agent_operator.decide.steering): resolve an effect of unknown outcome; who retried / resolved
# (stamped by the MutatingAdmissionPolicy in deploy/admission/steer-mutating-policy.yaml from
# request.userInfo).

# The final agentrun_runs.status values (defined in agentrun_core.api.protocol).
DB_FINAL = frozenset(protocol.FINAL_RUN_STATUSES)


@dataclasses.dataclass(frozen=True)
class RunRef:
    """The AgentRun object's identity and metadata (not its spec or status)."""

    namespace: str
    name: str
    uid: str
    generation: int = 1
    resource_version: str = ""
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    finalizers: tuple[str, ...] = ()
    deleting: bool = False

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RunRef:
        meta = body.get("metadata") or {}
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            generation=int(meta.get("generation") or 1),
            resource_version=str(meta.get("resourceVersion") or ""),
            annotations=dict(meta.get("annotations") or {}),
            finalizers=tuple(meta.get("finalizers") or ()),
            deleting=bool(meta.get("deletionTimestamp")),
        )


@dataclasses.dataclass(frozen=True)
class PodInfo:
    """What the reconciler needs to know about one attempt's Pod."""

    name: str
    attempt: int
    phase: str = api_status.POD_PENDING  # Pending | Running | Succeeded | Failed | Unknown (core/v1)
    deleting: bool = False
    reason: str | None = None  # status.reason (Evicted, Preempting, ...)
    terminated_reason: str | None = None  # container state terminated reason (OOMKilled, Error, ...)
    exit_code: int | None = None
    message: str | None = None
    disruption: str | None = None  # reason of a DisruptionTarget=True condition (EvictionByEvictionAPI, ...)
    # Why the Pod cannot start, as kubelet/scheduler say it: ("Unschedulable", message) from
    # PodScheduled=False, or the container's waiting reason (CreateContainerConfigError, ...). None: fine.
    blocked: tuple[str, str] | None = None
    image: str | None = None  # the worker container's image as the Pod spec names it
    image_id: str | None = None  # what the node says it runs (containerStatuses[].imageID; "" on some)
    started: bool = False  # the worker container was running or has run (its imageID is meaningful)
    held: bool = False  # carries protocol.POD_FINALIZER: a delete keeps it until the operator releases it
    force_deleted: bool = False  # deleted with grace period 0 (by someone, or by the kubelet at its end)
    concurrency: str | None = None  # protocol.LABEL_CONCURRENCY: the spec.concurrency key it counts in
    node: str | None = None  # spec.nodeName: where it was bound (the node a lost worker may still run on)

    @property
    def terminated(self) -> bool:
        return self.phase in api_status.POD_TERMINAL

    @property
    def alive(self) -> bool:
        return not self.terminated and not self.deleting

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PodInfo:
        meta = body.get("metadata") or {}
        status = body.get("status") or {}
        labels = meta.get("labels") or {}
        try:
            attempt = int(labels.get(protocol.LABEL_ATTEMPT, "0"))
        except ValueError:
            attempt = 0
        terminated_reason = None
        exit_code = None
        message = status.get("message")
        disruption = None
        for cond in status.get("conditions") or ():
            if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
                disruption = cond.get("reason") or "DisruptionTarget"
        blocked = None
        for cond in status.get("conditions") or ():
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                blocked = (str(cond.get("reason") or "Unschedulable"), str(cond.get("message") or ""))
        for cs in status.get("containerStatuses") or ():
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in BLOCKED_WAITING_REASONS:
                blocked = (str(waiting["reason"]), str(waiting.get("message") or ""))
        image = next(
            (
                c.get("image")
                for c in (body.get("spec") or {}).get("containers") or ()
                if c.get("name") == "worker"
            ),
            None,
        )
        image_id, started = None, False
        for cs in status.get("containerStatuses") or ():
            if cs.get("name") == "worker":
                image_id = cs.get("imageID") or None
                state = cs.get("state") or {}
                started = bool(state.get("running") or state.get("terminated"))
        for cs in status.get("containerStatuses") or ():
            term = (cs.get("state") or {}).get("terminated")
            if term:
                terminated_reason = term.get("reason")
                exit_code = term.get("exitCode")
                message = term.get("message") or message
                break
        return cls(
            name=str(meta.get("name") or ""),
            attempt=attempt,
            phase=str(status.get("phase") or api_status.POD_PENDING),
            deleting=bool(meta.get("deletionTimestamp")),
            reason=status.get("reason"),
            terminated_reason=terminated_reason,
            exit_code=int(exit_code) if exit_code is not None else None,
            message=message,
            disruption=disruption,
            blocked=blocked,
            image=image,
            image_id=image_id,
            started=started,
            held=protocol.POD_FINALIZER in (meta.get("finalizers") or ()),
            force_deleted=bool(meta.get("deletionTimestamp")) and meta.get("deletionGracePeriodSeconds") == 0,
            concurrency=labels.get(protocol.LABEL_CONCURRENCY),
            node=(body.get("spec") or {}).get("nodeName") or None,
        )


@dataclasses.dataclass(frozen=True)
class World:
    """Everything one reconcile looks at, as observed at ``now`` (UTC)."""

    run: RunRef
    spec: RunSpec
    status: Mapping[str, Any]  # the status the operator last wrote
    now: datetime.datetime
    db: store.Run | None = None  # None: not admitted yet
    approvals: tuple[store.Approval, ...] = ()
    interventions: tuple[store.Intervention, ...] = ()  # read only when the run has any
    effects: Mapping[str, int] = dataclasses.field(default_factory=dict)
    usage: Mapping[str, Any] | None = None  # status.usage (runs with spec.budget; observe.world)
    pods: Mapping[int, PodInfo] = dataclasses.field(default_factory=dict)  # attempt -> Pod
    # The run Lease is held by this pod name and has not changed for longer than its duration, by
    # locally observed time (lease_math.LeaseObserver). None when the Lease is held, free or absent.
    lease_expired_holder: str | None = None
    # That expiry overlaps a period in which this operator could not reach the API server (its fresh reads
    # failed): the worker could not renew either — a control-plane loss, not the run's (runner.confirm).
    lease_lapsed_in_outage: bool = False
    lease_holder: str | None = None
    # Seconds since the current attempt's Pod was created by us (None: not by this process), to
    # tell "deleted" from "the watch has not delivered it yet".
    pod_created_ago: float | None = None
    # The decision annotations of this resourceVersion were already handled (the watch may still show
    # them after the operator removed them).
    annotations_handled: bool = False
    # The current attempt's Pod as last seen, when it is gone from the cache now: why it ended
    # (eviction, OOM) is often only visible in its last state.
    last_seen_pod: PodInfo | None = None
    # The steering admission objects are installed as shipped (None: unknown); without them no decision,
    # resolve, retry, fork or resume is applied (agent_operator.decide.admission). When not: each one and why.
    admission_ok: bool | None = True
    admission_missing: tuple[str, ...] = ()
    # The Namespace's approval policy (not the author's), read when a decision is applied:
    # meta.LABEL_FOUR_EYES
    # "true" (no self-approval whatever spec.approval says), meta.APPROVER_GROUPS (who decides).
    namespace_four_eyes: bool = False
    namespace_approver_groups: tuple[str, ...] = ()
    # The current attempt's Pod and the run's Lease in this World were read from the API server during this
    # reconcile (a fresh read), not only from the watch-fed indexes, which may lag or stall.
    live: bool = False
    # The current attempt has been blocked (its Pod's ``blocked``, or Running without its worker holding
    # the Lease) for this long, by the operator's clock; None when it is not blocked.
    blocked_for: float | None = None
    unclaimed_for: float | None = None
    # Postgres' now() read with the run row: deadlines on Postgres timestamps (finished_at) use this clock.
    db_now: datetime.datetime | None = None
    # The API server refused to create the Pod of this attempt: (attempt, HTTP status, message, seconds).
    pod_refused: tuple[int, int, str, float] | None = None
    # The start throttle lets this run create a worker Pod now (agent_operator.observe.throttle: its
    # namespace's
    # limit and its spec.concurrency key's); else start_wait says which limit it waits for.
    start_allowed: bool = True
    start_wait: str = ""
    # attempt -> seconds this operator has seen that attempt's Pod terminated (agent_operator.decide.cleanup).
    pods_terminated_for: Mapping[int, float] = dataclasses.field(default_factory=dict)
    # Why a part of the spec the operator stores cannot be stored in Postgres (U+0000), or None.
    unstorable: str | None = None
    # The worker image when spec.worker.image names none (AGENTRUN_WORKER_IMAGE): what a run is pinned to.
    default_image: str = "agentrun:dev"
    # A fork not admitted yet: its source as resolved in Postgres (None: not a fork, or already admitted).
    fork_source: ForkSource | None = None
    # The last notification problem (reason, message) of this process (agent_operator.act.notifier), or None.
    notify_problem: tuple[str, str] | None = None
    # What the run's deadlines are measured from (Postgres' clock); read only for a run with a deadline that
    # is not finished (agent_operator.decide.deadlines), else None.
    deadline_clock: deadline_math.Clock | None = None

    @property
    def pending_approval(self) -> store.Approval | None:
        for approval in self.approvals:
            if approval.status == protocol.APPROVAL_PENDING:
                return approval
        return None

    @property
    def parked_waiting(self) -> bool:
        """The last attempt parked the run on an approval still pending: no worker runs, none is started
        until a human decides (or the deadline does)."""
        return self.db is not None and self.db.status == "parked" and self.pending_approval is not None

    def approval(self, approval_id: str) -> store.Approval | None:
        for approval in self.approvals:
            if approval.approval_id == approval_id:
                return approval
        return None
