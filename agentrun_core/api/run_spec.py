"""The AgentRun's spec as the reconciler decides over it: retry, approval policy, fork request, concurrency
and the whole ``RunSpec``, parsed from the API body (``RunSpec.from_body``). Pure; re-exported by
``agent_operator.decide.model``, whose names the rest of the operator uses.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from agentrun_core.api import spec_schema

# Spec defaults are the CRD's (agentrun_core.api.spec_schema): a field the API server did not default (its
# object absent, or a body not from the API server) reads as the API server would have defaulted it.
_DEFAULT = spec_schema.default


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
    concurrency: Concurrency | None = None  # spec.concurrency (agent_operator.observe.throttle.Groups)
    # spec.activeDeadlineSeconds / spec.progressDeadlineSeconds (agent_operator.decide.deadlines); None: no
    # limit
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
        """As the start throttle takes it (agent_operator.observe.throttle.Group)."""
        return (self.key, self.limit)
