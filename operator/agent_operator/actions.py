"""What a reconcile decided to do: plain values the runner (``agent_operator.runner``) carries out in order.

A Plan is complete: the status it carries is what the run looks like once its actions succeeded. When an
action fails, the runner stops, writes nothing else, and the next reconcile decides again from what it
then observes; every action is idempotent for that reason (deterministic Pod names, ``decide_approval``
is exactly-once in Postgres, deletes of missing objects are no-ops).
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class AddFinalizer:
    pass


@dataclasses.dataclass(frozen=True)
class Admit:
    """Write the run's admission row (``store.admit_run``) — before anything else exists for the run."""


@dataclasses.dataclass(frozen=True)
class CreatePod:
    attempt: int
    reason: str  # attempt start reason (metrics.ATTEMPT_REASONS): first, evicted, OOMKilled, ...
    lost_observed: bool = False  # the previous attempt was lost (for the resume latency metric)


@dataclasses.dataclass(frozen=True)
class DeletePod:
    name: str
    reason: str
    force: bool = False  # grace period 0: the worker is presumed hung or unreachable (Lease expired)


@dataclasses.dataclass(frozen=True)
class RecordLoss:
    """Close the attempt's row as ``lost`` (unless its worker recorded an outcome itself)."""

    attempt: int
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Decide:
    """``store.decide_approval``; the runner emits the Event, since only Postgres knows who won."""

    approval_id: str
    decision: str  # approved | rejected | expired
    decided_by: str
    comment: str | None = None
    deadline_action: str | None = None  # escalate | cancel | read_only (decision == expired)


@dataclasses.dataclass(frozen=True)
class CancelRun:
    reason: str


@dataclasses.dataclass(frozen=True)
class SetReadOnly:
    pass


@dataclasses.dataclass(frozen=True)
class RemoveDecisionAnnotations:
    pass


@dataclasses.dataclass(frozen=True)
class DeleteRun:
    """TTL after finish: delete the AgentRun (its Pods and Lease go with it by owner references)."""


Action = (
    AddFinalizer
    | Admit
    | CreatePod
    | DeletePod
    | RecordLoss
    | Decide
    | CancelRun
    | SetReadOnly
    | RemoveDecisionAnnotations
    | DeleteRun
)


@dataclasses.dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str  # CamelCase, e.g. AttemptStarted
    message: str


@dataclasses.dataclass
class Plan:
    actions: list[Action] = dataclasses.field(default_factory=list)
    events: list[Event] = dataclasses.field(default_factory=list)
    status: dict[str, Any] | None = None  # the whole desired status; None = leave status alone
    requeue_after: float = 2.0  # seconds until the next look at this run, at the latest
    done: bool = False  # deletion: the worker is gone and the run released; the finalizer may go

    def warn(self, reason: str, message: str) -> None:
        self.events.append(Event("Warning", reason, message))

    def info(self, reason: str, message: str) -> None:
        self.events.append(Event("Normal", reason, message))

    def soon(self, seconds: float) -> None:
        self.requeue_after = max(0.0, min(self.requeue_after, seconds))
