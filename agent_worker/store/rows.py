"""Rows as typed dataclasses, and pure packing between Postgres rows / JSON and Python (no I/O here)."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any, TypeVar

from agent_worker import errors

RUN_STATUSES = ("admitted", "running", "parked", "needs_human", "succeeded", "failed", "cancelled")
FINAL_RUN_STATUSES = ("succeeded", "failed", "cancelled")
EFFECT_STATUSES = ("pending", "sent", "confirmed", "failed")
DECISIONS = ("approved", "rejected", "expired")
DURABILITIES = ("sync", "async", "exit")


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
    comment: str | None,
    deadline_action: str | None,
) -> dict[str, Any]:
    """What ``Command(resume=...)`` receives (docs/design.md, Approvals)."""
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS}, not {decision!r}")
    if decision == "expired":
        return {
            "approved": False,
            "expired": True,
            "read_only": deadline_action in ("read_only", "readOnly"),
            "approval_id": approval_id,
        }
    return {
        "approved": decision == "approved",
        "approval_id": approval_id,
        "by": decided_by,
        "comment": comment,
    }


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
