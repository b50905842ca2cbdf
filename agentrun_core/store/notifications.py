"""The ledger's SQL for notifications (``spec.approval.notify``): effects of tool ``notify``.

Rule: the operator is the only writer, and every write is ONE statement that checks the notifier epoch
(migration 0010) in the same statement — a sender that took an epoch before a newer sender took its own is
refused (``errors.Fenced``), never half-applied. A row goes ``pending`` (reserved, ``issued`` False) →
``issued`` True right before the call → ``sent`` / ``failed``, or back to ``pending`` with ``retry_at`` for a
resend (the rules: ``agentrun_core.ledger``, via ``agent_operator.decide.notify_outcome``). ``issued`` stays
True
across a resend after an ambiguous outcome; a ``pending`` row found ``issued`` is an unknown outcome: the
caller reconciles it, never guesses.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from psycopg.types.json import Jsonb

from agentrun_core import errors
from agentrun_core.store import db, rows

TOOL = "notify"


@dataclasses.dataclass(frozen=True)
class Notification:
    """A notification's ledger row, as reserve returned it."""

    key: str
    status: str  # pending | sent | failed
    issued: bool  # a call was issued and its outcome is not recorded
    attempts: int
    needs_human: bool
    error: str | None
    inserted: bool  # this reserve created the row
    due_in_seconds: float  # a scheduled retry is due in this many seconds (0: now)


def take_epoch(conn: db.Conn, by: str) -> int:
    """A new notifier epoch: notification writes of every older epoch are refused from now on."""
    row = db.fetch_one(conn, "take_notifier_epoch", {"by": by})
    assert row is not None
    return int(row["epoch"])


def _checked(row: dict[str, Any] | None, epoch: int, what: str) -> dict[str, Any]:
    if row is None:
        raise errors.Fenced(f"notification {what} refused: no notifier epoch taken", epoch=epoch)
    if int(row["current_epoch"]) != epoch:
        raise errors.Fenced(
            f"notification {what} refused: notifier epoch {epoch} is not current ({row['current_epoch']})",
            epoch=epoch,
            current_epoch=int(row["current_epoch"]),
        )
    return row


def reserve(
    conn: db.Conn, *, key: str, run_id: str, epoch: int, step: str, event: str, args: Any, args_hash: str
) -> Notification | None:
    """Insert a ``pending`` notification row or return the existing one; None when the run has no row."""
    row = _checked(
        db.fetch_one(
            conn,
            "reserve_notification",
            {
                "key": key,
                "run_id": run_id,
                "epoch": epoch,
                "step": step,
                "action": event,
                "args_hash": args_hash,
                "args": Jsonb(args),
            },
        ),
        epoch,
        f"{key}: reserve",
    )
    doc = row["effect"]
    if doc is None:
        return None
    return Notification(
        key=key,
        status=str(doc["status"]),
        issued=bool(doc.get("issued")),
        attempts=int(doc.get("attempts") or 0),
        needs_human=bool(doc.get("needs_human")),
        error=doc.get("error"),
        inserted=bool(row["inserted"]),
        due_in_seconds=float(row["due_in_seconds"] or 0.0),
    )


def record(
    conn: db.Conn,
    *,
    run_id: str,
    key: str,
    epoch: int,
    status: str,
    issued: bool,
    calls: int = 0,
    error: str | None = None,
    needs_human: bool = False,
    result: Any = None,
    provider_ref: str | None = None,
    retry_seconds: float | None = None,
) -> bool:
    """Move a ``pending`` notification (fenced). False when the row was no longer pending."""
    row = _checked(
        db.fetch_one(
            conn,
            "record_notification",
            {
                "run_id": run_id,
                "key": key,
                "epoch": epoch,
                "status": status,
                "issued": issued,
                "calls": calls,
                "error": error,
                "needs_human": needs_human,
                "result": None if result is None else Jsonb(result),
                "provider_ref": provider_ref,
                "retry_seconds": retry_seconds,
            },
        ),
        epoch,
        f"{key}: record {status}",
    )
    return row["updated"] is not None


def needs_human_effects(conn: db.Conn, run_id: str) -> list[dict[str, Any]]:
    """The run's effects (not notifications) flagged for a human: key, tool, step, error."""
    return db.fetch_all(conn, "list_needs_human_effects", {"run_id": run_id})


def open_notifications(conn: db.Conn, run_id: str) -> list[tuple[str, bool]]:
    """(key, issued) of the run's pending notifications not handed to a human."""
    rows_ = db.fetch_all(conn, "list_open_notifications", {"run_id": run_id})
    return [(str(r["idempotency_key"]), bool(r["issued"])) for r in rows_]


def list_notifications(conn: db.Conn, run_id: str) -> list[rows.Effect]:
    return [rows.pack(rows.Effect, r) for r in db.fetch_all(conn, "list_notifications", {"run_id": run_id})]
