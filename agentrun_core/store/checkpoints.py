"""Fencing and the head pointer of LangGraph checkpoint writes (agent_worker/checkpointer.py's statements).

The fence itself is server-side: migration 16's trigger on LangGraph's tables runs
``agentrun_fence_checkpoint`` (migration 15; migration 18 reads the epoch once per transaction) for every
row written on a connection marked by ``mark_fence``, in that row's statement. It refuses with SQLSTATE
``AR404`` / ``AR409``, and ``raise_if_refused`` turns those errors back into ``RunNotFound`` / ``Fenced`` —
the one place that knows them. ``abandon_write`` aborts a write's implicit transaction when its client fails
half-way.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import psycopg

from agentrun_core.store import db, queries, rows

NOT_ADMITTED = "AR404"  # no run row (never admitted, or another tenant's)
NOT_CURRENT = "AR409"  # the run's lease_epoch is not the writer's; DETAIL: the current epoch ('' for NULL)


def mark_fence(cur: psycopg.Cursor[Any], *, run_id: str, epoch: int) -> None:
    """Mark ``cur``'s connection: the rows it writes to LangGraph's tables are fenced by ``epoch`` of
    ``run_id`` from now on (the setting ``agentrun.fence``; sent, not read, so it rides a pipeline). The mark
    is transactional: a write that fails takes it back with it."""
    cur.execute(queries.get("mark_fence"), {"fence": f"{epoch}:{run_id}"})


def abandon_write(cur: psycopg.Cursor[Any]) -> None:
    """Abort the implicit transaction of the pipeline ``cur`` is in: a statement that fails server-side
    (``agentrun_abandon_write``), so the Sync that follows commits nothing sent before it. Never raises:
    the caller is already failing."""
    with contextlib.suppress(psycopg.Error):
        cur.execute(queries.get("abandon_write"))


def raise_if_refused(
    exc: BaseException, *, run_id: str, epoch: int, checkpoint_ns: str, checkpoint_id: str | None
) -> None:
    """If ``exc`` (or an error in its cause/context chain) is the fence's refusal, raise it as
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


@dataclasses.dataclass(frozen=True)
class Head:
    """A namespace's head (``None``: no fenced write named one) and whether it has any checkpoint at all."""

    checkpoint_id: str | None
    any_written: bool


def checkpoint_head(conn: db.Conn, *, run_id: str, checkpoint_ns: str = "") -> Head:
    """The checkpoint a resume of ``checkpoint_ns`` starts from, and whether anything was written there."""
    row = db.fetch_one(conn, "get_checkpoint_head", {"run_id": run_id, "checkpoint_ns": checkpoint_ns})
    if row is None:
        return Head(None, False)
    return Head(row["checkpoint_id"], bool(row["any_written"]))


def get_checkpoint_head(conn: db.Conn, *, run_id: str, checkpoint_ns: str = "") -> str | None:
    """The checkpoint a resume of ``checkpoint_ns`` starts from; ``None`` when no fenced write named one."""
    return checkpoint_head(conn, run_id=run_id, checkpoint_ns=checkpoint_ns).checkpoint_id


def delta_chain(
    conn: db.Conn, *, thread_id: str, checkpoint_ns: str, checkpoint_id: str, channels: list[str]
) -> list[dict[str, Any]]:
    """The parent chain of ``checkpoint_id`` (itself first) back to the nearest ancestor storing a value for
    each of ``channels``, following parent ids (never id order): checkpoint_id, parent_checkpoint_id,
    versions, inline_values, with_blob (the channels with a stored blob at that row's version)."""
    return db.fetch_all(
        conn,
        "delta_chain",
        {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "channels": channels,
        },
    )
