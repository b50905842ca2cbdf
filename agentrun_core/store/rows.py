"""Rows as typed dataclasses, and pure packing between Postgres rows / JSON and Python (no I/O here)."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any, TypeVar

from agentrun_core import errors
from agentrun_core.api import protocol

# Defined in agentrun_core.api.protocol (one definition); named here too for the store modules that check
# them.
RUN_STATUSES = protocol.RUN_STATUSES
FINAL_RUN_STATUSES = protocol.FINAL_RUN_STATUSES
EFFECT_STATUSES = protocol.EFFECT_STATUSES
DECISIONS = protocol.DECISIONS
DURABILITIES = protocol.DURABILITIES


@dataclasses.dataclass(frozen=True)
class Run:
    run_id: str
    namespace: str
    name: str
    graph: str
    input: Any
    spec_hash: str
    durability: str
    status: str
    lease_epoch: int
    holder: str | None
    current_step: str | None
    read_only: bool
    approval_policy: dict[str, Any]
    result: Any
    error: str | None
    status_reason: str | None
    admitted_at: datetime.datetime
    updated_at: datetime.datetime
    finished_at: datetime.datetime | None
    head_checkpoint_id: str | None = None  # migration 0002: the root checkpoint a resume starts from
    key_version: int = 1  # migration 0003: the run's idempotency-key format (agentrun_core.keys)
    # migration 0004 (steering): defaults keep rows of an older schema packable
    retry_generation: int = 0
    reopened: int = 0
    interventions: int = 0
    # migration 0008 (image pin): the worker image the operator pinned, its digest when reported
    worker_image: str | None = None
    image_digest: str | None = None
    image_generation: int = 0
    # migration 0009: where a fork starts ({run_id, name, checkpoint_id, step, set}); None for other runs
    fork_of: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class Attempt:
    run_id: str
    attempt: int
    pod: str
    epoch: int | None
    start_reason: str | None
    started_at: datetime.datetime
    ended_at: datetime.datetime | None
    outcome: str | None
    detail: str | None
    control_plane: bool = False  # lost to the control plane, not counted against maxAttempts (0012)


@dataclasses.dataclass(frozen=True)
class Effect:
    idempotency_key: str
    run_id: str
    step: str
    action: str
    tool: str
    occurrence: int
    args_hash: str
    args: Any
    status: str
    needs_human: bool
    attempts: int
    provider_ref: str | None
    result: Any
    error: str | None
    epoch: int
    duplicates_prevented: int
    created_at: datetime.datetime
    updated_at: datetime.datetime
    sent_at: datetime.datetime | None
    confirmed_at: datetime.datetime | None
    # migration 0003 (defaults: rows read through an older schema)
    key_version: int = 1
    divergences: int = 0  # replays that asked for this position with other arguments
    diverged_args_hash: str | None = None
    diverged_args: Any = None
    call_deadline: datetime.datetime | None = None
    # migration 0029: a failed row's failure proves nothing was performed (a retry re-keys only those)
    not_performed: bool = False


@dataclasses.dataclass(frozen=True)
class Approval:
    approval_id: str
    run_id: str
    interrupt_id: str
    prompt: Any
    requested_at: datetime.datetime
    deadline: datetime.datetime | None
    status: str
    decided_by: str | None
    decided_at: datetime.datetime | None
    comment: str | None
    payload: Any
    deadline_action: str | None
    resumed_at: datetime.datetime | None
    policy: Any = None  # spec.approval in force when requested (migration 5)


@dataclasses.dataclass(frozen=True)
class Decision:
    """What ``decide_approval`` did: ``won`` the one time it changed the row; else the row's status then."""

    won: bool
    status: str | None  # None: no such approval of this run
    past_deadline: bool


@dataclasses.dataclass(frozen=True)
class Heartbeat:
    run_id: str
    key: str
    details: Any
    beat_at: datetime.datetime


@dataclasses.dataclass(frozen=True)
class StepEvent:
    id: int
    run_id: str
    attempt: int
    step: str
    checkpoint_id: str | None
    started_at: datetime.datetime
    duration_seconds: float
    checkpoint_seconds: float | None
    effect_keys: list[str]
    recorded_at: datetime.datetime


T = TypeVar("T")

_TIMESTAMP_FIELDS = {
    "admitted_at",
    "updated_at",
    "finished_at",
    "started_at",
    "ended_at",
    "created_at",
    "sent_at",
    "confirmed_at",
    "requested_at",
    "deadline",
    "decided_at",
    "resumed_at",
    "beat_at",
    "recorded_at",
    "call_deadline",
    "at",
}


def pack(cls: type[T], row: Mapping[str, Any]) -> T:
    """Build a row dataclass from a dict row; unknown columns (a newer migration) are ignored."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in row.items() if k in names})


def pack_json(cls: type[T], doc: Mapping[str, Any]) -> T:
    """Build a row dataclass from ``to_jsonb(row)`` output (timestamps arrive as ISO strings)."""
    fixed = {
        k: (datetime.datetime.fromisoformat(v) if k in _TIMESTAMP_FIELDS and isinstance(v, str) else v)
        for k, v in doc.items()
    }
    return pack(cls, fixed)


def resume_payload(
    *,
    approval_id: str,
    decision: str,
    decided_by: str | None,
    comment: str | None = None,
    deadline_action: str | None = None,
    edits: Mapping[str, Any] | None = None,
    response: str | None = None,
    action: str | None = None,
    decisions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """What ``Command(resume=...)`` receives (docs/design.md, Approvals).

    Besides ``approved`` it carries LangGraph's human-in-the-loop response (agent inbox's ``HumanResponse``):
    ``type`` accept | edit | response | ignore and ``args`` — None, ``{"action", "args": edits}`` for an
    approval with edits, the human's text for a response. Edits go only with an approval, a response only
    with a rejection (the admission policy and the operator refuse anything else; so does this).

    ``decisions`` (a LangChain 1.x ``HumanInTheLoopMiddleware`` batch, checked by ``agentrun_core.hitl``)
    replace ``type``/``args``: the middleware reads only ``{"decisions": [...]}``, one per action request."""
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS}, not {decision!r}")
    if decisions is not None:
        if edits:
            raise ValueError("edits of a middleware batch go in its decisions")
        ahead = any(d.get("type") in ("approve", "edit") for d in decisions)
        if ahead != (decision == "approved"):
            raise ValueError("decisions that let a tool run go with an approval only; an approval needs one")
        hitl: dict[str, Any] = {"decisions": [dict(d) for d in decisions], "approved": ahead}
        if decision == "expired":
            read_only = deadline_action in ("read_only", "readOnly")
            return {**hitl, "expired": True, "read_only": read_only, "approval_id": approval_id}
        return {**hitl, "approval_id": approval_id, "by": decided_by, "comment": comment}
    if edits and decision != "approved":
        raise ValueError("edits go with an approval only")
    if response is not None and decision != "rejected":
        raise ValueError("a response goes with a rejection only (the graph is told not to go ahead)")
    if decision == "expired":
        return {
            "approved": False,
            "expired": True,
            "read_only": deadline_action in ("read_only", "readOnly"),
            "approval_id": approval_id,
            "type": "ignore",
            "args": None,
        }
    payload: dict[str, Any] = {
        "approved": decision == "approved",
        "approval_id": approval_id,
        "by": decided_by,
        "comment": comment,
    }
    if edits:
        payload.update(type="edit", args={"action": action, "args": dict(edits)})
    elif response is not None:
        payload.update(type="response", args=response)
    else:
        payload.update(type="accept" if decision == "approved" else "ignore", args=None)
    return payload


def fenced(row: Mapping[str, Any] | None, *, run_id: str, epoch: int, refused: str) -> Mapping[str, Any]:
    """Judge the single row a fenced statement returns (pure): it carries the run's ``current_epoch``.

    No row: the run was never admitted. Another epoch: a newer attempt owns the run, so this write was
    refused in the same statement (``refused`` names it in the error, e.g. "effect K: record")."""
    if row is None:
        raise errors.RunNotFound(f"run {run_id} is not admitted")
    if row["current_epoch"] != epoch:
        raise errors.Fenced(
            f"{refused} refused, epoch {epoch} is not current ({row['current_epoch']})",
            epoch=epoch,
            current_epoch=row["current_epoch"],
        )
    return row
