"""The run's history of attempts (``agentrun_attempts``), heartbeats and step events.

Rule: history, not decisions. Nothing here is fenced, save the run's ``current_step`` that ``record_steps``
writes with the events (by the attempt's epoch, so a deposed worker never moves it): a deposed worker may
still say how its attempt ended, and no later decision reads these rows as the run's truth.
"""

from __future__ import annotations

import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from agentrun_core.store import db, queries, rows, step_packing


def record_attempt_start(
    conn: db.Conn,
    *,
    run_id: str,
    attempt: int,
    pod: str,
    epoch: int | None = None,
    start_reason: str | None = None,
) -> rows.Attempt:
    """Insert-or-update the attempt row (operator: at pod creation with a reason; worker: with its epoch)."""
    row = db.fetch_one(
        conn,
        "record_attempt_start",
        {"run_id": run_id, "attempt": attempt, "pod": pod, "epoch": epoch, "start_reason": start_reason},
    )
    assert row is not None
    return rows.pack(rows.Attempt, row)


def record_attempt_end(
    conn: db.Conn, *, run_id: str, attempt: int, outcome: str, detail: str | None = None
) -> bool:
    row = db.fetch_one(
        conn,
        "record_attempt_end",
        {"run_id": run_id, "attempt": attempt, "outcome": outcome, "detail": detail},
    )
    return row is not None


def record_attempt_loss(
    conn: db.Conn, *, run_id: str, attempt: int, detail: str, control_plane: bool
) -> bool:
    """The operator closes a lost attempt (``lost`` / ``detail`` unless the worker wrote its own outcome)
    and records whether the control plane lost it. True if the attempt row exists."""
    row = db.fetch_one(
        conn,
        "record_attempt_loss",
        {"run_id": run_id, "attempt": attempt, "detail": detail, "control_plane": control_plane},
    )
    return row is not None


def list_attempts(conn: db.Conn, run_id: str) -> list[rows.Attempt]:
    return [rows.pack(rows.Attempt, r) for r in db.fetch_all(conn, "list_attempts", {"run_id": run_id})]


# ------------------------------------------------------------------------------------ heartbeats, events


def heartbeat(conn: db.Conn, *, run_id: str, key: str, details: Any) -> None:
    db.execute(conn, "heartbeat", {"run_id": run_id, "key": key, "details": Jsonb(details)})


def list_heartbeats(conn: db.Conn, run_id: str) -> list[rows.Heartbeat]:
    return [rows.pack(rows.Heartbeat, r) for r in db.fetch_all(conn, "list_heartbeats", {"run_id": run_id})]


def record_step_event(
    conn: db.Conn,
    *,
    run_id: str,
    attempt: int,
    step: str,
    checkpoint_id: str | None,
    started_at: datetime.datetime,
    duration_seconds: float,
    checkpoint_seconds: float | None = None,
    effect_keys: list[str] | None = None,
) -> None:
    db.execute(
        conn,
        "record_step_event",
        {
            "run_id": run_id,
            "attempt": attempt,
            "step": step,
            "checkpoint_id": checkpoint_id,
            "started_at": started_at,
            "duration_seconds": duration_seconds,
            "checkpoint_seconds": checkpoint_seconds,
            "effect_keys": list(effect_keys or []),
        },
    )


def record_steps(
    conn: db.Conn,
    *,
    run_id: str,
    attempt: int,
    epoch: int | None,
    events: list[dict[str, Any]],
    current_step: str | None,
) -> bool:
    """Insert ``events`` (dicts of ``record_step_event``'s fields, in step order) as one batch row and, fenced
    by ``epoch``, set the run's current step, in one statement (more than ``step_packing.MAX_EVENTS``
    events: a statement per batch, in one transaction). True if the current step moved."""
    return record_batches(
        conn,
        run_id=run_id,
        attempt=attempt,
        epoch=epoch,
        batches=step_packing.pack(events),
        current_step=current_step,
    )


def record_batches(
    conn: db.Conn,
    *,
    run_id: str,
    attempt: int,
    epoch: int | None,
    batches: list[dict[str, Any]],
    current_step: str | None,
) -> bool:
    """``record_steps`` for events already packed (``step_packing.pack``): a caller that packed them to
    count the batches does not pack them twice."""
    statements = _steps_params(run_id, attempt, epoch, batches, current_step)
    if len(statements) == 1:
        row = db.fetch_one(conn, "record_steps", statements[0])
    else:
        with db.connection(conn) as c, c.transaction():
            row = [db.fetch_one(c, "record_steps", params) for params in statements][-1]
    return row is not None and row["moved"] == 1


def send_steps(
    conn: psycopg.Connection[Any],
    *,
    run_id: str,
    attempt: int,
    epoch: int | None,
    events: list[dict[str, Any]],
    current_step: str | None,
) -> None:
    """``record_steps``' statements sent on ``conn`` and not read: inside another write's pipelined
    transaction (the checkpointer's pipeline), where they cost no round trip and commit or roll back with
    that write."""
    with conn.cursor() as cur:
        for params in _steps_params(run_id, attempt, epoch, step_packing.pack(events), current_step):
            cur.execute(queries.get("record_steps"), params)


def _steps_params(
    run_id: str, attempt: int, epoch: int | None, batches: list[dict[str, Any]], current_step: str | None
) -> list[dict[str, Any]]:
    """One statement's parameters per packed batch; the current step moved by the last (no batch: by the
    one statement, which inserts none)."""
    batches = batches or [step_packing.no_batch()]
    return [
        {
            **batch,
            "run_id": run_id,
            "attempt": attempt,
            "epoch": epoch,
            "current_step": current_step if i == len(batches) - 1 else None,
        }
        for i, batch in enumerate(batches)
    ]


def list_step_events(conn: db.Conn, run_id: str) -> list[rows.StepEvent]:
    return [rows.pack(rows.StepEvent, r) for r in db.fetch_all(conn, "list_step_events", {"run_id": run_id})]
