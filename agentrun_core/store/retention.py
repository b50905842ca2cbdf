"""Retention: mark runs whose AgentRun is being deleted, purge them in bounded batches (rows and checkpoints)
once it is gone; fold
final runs into the metric rollups (migration 13) so the collector's counters neither grow in cost with the
history kept nor drop when it is purged. Both are one transaction per batch, in Postgres functions."""

from __future__ import annotations

from collections.abc import Collection

from agentrun_core.store import db


def mark_for_purge(conn: db.Conn, run_id: str, *, after_seconds: float, reason: str) -> None:
    """Purge ``run_id`` once ``after_seconds`` passed (Postgres' clock); an earlier mark is kept."""
    db.fetch_one(
        conn, "mark_for_purge", {"run_id": run_id, "after_seconds": float(after_seconds), "reason": reason}
    )


def purge_due(
    conn: db.Conn, *, batch: int = 500, alive: Collection[str] = (), held_namespaces: Collection[str] = ()
) -> list[str]:
    """Purge one batch of due runs; their ids (fewer than ``batch``: nothing more is due now). A run not yet
    folded is folded in the same transaction: its counters stay, its gauge figures go with its rows.

    ``alive``: uids of AgentRuns that exist now, and ``held_namespaces``: namespaces whose AgentRuns could not
    be listed; none of those runs is purged (the operator's purger lists first: ``purge_due_namespaces``)."""
    params = {"batch": int(batch), "alive": sorted(alive), "held_namespaces": sorted(held_namespaces)}
    return [str(r["run_id"]) for r in db.fetch_all(conn, "purge_due", params)]


def purge_due_namespaces(conn: db.Conn) -> list[str]:
    """The namespaces of the runs due for purge now ("" for a mark whose run row is gone already)."""
    return [str(r["namespace"]) for r in db.fetch_all(conn, "purge_due_namespaces", {})]


def fold_runs(conn: db.Conn, *, batch: int = 500) -> int:
    """Fold one batch of final runs into the metric rollups; how many (fewer than ``batch``: none left)."""
    row = db.fetch_one(conn, "fold_runs", {"batch": int(batch)})
    return int(row["folded"]) if row is not None else 0
