"""Approvals (``agentrun_approvals``): a parked run's pending question and its one decision.

Rule: one statement each. The worker records the approval and parks the run in one fenced statement; a
decision is taken exactly once, with Postgres's clock judging the deadline, and carries the resume payload the
next worker hands to ``Command(resume=...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, Unpack

from psycopg.types.json import Jsonb

from agentrun_core.store import db, rows


def record_approval(
    conn: db.Conn,
    *,
    run_id: str,
    epoch: int,
    approval_id: str,
    interrupt_id: str,
    prompt: Any,
    reason: str | None = None,
) -> rows.Approval:
    """Record the pending approval (idempotent per id) and park the run, fenced, in one statement.

    The returned row is the one Postgres holds: a re-park after a crash finds its own row, which may be
    decided already (the caller must not park on a decided approval). Its deadline and policy snapshot are
    Postgres's (trigger of migration 5), never the caller's."""
    row = db.fetch_one(
        conn,
        "record_approval",
        {
            "run_id": run_id,
            "epoch": epoch,
            "approval_id": approval_id,
            "interrupt_id": interrupt_id,
            "prompt": Jsonb(prompt),
            "reason": reason,
        },
    )
    checked = rows.fenced(row, run_id=run_id, epoch=epoch, refused=f"run {run_id}: approval write")
    if checked["approval"] is None:
        raise RuntimeError(f"approval {approval_id} neither inserted nor found (another pending approval?)")
    return rows.pack_json(rows.Approval, checked["approval"])


def get_approval(conn: db.Conn, *, run_id: str, approval_id: str) -> rows.Approval | None:
    """An approval id names an approval within its run only (migration 24)."""
    row = db.fetch_one(conn, "get_approval", {"run_id": run_id, "approval_id": approval_id})
    return rows.pack(rows.Approval, row) if row else None


def list_approvals(conn: db.Conn, run_id: str) -> list[rows.Approval]:
    return [rows.pack(rows.Approval, r) for r in db.fetch_all(conn, "list_approvals", {"run_id": run_id})]


# What every decision names; the optional fields in a total=False subclass, as ``runs.Admission``.
class _VerdictNeeds(TypedDict):
    approval_id: str
    decision: str  # one of rows.DECISIONS
    decided_by: str | None


class Verdict(_VerdictNeeds, total=False):
    """A decision on a pending approval (``rows.resume_payload`` checks it and builds what the graph gets)."""

    comment: str | None
    deadline_action: str | None  # the policy's onTimeout when ``expired``
    edits: Mapping[str, Any] | None
    response: str | None
    action: str | None
    decisions: list[dict[str, Any]] | None


def decide_approval(conn: db.Conn, *, run_id: str, **verdict: Unpack[Verdict]) -> bool:
    """Decide a pending approval exactly once (True the one time it changes). One statement."""
    return decide_approval_detail(conn, run_id=run_id, **verdict).won


def decide_approval_detail(conn: db.Conn, *, run_id: str, **verdict: Unpack[Verdict]) -> rows.Decision:
    """Decide a pending approval exactly once, judging the deadline with Postgres's clock. One statement.

    ``decision='expired'`` applies only once the stored deadline has passed; approved/rejected only before
    it, unless the approval's policy is ``onTimeout: escalate``. With ``deadline_action`` ``read_only``
    (or ``readOnly``) an expiry also makes the run read-only. The resume payload is stored on the row; the
    next worker passes it to ``Command(resume=...)``; ``decisions`` answer a HumanInTheLoopMiddleware batch
    (``agentrun_core.hitl.decide``).
    """
    payload = rows.resume_payload(**verdict)
    row = db.fetch_one(
        conn,
        "decide_approval",
        {
            "approval_id": verdict["approval_id"],
            "run_id": run_id,
            "decision": verdict["decision"],
            "decided_by": verdict["decided_by"],
            "comment": verdict.get("comment"),
            "payload": Jsonb(payload),
            "deadline_action": verdict.get("deadline_action"),
            "read_only": bool(payload.get("read_only")),
        },
    )
    if row is None:
        return rows.Decision(won=False, status=None, past_deadline=False)
    return rows.Decision(
        won=row["decided"] == 1, status=row["status"], past_deadline=bool(row["past_deadline"])
    )


def sync_approval_policy(conn: db.Conn, run_id: str, approval_policy: dict[str, Any]) -> bool:
    """Make the run's approval policy ``spec.approval``'s, unless an approval is pending. True if changed."""
    params = {"run_id": run_id, "approval_policy": Jsonb(approval_policy)}
    return db.execute(conn, "sync_approval_policy", params) == 1


def mark_approval_resumed(conn: db.Conn, *, run_id: str, approval_id: str) -> bool:
    return db.execute(conn, "mark_approval_resumed", {"run_id": run_id, "approval_id": approval_id}) == 1
