"""Fencing and the head pointer of LangGraph checkpoint writes (agent_worker/checkpointer.py's statements).

``fence_checkpoint`` must run on the connection, and inside the transaction, that then writes the checkpoint:
the epoch check and the head move commit with the write or not at all.
"""

from __future__ import annotations

from agent_worker.store import db, rows


def fence_checkpoint(
    conn: db.Conn, *, run_id: str, epoch: int, checkpoint_ns: str, checkpoint_id: str | None
) -> None:
    """Check the writer's epoch (``Fenced`` if a newer one holds the run) and move the head.

    ``checkpoint_id`` is the checkpoint a ``put`` writes (it becomes the head of ``checkpoint_ns``); ``None``
    for ``put_writes``, which only needs the epoch check. The root head lives on the run row."""
    root_put = checkpoint_ns == "" and checkpoint_id is not None
    query = "fence_checkpoint_head" if root_put else "fence_checkpoint"
    row = db.fetch_one(
        conn,
        query,
        {"run_id": run_id, "epoch": epoch, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id},
    )
    what = "checkpoint" if checkpoint_id is not None else "checkpoint writes"
    rows.fenced(row, run_id=run_id, epoch=epoch, refused=f"run {run_id}: {what} (ns {checkpoint_ns!r})")


def get_checkpoint_head(conn: db.Conn, *, run_id: str, checkpoint_ns: str = "") -> str | None:
    """The checkpoint a resume of ``checkpoint_ns`` starts from; ``None`` when no fenced write named one."""
    row = db.fetch_one(conn, "get_checkpoint_head", {"run_id": run_id, "checkpoint_ns": checkpoint_ns})
    return None if row is None else row["checkpoint_id"]
