"""What a reconcile decided to do: plain values the runner (``agent_operator.serve.runner``) carries out in
order.

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
    """Write the run's admission row (``store.admit_run``) — before anything else exists for the run.

    A fork (``fork_source`` set) is admitted with ``store.admit_fork``: the row and the copy of the source's
    checkpoint ``fork_checkpoint`` in one statement."""

    fork_source: str | None = None
    fork_checkpoint: str | None = None


@dataclasses.dataclass(frozen=True)
class CreatePod:
    attempt: int
    reason: str  # attempt start reason (metrics.ATTEMPT_REASONS): first, evicted, OOMKilled, ...
    lost_observed: bool = False  # the previous attempt was lost (for the resume latency metric)
    # the run's pinned image (agent_operator.decide.imagepin); None: the spec's/default
    image: str | None = None
    # The node of the previous attempt's worker whose Lease expired (pods.manifest: prefer another node).
    avoid_node: str | None = None


@dataclasses.dataclass(frozen=True)
class FreeLapsedLease:
    """Clear the holder of the run's Lease that this operator judged expired (held by ``holder``, unchanged
    for a full duration by its own clock), by CAS on that very version: the next attempt's worker then takes
    a free Lease at once instead of watching it for another full duration (agent_operator.act.execute)."""

    holder: str


@dataclasses.dataclass(frozen=True)
class DeletePod:
    name: str
    reason: str
    force: bool = False  # grace period 0: the worker is presumed hung or unreachable (Lease expired)


@dataclasses.dataclass(frozen=True)
class CleanupPod:
    """Delete a finished attempt's Pod (``agent_operator.decide.cleanup``): its outcome is on record
    already."""

    name: str
    reason: str


@dataclasses.dataclass(frozen=True)
class RecordLoss:
    """Close the attempt's row as ``lost`` (unless its worker recorded an outcome itself), saying whether the
    control plane lost it (then it did not count against ``maxAttempts``)."""

    attempt: int
    reason: str
    message: str
    control_plane: bool = False


@dataclasses.dataclass(frozen=True)
class Decide:
    """``store.decide_approval``; the runner emits the Event, since only Postgres knows who won."""

    approval_id: str
    decision: str  # approved | rejected | expired
    decided_by: str
    comment: str | None = None
    deadline_action: str | None = None  # escalate | cancel | read_only (decision == expired)
    # An approval with edits (agent_operator.decide.edits): field -> text
    edits: dict[str, str] = dataclasses.field(default_factory=dict)
    response: str | None = None  # a rejection with the human's response
    action: str | None = None  # the prompt's action name (the edit's "action")
    # A HumanInTheLoopMiddleware batch: one decision per action request (agentrun_core.hitl)
    decisions: list[dict[str, Any]] | None = None


@dataclasses.dataclass(frozen=True)
class CancelRun:
    reason: str


@dataclasses.dataclass(frozen=True)
class ExpireRun:
    """The run passed a deadline (agent_operator.decide.deadlines): fail it in Postgres, fencing its
    worker."""

    reason: str  # deadline_math.DEADLINE_EXCEEDED | PROGRESS_DEADLINE_EXCEEDED
    message: str


@dataclasses.dataclass(frozen=True)
class SetReadOnly:
    pass


@dataclasses.dataclass(frozen=True)
class RemoveDecisionAnnotations:
    pass


@dataclasses.dataclass(frozen=True)
class ReopenRun:
    """Retry: ``store.reopen_run`` under ``generation`` (only forward; a no-op once applied)."""

    generation: int
    by: str


@dataclasses.dataclass(frozen=True)
class ResolveEffect:
    """``store.resolve_effect``; the runner emits the Event, since only Postgres knows whether it applied."""

    key: str
    outcome: str  # sent | not_sent
    by: str
    result: Any = None


@dataclasses.dataclass(frozen=True)
class RemoveResolveAnnotations:
    pass


@dataclasses.dataclass(frozen=True)
class PinImage:
    """Record the run's image pin in its Postgres row (agentrun_runs.worker_image / image_digest)."""

    ref: str
    digest: str | None
    generation: int


@dataclasses.dataclass(frozen=True)
class DeleteRun:
    """TTL after finish: delete the AgentRun (its Pods and Lease go with it by owner references)."""


Action = (
    AddFinalizer
    | Admit
    | CreatePod
    | DeletePod
    | FreeLapsedLease
    | CleanupPod
    | RecordLoss
    | Decide
    | CancelRun
    | ExpireRun
    | SetReadOnly
    | RemoveDecisionAnnotations
    | ReopenRun
    | ResolveEffect
    | RemoveResolveAnnotations
    | PinImage
    | DeleteRun
)


@dataclasses.dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str  # CamelCase, e.g. AttemptStarted
    message: str


@dataclasses.dataclass
class Plan:
    """``requeue_after`` starts as the default look-again interval (the active poll) and is *replaced* by the
    first ``soon()``; later calls only lower it. A decision that says when it next needs a look (an idle run:
    the idle poll; a backoff: its end; a deadline) is taken at its word, instead of being capped by the
    active poll: otherwise parked and finished runs were reconciled every ~2 s, not every 30 s, and the
    operator's idle CPU grew with the number of idle runs. Anything that changes the run (its Pods, its
    Lease, the resource itself) wakes the run's loop earlier anyway (``handlers.run_loop``).
    """

    actions: list[Action] = dataclasses.field(default_factory=list)
    events: list[Event] = dataclasses.field(default_factory=list)
    status: dict[str, Any] | None = None  # the whole desired status; None = leave status alone
    requeue_after: float = 2.0  # seconds until the next look at this run, at the latest
    done: bool = False  # deletion: the worker is gone and the run released; the finalizer may go
    asked: bool = dataclasses.field(default=False, repr=False)  # soon() was called: requeue_after is asked
    # Set when the decision rests on the watch cache alone and would be destructive (a force-delete, "the
    # Pod is gone", a new attempt): the runner re-reads the Pod and the Lease from the API server and
    # decides again; when it cannot read them, it does nothing ("unknown" is never "gone").
    confirm: str | None = None
    # The run wants to start an attempt and its namespace has no free worker slot
    # (agent_operator.observe.throttle):
    # it waits in the namespace's queue; nothing was created.
    queued: bool = False
    # The run waits on something outside it (a human's approval, spec.suspend, the TTL of a finished run): the
    # look it asked for with ``idle`` is only the fallback for a missed wake-up, and ``stretch_idle`` lets it
    # grow while the run stays quiet. ``timer``: the earliest ``soon`` (a deadline, a backoff), which stands.
    idle_after: float | None = None
    timer: float | None = dataclasses.field(default=None, repr=False)

    def warn(self, reason: str, message: str) -> None:
        self.events.append(Event("Warning", reason, message))

    def info(self, reason: str, message: str) -> None:
        self.events.append(Event("Normal", reason, message))

    def soon(self, seconds: float) -> None:
        """Look again within ``seconds`` (the earliest of all the asks wins over the default)."""
        seconds = max(0.0, seconds)
        self.timer = seconds if self.timer is None else min(self.timer, seconds)
        self._ask(seconds)

    def idle(self, seconds: float) -> None:
        """Look again within ``seconds`` in case a wake-up was missed: the run waits on something that wakes
        its loop when it happens (a watch event, a slot) or on a ``soon`` of its own (a deadline)."""
        seconds = max(0.0, seconds)
        self.idle_after = seconds if self.idle_after is None else min(self.idle_after, seconds)
        self._ask(seconds)

    def stretch_idle(self, quiet_rounds: int, cap: float) -> None:
        """After ``quiet_rounds`` quiet rounds in a row, the idle look doubles for each, up to ``cap`` (never
        below the idle poll itself); a ``soon`` still wins. 1,000 parked runs polled every 30 s cost the
        operator CPU and Postgres transactions in proportion to their number (bench P4)."""
        if self.idle_after is None or quiet_rounds <= 0:
            return
        stretched = max(self.idle_after, min(cap, self.idle_after * 2.0 ** min(quiet_rounds, 32)))
        self.requeue_after = stretched if self.timer is None else min(self.timer, stretched)

    def _ask(self, seconds: float) -> None:
        self.requeue_after = min(self.requeue_after, seconds) if self.asked else seconds
        self.asked = True
