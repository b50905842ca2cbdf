"""Plain data the reconciler decides over: the AgentRun's spec, the Postgres row, Pods, approvals.

Built from API bodies and store rows at the I/O edge (``observe``), consumed by pure functions
(``reconcile``, ``phases``, ``pods``). No I/O here.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

FINALIZER = "agentrun.dev/finalizer"
LABEL_RUN = "agentrun.dev/run"
LABEL_ATTEMPT = "agentrun.dev/attempt"
LABEL_RUN_UID = "agentrun.dev/run-uid"
ANN_APPROVE = "agentrun.dev/approve"
ANN_REJECT = "agentrun.dev/reject"
ANN_COMMENT = "agentrun.dev/comment"
ANN_DECIDED_BY = "agentrun.dev/decided-by"
ANN_CREATED_BY = "agentrun.dev/created-by"
DECISION_ANNOTATIONS = (ANN_APPROVE, ANN_REJECT, ANN_COMMENT, ANN_DECIDED_BY)

# agentrun_runs.status values the worker writes (migration 0001).
DB_FINAL = frozenset({"succeeded", "failed", "cancelled"})


def lease_name(run_name: str) -> str:
    return f"agentrun-{run_name}"


def pod_name(run_name: str, attempt: int) -> str:
    return f"{run_name}-{attempt}"


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5  # attempts that may be lost (evicted, killed, ...) before the run is Failed
    backoff_seconds: float = 2.0  # before the 2nd attempt; doubled for each further one
    max_backoff_seconds: float = 60.0


@dataclasses.dataclass(frozen=True)
class ApprovalPolicy:
    timeout_seconds: int = 86400
    on_timeout: str = "escalate"  # escalate | cancel | readOnly
    allow_self_approval: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "timeoutSeconds": self.timeout_seconds,
            "onTimeout": self.on_timeout,
            "allowSelfApproval": self.allow_self_approval,
        }


@dataclasses.dataclass(frozen=True)
class RunSpec:
    graph: str
    input: Mapping[str, Any]
    durability: str = "sync"
    worker: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    lease_duration_seconds: int = 15
    retry: RetryPolicy = dataclasses.field(default_factory=RetryPolicy)
    approval: ApprovalPolicy = dataclasses.field(default_factory=ApprovalPolicy)
    ttl_seconds_after_finished: int | None = None
    cancel: bool = False
    suspend: bool = False

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
            durability=str(spec.get("durability") or "sync"),
            worker=dict(spec.get("worker") or {}),
            lease_duration_seconds=int(lease.get("durationSeconds") or 15),
            retry=RetryPolicy(
                max_attempts=int(retry.get("maxAttempts") or 5),
                backoff_seconds=float(retry.get("backoffSeconds", 2)),
                max_backoff_seconds=float(retry.get("maxBackoffSeconds", 60)),
            ),
            approval=ApprovalPolicy(
                timeout_seconds=int(approval.get("timeoutSeconds") or 86400),
                on_timeout=str(approval.get("onTimeout") or "escalate"),
                allow_self_approval=bool(approval.get("allowSelfApproval", False)),
            ),
            ttl_seconds_after_finished=int(ttl) if ttl is not None else None,
            cancel=bool(spec.get("cancel", False)),
            suspend=bool(spec.get("suspend", False)),
        )


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
class DbRun:
    """The parts of the ``agentrun_runs`` row the operator reads."""

    status: str
    current_step: str | None = None
    lease_epoch: int = 0
    holder: str | None = None
    read_only: bool = False
    result: Any = None
    error: str | None = None
    status_reason: str | None = None
    admitted_at: datetime.datetime | None = None
    finished_at: datetime.datetime | None = None
    updated_at: datetime.datetime | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DbRun:
        return cls(
            status=str(row.get("status") or "admitted"),
            current_step=row.get("current_step"),
            lease_epoch=int(row.get("lease_epoch") or 0),
            holder=row.get("holder"),
            read_only=bool(row.get("read_only")),
            result=row.get("result"),
            error=row.get("error"),
            status_reason=row.get("status_reason"),
            admitted_at=row.get("admitted_at"),
            finished_at=row.get("finished_at"),
            updated_at=row.get("updated_at"),
        )


@dataclasses.dataclass(frozen=True)
class Approval:
    approval_id: str
    status: str  # pending | approved | rejected | expired
    prompt: Any = None
    deadline: datetime.datetime | None = None
    requested_at: datetime.datetime | None = None
    decided_by: str | None = None
    decided_at: datetime.datetime | None = None
    comment: str | None = None
    deadline_action: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Approval:
        return cls(
            approval_id=str(row["approval_id"]),
            status=str(row.get("status") or "pending"),
            prompt=row.get("prompt"),
            deadline=row.get("deadline"),
            requested_at=row.get("requested_at"),
            decided_by=row.get("decided_by"),
            decided_at=row.get("decided_at"),
            comment=row.get("comment"),
            deadline_action=row.get("deadline_action"),
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
            attempt = int(labels.get(LABEL_ATTEMPT, "0"))
        except ValueError:
            attempt = 0
        terminated_reason = None
        exit_code = None
        message = status.get("message")
        disruption = None
        for cond in status.get("conditions") or ():
            if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
                disruption = cond.get("reason") or "DisruptionTarget"
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
        )


@dataclasses.dataclass(frozen=True)
class World:
    """Everything one reconcile looks at, as observed at ``now`` (UTC)."""

    run: RunRef
    spec: RunSpec
    status: Mapping[str, Any]  # the status the operator last wrote
    now: datetime.datetime
    db: DbRun | None = None  # None: not admitted yet
    approvals: tuple[Approval, ...] = ()
    effects: Mapping[str, int] = dataclasses.field(default_factory=dict)
    pods: Mapping[int, PodInfo] = dataclasses.field(default_factory=dict)  # attempt -> Pod
    # The run Lease is held by this pod name and has not changed for longer than its duration, by
    # locally observed time (lease_math.LeaseObserver). None when the Lease is held, free or absent.
    lease_expired_holder: str | None = None
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

    @property
    def pending_approval(self) -> Approval | None:
        for approval in self.approvals:
            if approval.status == "pending":
                return approval
        return None

    def approval(self, approval_id: str) -> Approval | None:
        for approval in self.approvals:
            if approval.approval_id == approval_id:
                return approval
        return None
