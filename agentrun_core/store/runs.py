"""Runs, attempts, approvals, heartbeats and step events (the operator's and the worker's calls)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from psycopg.types.json import Jsonb

from agentrun_core import errors
from agentrun_core.store import db, rows


def admit_run(
    conn: db.Conn,
    *,
    run_id: str,
    namespace: str,
    name: str,
    graph: str,
    input: Any,
    spec_hash: str,
    durability: str = "sync",
    approval_policy: dict[str, Any] | None = None,
    retry_generation: int = 0,
) -> rows.Run:
    """Insert-or-return the admission row: admitting the same run id again returns the first row.

    ``retry_generation``: spec.retryGeneration at admission, the baseline later retries count from."""
    params = admission_params(
        run_id=run_id,
        namespace=namespace,
        name=name,
        graph=graph,
        input=input,
        spec_hash=spec_hash,
        durability=durability,
        approval_policy=approval_policy or {},
        retry_generation=retry_generation,
    )
    row = db.fetch_one(conn, "admit_run", params)
    assert row is not None  # insert-or-return always yields the row
    return rows.pack(rows.Run, row)


def admission_params(
    *,
    run_id: str,
    namespace: str,
    name: str,
    graph: str,
    input: Any,
    spec_hash: str,
    durability: str,
    approval_policy: dict[str, Any],
    retry_generation: int,
) -> dict[str, Any]:
    """The admission row's query parameters (``admit_run``, ``admit_fork``), the durability checked."""
    if durability not in rows.DURABILITIES:
        raise ValueError(f"durability must be one of {rows.DURABILITIES}, not {durability!r}")
    return {
        "run_id": run_id,
        "namespace": namespace,
        "name": name,
        "graph": graph,
        "input": Jsonb(input),
        "spec_hash": spec_hash,
        "durability": durability,
        "approval_policy": Jsonb(approval_policy),
        "retry_generation": retry_generation,
    }


def get_run(conn: db.Conn, run_id: str) -> rows.Run | None:
    row = db.fetch_one(conn, "get_run", {"run_id": run_id})
    return rows.pack(rows.Run, row) if row else None


def get_run_now(conn: db.Conn, run_id: str) -> tuple[rows.Run | None, datetime.datetime]:
    """The run (None when not admitted) and Postgres' ``now()``, in one round trip."""
    row = db.fetch_one(conn, "get_run_now", {"run_id": run_id})
    assert row is not None
    now: datetime.datetime = row.pop("db_now")
    return (rows.pack(rows.Run, row) if row.get("run_id") is not None else None), now


def list_runs(
    conn: db.Conn, *, namespace: str | None = None, statuses: list[str] | None = None
) -> list[rows.Run]:
    found = db.fetch_all(conn, "list_runs", {"namespace": namespace, "statuses": statuses})
    return [rows.pack(rows.Run, r) for r in found]


def claim_run(conn: db.Conn, *, run_id: str, epoch: int, holder: str) -> rows.Run:
    """Raise ``lease_epoch`` to the epoch just acquired and mark the run running; ``Fenced`` if older."""
    row = db.fetch_one(conn, "claim_run", {"run_id": run_id, "epoch": epoch, "holder": holder})
    if row is None:
        current = get_run(conn, run_id)
        if current is None:
            raise errors.RunNotFound(f"run {run_id} is not admitted")
        raise errors.Fenced(
            f"run {run_id}: cannot claim epoch {epoch} (run has epoch {current.lease_epoch}, "
            f"holder {current.holder}, status {current.status})",
            epoch=epoch,
            current_epoch=current.lease_epoch,
        )
    return rows.pack(rows.Run, row)


def finish_run(
    conn: db.Conn,
    *,
    run_id: str,
    epoch: int,
    status: str,
    result: Any = None,
    error: str | None = None,
    reason: str | None = None,
    current_step: str | None = None,
) -> rows.Run:
    """Set the run's outcome (fenced). ``Fenced`` when a newer epoch holds it or it is already final."""
    if status not in rows.RUN_STATUSES:
        raise ValueError(f"unknown run status {status!r}")
    row = db.fetch_one(
        conn,
        "finish_run",
        {
            "run_id": run_id,
            "epoch": epoch,
            "status": status,
            "result": None if result is None else Jsonb(result),
            "error": error,
            "reason": reason,
            "current_step": current_step,
        },
    )
    if row is None:
        current = get_run(conn, run_id)
        raise errors.Fenced(
            f"run {run_id}: outcome {status!r} refused for epoch {epoch} "
            f"(run epoch {current.lease_epoch if current else '?'}, "
            f"status {current.status if current else '?'})",
            epoch=epoch,
            current_epoch=current.lease_epoch if current else None,
        )
    return rows.pack(rows.Run, row)


def set_current_step(conn: db.Conn, *, run_id: str, epoch: int, step: str) -> bool:
    return db.execute(conn, "set_current_step", {"run_id": run_id, "epoch": epoch, "step": step}) == 1


def set_read_only(conn: db.Conn, run_id: str, read_only: bool) -> bool:
    """Refuse (True) or allow (False) new effects. True if the run exists."""
    return db.fetch_one(conn, "set_read_only", {"run_id": run_id, "read_only": read_only}) is not None


def pin_image(conn: db.Conn, *, run_id: str, image: str, digest: str | None, generation: int) -> bool:
    """Record the run's pinned worker image (agent_operator.imagepin); operator only. True if it exists."""
    params = {"run_id": run_id, "image": image, "digest": digest, "generation": generation}
    return db.fetch_one(conn, "pin_image", params) is not None


def cancel_run(conn: db.Conn, run_id: str, reason: str) -> bool:
    """Mark the run cancelled unless already final, raising its fencing epoch in the same statement (a
    frozen or partitioned worker can no longer write anything). True if this call cancelled it."""
    return db.fetch_one(conn, "cancel_run", {"run_id": run_id, "reason": reason}) is not None


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


# ---------------------------------------------------------------------------------------------- approvals


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


def get_approval(conn: db.Conn, approval_id: str) -> rows.Approval | None:
    row = db.fetch_one(conn, "get_approval", {"approval_id": approval_id})
    return rows.pack(rows.Approval, row) if row else None


def list_approvals(conn: db.Conn, run_id: str) -> list[rows.Approval]:
    return [rows.pack(rows.Approval, r) for r in db.fetch_all(conn, "list_approvals", {"run_id": run_id})]


def decide_approval(
    conn: db.Conn,
    *,
    approval_id: str,
    run_id: str,
    decision: str,
    decided_by: str | None,
    comment: str | None = None,
    deadline_action: str | None = None,
) -> bool:
    """Decide a pending approval exactly once (True the one time it changes). One statement."""
    return decide_approval_detail(
        conn,
        approval_id=approval_id,
        run_id=run_id,
        decision=decision,
        decided_by=decided_by,
        comment=comment,
        deadline_action=deadline_action,
    ).won


def decide_approval_detail(
    conn: db.Conn,
    *,
    approval_id: str,
    run_id: str,
    decision: str,
    decided_by: str | None,
    comment: str | None = None,
    deadline_action: str | None = None,
    edits: Mapping[str, Any] | None = None,
    response: str | None = None,
    action: str | None = None,
) -> rows.Decision:
    """Decide a pending approval exactly once, judging the deadline with Postgres's clock. One statement.

    ``decision='expired'`` applies only once the stored deadline has passed; approved/rejected only before
    it, unless the approval's policy is ``onTimeout: escalate``. With ``deadline_action`` ``read_only``
    (or ``readOnly``) an expiry also makes the run read-only. The resume payload is stored on the row; the
    next worker passes it to ``Command(resume=...)``.
    """
    payload = rows.resume_payload(
        approval_id=approval_id,
        decision=decision,
        decided_by=decided_by,
        comment=comment,
        deadline_action=deadline_action,
        edits=edits,
        response=response,
        action=action,
    )
    row = db.fetch_one(
        conn,
        "decide_approval",
        {
            "approval_id": approval_id,
            "run_id": run_id,
            "decision": decision,
            "decided_by": decided_by,
            "comment": comment,
            "payload": Jsonb(payload),
            "deadline_action": deadline_action,
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


def mark_approval_resumed(conn: db.Conn, approval_id: str) -> bool:
    return db.execute(conn, "mark_approval_resumed", {"approval_id": approval_id}) == 1


# ---------------------------------------------------------------------------------------------- tenants


def provision_tenant(conn: db.Conn, namespace: str, password: str) -> str:
    """Create (or reset the password of) the worker role of ``namespace``; its name. Needs CREATEROLE."""
    row = db.fetch_one(conn, "provision_tenant", {"namespace": namespace, "password": password})
    assert row is not None
    return str(row["role_name"])


def tenant_role(conn: db.Conn, namespace: str) -> str | None:
    """The worker role provisioned for ``namespace`` in this database, if any."""
    row = db.fetch_one(conn, "get_tenant", {"namespace": namespace})
    return str(row["role_name"]) if row else None


def list_idle_tenants(conn: db.Conn) -> list[str]:
    """Namespaces that have a worker role here and no run left."""
    return [str(r["namespace"]) for r in db.fetch_all(conn, "list_idle_tenants", {})]


def drop_tenant(conn: db.Conn, namespace: str) -> bool:
    """Drop the worker role of ``namespace`` (whose Kubernetes namespace is gone); False when a run of it is
    left, none was provisioned, or the role still has objects elsewhere (then it is disabled, not dropped)."""
    row = db.fetch_one(conn, "drop_tenant", {"namespace": namespace})
    return bool(row and row["dropped"])


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
    """Insert ``events`` (dicts of ``record_step_event``'s fields, in step order) and, fenced by ``epoch``,
    set the run's current step, in one statement. True if the current step moved."""
    payload = [
        {
            **e,
            "n": i,
            "started_at": e["started_at"].isoformat(),
            "effect_keys": list(e.get("effect_keys") or []),
        }
        for i, e in enumerate(events)
    ]
    row = db.fetch_one(
        conn,
        "record_steps",
        {
            "run_id": run_id,
            "attempt": attempt,
            "epoch": epoch,
            "events": Jsonb(payload),
            "current_step": current_step,
        },
    )
    return row is not None and row["moved"] == 1


def list_step_events(conn: db.Conn, run_id: str) -> list[rows.StepEvent]:
    return [rows.pack(rows.StepEvent, r) for r in db.fetch_all(conn, "list_step_events", {"run_id": run_id})]
