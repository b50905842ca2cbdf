"""Retention: mark runs whose AgentRun is gone, purge them in bounded batches (rows and checkpoints)."""

from __future__ import annotations

from agent_worker.store import db


def mark_for_purge(conn: db.Conn, run_id: str, *, after_seconds: float, reason: str) -> None:
    """Purge ``run_id`` once ``after_seconds`` passed (Postgres' clock); an earlier mark is kept."""
    db.fetch_one(
        conn, "mark_for_purge", {"run_id": run_id, "after_seconds": float(after_seconds), "reason": reason}
    )


def purge_due(conn: db.Conn, *, batch: int = 500) -> list[str]:
    """Purge one batch of due runs; their ids (fewer than ``batch``: nothing more is due now)."""
    return [str(r["run_id"]) for r in db.fetch_all(conn, "purge_due", {"batch": int(batch)})]
