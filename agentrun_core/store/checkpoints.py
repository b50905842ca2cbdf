"""Fencing and the head pointer of LangGraph checkpoint writes (agent_worker/checkpointer.py's statements).

``fence_checkpoint`` must be sent on the connection, and inside the transaction, that then writes the
checkpoint: the epoch check and the head move commit with the write or not at all. It refuses server-side
(``agentrun_fence_checkpoint``, migration 15: SQLSTATE ``AR404`` / ``AR409``), so the whole transaction can
be one pipeline; ``raise_if_refused`` turns those errors back into ``RunNotFound`` / ``Fenced`` — the one
place that knows them.
"""

from __future__ import annotations

from typing import Any

import psycopg

from agentrun_core.store import db, queries, rows

NOT_ADMITTED = "AR404"  # no run row (never admitted, or another tenant's)
NOT_CURRENT = "AR409"  # the run's lease_epoch is not the writer's; DETAIL: the current epoch ('' for NULL)


def fence_checkpoint(
    conn: psycopg.Connection[Any], *, run_id: str, epoch: int, checkpoint_ns: str, checkpoint_id: str | None
) -> None:
    """Send the epoch check (refused if a newer epoch holds the run) and the head move; read nothing back.

    ``checkpoint_id`` is the checkpoint a ``put`` writes (it becomes the head of ``checkpoint_ns``; the root
    head lives on the run row); ``None`` for ``put_writes``, which only needs the epoch check. In a pipeline
    (``db.pipelined_transaction``) a refusal surfaces at the Sync, as the psycopg error that
    ``raise_if_refused`` maps; outside one, at once."""
    params = {"run_id": run_id, "epoch": epoch, "checkpoint_ns": checkpoint_ns}
    with conn.cursor() as cur:
        cur.execute(queries.get("fence_checkpoint"), {**params, "checkpoint_id": checkpoint_id})


def raise_if_refused(
    exc: BaseException, *, run_id: str, epoch: int, checkpoint_ns: str, checkpoint_id: str | None
) -> None:
    """If ``exc`` (or an error in its cause/context chain) is ``fence_checkpoint``'s refusal, raise it as
    ``RunNotFound`` ("run R is not admitted") or ``Fenced`` (the text ``rows.fenced`` gives every fenced
    write); else return."""
    refusal = _refusal(exc)
    if refusal is None:
        return
    row: dict[str, Any] | None = None
    if refusal.sqlstate == NOT_CURRENT:
        detail = (refusal.diag.message_detail or "").strip()
        row = {"current_epoch": int(detail) if detail else None}
    what = "checkpoint" if checkpoint_id is not None else "checkpoint writes"
    rows.fenced(row, run_id=run_id, epoch=epoch, refused=f"run {run_id}: {what} (ns {checkpoint_ns!r})")


def _refusal(exc: BaseException) -> psycopg.Error | None:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, psycopg.Error) and cur.sqlstate in (NOT_ADMITTED, NOT_CURRENT):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


def get_checkpoint_head(conn: db.Conn, *, run_id: str, checkpoint_ns: str = "") -> str | None:
    """The checkpoint a resume of ``checkpoint_ns`` starts from; ``None`` when no fenced write named one."""
    row = db.fetch_one(conn, "get_checkpoint_head", {"run_id": run_id, "checkpoint_ns": checkpoint_ns})
    return None if row is None else row["checkpoint_id"]
