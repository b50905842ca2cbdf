"""Plain data the reconciler decides over: the AgentRun's spec, the Postgres rows, Pods, approvals.

Built from API bodies and store rows at the I/O edge (``observe``), consumed by pure functions
(``reconcile``, ``phases``, ``pods``). No I/O here. Postgres rows are the store's own row classes
(``store.Run``, ``store.Approval``, ``store.Intervention``), used as they are read, never copied.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping
from typing import Any

from agent_operator import spec_schema
from agentrun_core import deadline_math, protocol, store

# Spec defaults are the CRD's (agent_operator.spec_schema): a field the API server did not default (its
# object absent, or a body not from the API server) reads as the API server would have defaulted it.
_DEFAULT = spec_schema.default

FINALIZER = "agentrun.dev/finalizer"
ANN_APPROVE = "agentrun.dev/approve"
ANN_REJECT = "agentrun.dev/reject"
ANN_COMMENT = "agentrun.dev/comment"
ANN_DECIDED_BY = "agentrun.dev/decided-by"
ANN_CREATED_BY = "agentrun.dev/created-by"
# The decider's groups as the API server saw them (comma-joined), stamped with decided-by: the operator
# checks spec.approval.approvers.groups against them.
ANN_DECIDED_GROUPS = "agentrun.dev/decided-by-groups"
DECISION_ANNOTATIONS = (ANN_APPROVE, ANN_REJECT, ANN_COMMENT, ANN_DECIDED_BY, ANN_DECIDED_GROUPS)

# Container waiting reasons that mean "this Pod will not start by itself" (kubelet's names).
_WAITING = "CreateContainerConfigError CreateContainerError ErrImagePull ImagePullBackOff InvalidImageName"
BLOCKED_WAITING_REASONS = frozenset((*_WAITING.split(), "ErrImageNeverPull", "RunContainerError"))

# Steering (agent_operator.steering): resolve an effect of unknown outcome; who retried / resolved (stamped by
# the MutatingAdmissionPolicy in deploy/admission/steer-mutating-policy.yaml from request.userInfo).
LABEL_FOUR_EYES = "agentrun.dev/require-four-eyes"  # on the Namespace: "true" requires four eyes
ANN_APPROVER_GROUPS = "agentrun.dev/approver-groups"  # on the Namespace: "group-a,group-b"
ANN_RESOLVE = "agentrun.dev/resolve"  # "<effect key>=sent" | "<effect key>=not-sent"
ANN_RESOLVE_RESULT = "agentrun.dev/resolve-result"  # JSON: the tool's return value for =sent
ANN_RESOLVED_BY = "agentrun.dev/resolved-by"
ANN_RETRIED_BY = "agentrun.dev/retried-by"
RESOLVE_ANNOTATIONS = (ANN_RESOLVE, ANN_RESOLVE_RESULT, ANN_RESOLVED_BY)

# The final agentrun_runs.status values (defined in agentrun_core.protocol).
DB_FINAL = frozenset(protocol.FINAL_RUN_STATUSES)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = _DEFAULT("retry.maxAttempts")  # attempts that may be lost before the run is Failed
    backoff_seconds: float = float(_DEFAULT("retry.backoffSeconds"))  # before the 2nd attempt; then doubled
    max_backoff_seconds: float = float(_DEFAULT("retry.maxBackoffSeconds"))


@dataclasses.dataclass(frozen=True)
class ApprovalPolicy:
    timeout_seconds: int = _DEFAULT("approval.timeoutSeconds")
    on_timeout: str = _DEFAULT("approval.onTimeout")  # one of spec_schema.ON_TIMEOUT
    allow_self_approval: bool = _DEFAULT("approval.allowSelfApproval")
    approver_users: tuple[str, ...] = ()  # spec.approval.approvers: empty = anyone with the `approve` verb
    approver_groups: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "timeoutSeconds": self.timeout_seconds,
            "onTimeout": self.on_timeout,
            "allowSelfApproval": self.allow_self_approval,
        }
        if self.approver_users or self.approver_groups:
            doc["approvers"] = {"users": list(self.approver_users), "groups": list(self.approver_groups)}
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None) -> ApprovalPolicy:
        """From ``spec.approval`` (or its copy in Postgres: the same shape)."""
        doc = doc or {}
        approvers = doc.get("approvers") or {}
        return cls(
            timeout_seconds=int(doc.get("timeoutSeconds") or cls.timeout_seconds),
            on_timeout=str(doc.get("onTimeout") or cls.on_timeout),
            allow_self_approval=bool(doc.get("allowSelfApproval", cls.allow_self_approval)),
            approver_users=tuple(str(u) for u in approvers.get("users") or ()),
            approver_groups=tuple(str(g) for g in approvers.get("groups") or ()),
        )


@dataclasses.dataclass(frozen=True)
class ForkRequest:
    """``spec.forkOf``: start from a checkpoint of another run of this namespace (kubectl agentrun fork)."""

    run: str
    run_uid: str | None = None
    checkpoint: str | None = None
    step: str | None = None
    set: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # dotted state path -> new value
    problem: str | None = None  # setJson that is not JSON, or a path in both set and setJson
    # spec.forkOf.approve (implied by edits): the creator approves what the fork carries past a gate;
    approve: bool = False  # agentrun-fork admitted it only with the RBAC verb approve on the source

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None) -> ForkRequest | None:
        if not doc or not doc.get("run"):
            return None
        edits: dict[str, Any] = dict(doc.get("set") or {})
        problem = None
        for path, text in (doc.get("setJson") or {}).items():
            if path in edits:
                problem = f"spec.forkOf: {path!r} is in both set and setJson"
            try:
                edits[path] = json.loads(text)
            except ValueError as exc:
                problem = f"spec.forkOf.setJson.{path} is not JSON: {exc}"
        return cls(
            run=str(doc["run"]),
            run_uid=str(doc["runUid"]) if doc.get("runUid") else None,
            checkpoint=str(doc["checkpoint"]) if doc.get("checkpoint") else None,
            step=str(doc["step"]) if doc.get("step") else None,
            set=edits,
            problem=problem,
            approve=bool(doc.get("approve")) or bool(edits),
        )

    @property
    def set_keys(self) -> tuple[str, ...]:
        """The top-level state keys the edits change (``draft.body`` changes ``draft``)."""
        return tuple(sorted({path.split(".", 1)[0] for path in self.set}))


@dataclasses.dataclass(frozen=True)
class ForkSource:
    """The source of a fork as Postgres resolved it before admission; ``problem`` when it cannot be."""

    run_id: str | None
    checkpoint_id: str | None
    problem: str | None = None


@dataclasses.dataclass(frozen=True)
class RunSpec:
    graph: str
    input: Mapping[str, Any]
    durability: str = _DEFAULT("durability")  # one of protocol.DURABILITIES
    worker: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    lease_duration_seconds: int = _DEFAULT("lease.durationSeconds")
    retry: RetryPolicy = dataclasses.field(default_factory=RetryPolicy)
    approval: ApprovalPolicy = dataclasses.field(default_factory=ApprovalPolicy)
    ttl_seconds_after_finished: int | None = None
    cancel: bool = _DEFAULT("cancel")
    suspend: bool = _DEFAULT("suspend")
    retry_generation: int = 0  # raised by a human to retry a stopped run (only ever increases)
    fork_of: ForkRequest | None = None
    notify: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # spec.approval.notify (notify.py)
    concurrency: Concurrency | None = None  # spec.concurrency (agent_operator.throttle.Groups)
    # spec.activeDeadlineSeconds / spec.progressDeadlineSeconds (agent_operator.deadlines); None: no limit
    active_deadline_seconds: int | None = None
    progress_deadline_seconds: int | None = None
    budget: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # spec.budget (agentrun_core.budget)

    @classmethod
    def from_body(cls, spec: Mapping[str, Any]) -> RunSpec:
        """From ``spec`` as the API server stores it (CRD defaults applied; missing parts tolerated)."""
        retry = spec.get("retry") or {}
        approval = spec.get("approval") or {}
        lease = spec.get("lease") or {}
        ttl = spec.get("ttlSecondsAfterFinished")
        return cls(
            graph=str(spec.get("graph") or ""),
            input=dict(spec.get("input") or {}),
            durability=str(spec.get("durability") or cls.durability),
            worker=dict(spec.get("worker") or {}),
            lease_duration_seconds=int(lease.get("durationSeconds") or cls.lease_duration_seconds),
            retry=RetryPolicy(
                max_attempts=int(retry.get("maxAttempts") or RetryPolicy.max_attempts),
                backoff_seconds=float(retry.get("backoffSeconds", RetryPolicy.backoff_seconds)),
                max_backoff_seconds=float(retry.get("maxBackoffSeconds", RetryPolicy.max_backoff_seconds)),
            ),
            approval=ApprovalPolicy.from_json(approval),
            ttl_seconds_after_finished=int(ttl) if ttl is not None else None,
            cancel=bool(spec.get("cancel", cls.cancel)),
            suspend=bool(spec.get("suspend", cls.suspend)),
            retry_generation=int(spec.get("retryGeneration") or 0),
            fork_of=ForkRequest.from_json(spec.get("forkOf")),
            notify=dict(approval.get("notify") or {}),
            concurrency=Concurrency.from_json(spec.get("concurrency"), graph=str(spec.get("graph") or "")),
            active_deadline_seconds=_positive(spec.get("activeDeadlineSeconds")),
            progress_deadline_seconds=_positive(spec.get("progressDeadlineSeconds")),
            budget=dict(spec.get("budget") or {}),
        )

    @property
    def has_deadline(self) -> bool:
        return self.active_deadline_seconds is not None or self.progress_deadline_seconds is not None


def _positive(value: Any) -> int | None:
    """A deadline as the CRD admits it (a positive integer); anything else (a body not from the API
    server) is no deadline rather than one that fails the run at once."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


@dataclasses.dataclass(frozen=True)
class Concurrency:
    """``spec.concurrency``: at most ``limit`` runs of the namespace sharing ``key`` have a worker Pod."""

    key: str
    limit: int

    @classmethod
    def from_json(cls, doc: Any, *, graph: str) -> Concurrency | None:
        if not isinstance(doc, Mapping) or not doc.get("limit"):
            return None
        return cls(key=str(doc.get("key") or graph), limit=max(1, int(doc["limit"])))

    @property
    def group(self) -> tuple[str, int]:
        """As the start throttle takes it (agent_operator.throttle.Group)."""
        return (self.key, self.limit)


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
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed | Unknown
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

    @property
    def terminated(self) -> bool:
        return self.phase in {"Succeeded", "Failed"}

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
            phase=str(status.get("phase") or "Pending"),
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
    usage: Mapping[str, Any] | None = None  # status.usage (runs with spec.budget; agent_operator.observe)
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
    # resolve, retry, fork or resume is applied (agent_operator.admission). When not: each one and why.
    admission_ok: bool | None = True
    admission_missing: tuple[str, ...] = ()
    # The Namespace's approval policy (not the author's), read when a decision is applied: LABEL_FOUR_EYES
    # "true" (no self-approval whatever spec.approval says), ANN_APPROVER_GROUPS (who decides).
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
    # The start throttle lets this run create a worker Pod now (agent_operator.throttle: its namespace's
    # limit and its spec.concurrency key's); else start_wait says which limit it waits for.
    start_allowed: bool = True
    start_wait: str = ""
    # attempt -> seconds this operator has seen that attempt's Pod terminated (agent_operator.cleanup).
    pods_terminated_for: Mapping[int, float] = dataclasses.field(default_factory=dict)
    # Why a part of the spec the operator stores cannot be stored in Postgres (U+0000), or None.
    unstorable: str | None = None
    # The worker image when spec.worker.image names none (AGENTRUN_WORKER_IMAGE): what a run is pinned to.
    default_image: str = "agentrun:dev"
    # A fork not admitted yet: its source as resolved in Postgres (None: not a fork, or already admitted).
    fork_source: ForkSource | None = None
    # The last notification problem (reason, message) of this process (agent_operator.notifier), or None.
    notify_problem: tuple[str, str] | None = None
    # What the run's deadlines are measured from (Postgres' clock); read only for a run with a deadline that
    # is not finished (agent_operator.deadlines), else None.
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
