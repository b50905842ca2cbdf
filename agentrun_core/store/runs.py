"""The run's row (``agentrun_runs``): admission, the worker's claim and outcome, the operator's settings.

Rule: a worker's write here is fenced by its epoch in the statement itself (``claim_run`` raises
``lease_epoch`` or is refused; ``finish_run`` and ``set_current_step`` write only under the epoch holding the
run), a refusal surfacing as ``errors.Fenced``; a human's ``cancel_run`` raises the epoch in the same
statement, so nothing that ran before it can write after it.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence
from typing import Any, NoReturn, TypedDict, Unpack

import psycopg
from psycopg.types.json import Jsonb

from agentrun_core import deadline_math, errors
from agentrun_core.store import attempts, db, rows, step_packing

logger = logging.getLogger(__name__)


# The fields every admission names; the defaulted ones in a total=False subclass, not NotRequired[...]: under
# postponed annotations Python 3.11 counts those required (``__required_keys__``, checked at run time below).
class _AdmissionNeeds(TypedDict):
    run_id: str
    namespace: str
    name: str
    graph: str
    input: Any
    spec_hash: str


class Admission(_AdmissionNeeds, total=False):
    """What admission records of any run (``admit_run``; ``admit_fork`` adds where the fork starts)."""

    durability: str  # one of rows.DURABILITIES; "sync" when not given
    approval_policy: dict[str, Any] | None  # spec.approval; none when not given
    retry_generation: int  # spec.retryGeneration at admission, the baseline later retries count from; 0


def admit_run(conn: db.Conn, **admission: Unpack[Admission]) -> rows.Run:
    """Insert-or-return the admission row: admitting the same run id again returns the first row."""
    row = db.fetch_one(conn, "admit_run", admission_params(admission))
    assert row is not None  # insert-or-return always yields the row
    return rows.pack(rows.Run, row)


def admission_params(admission: Admission) -> dict[str, Any]:
    """The admission row's query parameters (``admit_run``, ``admit_fork``), the fields and the durability
    checked (``Unpack`` types the keywords for mypy only: at run time they are checked here)."""
    missing = Admission.__required_keys__ - admission.keys()
    unknown = admission.keys() - Admission.__required_keys__ - Admission.__optional_keys__
    if missing or unknown:
        raise TypeError(f"admission: fields missing {sorted(missing)}, fields unknown {sorted(unknown)}")
    durability = admission.get("durability", "sync")
    if durability not in rows.DURABILITIES:
        raise ValueError(f"durability must be one of {rows.DURABILITIES}, not {durability!r}")
    return {
        **admission,
        "input": Jsonb(admission["input"]),
        "durability": durability,
        "approval_policy": Jsonb(admission.get("approval_policy") or {}),
        "retry_generation": admission.get("retry_generation", 0),
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
    row = db.fetch_one(
        conn, "claim_run", {"run_id": run_id, "epoch": epoch, "holder": holder, "attempt": None}
    )
    if row is None:
        _refuse_claim(conn, run_id, epoch)
    return rows.pack(rows.Run, row)


def claim_attempt(conn: db.Conn, *, run_id: str, epoch: int, holder: str, attempt: int) -> rows.Run:
    """``claim_run`` and the worker's ``record_attempt_start`` (its pod, its epoch) in one round trip; the
    attempt row is written only when the claim took. ``Fenced`` / ``RunNotFound`` as ``claim_run``."""
    row = db.fetch_one(
        conn, "claim_run", {"run_id": run_id, "epoch": epoch, "holder": holder, "attempt": attempt}
    )
    if row is None:
        _refuse_claim(conn, run_id, epoch)
    return rows.pack(rows.Run, row)


def _refuse_claim(conn: db.Conn, run_id: str, epoch: int) -> NoReturn:
    current = get_run(conn, run_id)
    if current is None:
        raise errors.RunNotFound(f"run {run_id} is not admitted")
    raise errors.Fenced(
        f"run {run_id}: cannot claim epoch {epoch} (run has epoch {current.lease_epoch}, "
        f"holder {current.holder}, status {current.status})",
        epoch=epoch,
        current_epoch=current.lease_epoch,
    )


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
    params = _outcome(status, result, error, reason, current_step, run_id, epoch)
    params.update(step_packing.no_batch(), attempt=None, outcome=None, detail=None)
    row = db.fetch_one(conn, "finish_run", params)
    if row is None:
        _refuse_outcome(conn, run_id, epoch, status)
    return rows.pack(rows.Run, row)


def finish_attempt(
    conn: db.Conn,
    *,
    run_id: str,
    epoch: int,
    attempt: int,
    status: str,
    outcome: str,
    detail: str | None = None,
    result: Any = None,
    error: str | None = None,
    reason: str | None = None,
    step_events: Sequence[dict[str, Any]] = (),
    current_step: str | None = None,
) -> rows.Run:
    """``finish_run`` and ``record_attempt_end(outcome, detail)`` in one round trip; the attempt's end is
    written only when the fenced outcome took. ``Fenced`` as ``finish_run`` (nothing written then).

    ``step_events`` (``record_steps``' events) go in the same statement, recorded whatever the outcome
    (history, as ``record_steps`` records them), so the attempt's last events cost no round trip of their
    own; more than one batch of them are recorded first, apart. ``current_step`` moves with the outcome.
    History never costs the outcome: a batch the table refuses (its statement rolled back whole) is dropped,
    logged, and the outcome written alone (``conn``: autocommit, as the worker's pool is)."""
    batches = step_packing.pack(step_events)
    if len(batches) > 1:
        attempts.record_batches(
            conn, run_id=run_id, attempt=attempt, epoch=epoch, batches=batches, current_step=None
        )
        batches = []
    params = _outcome(status, result, error, reason, current_step, run_id, epoch)
    params.update(batches[0] if batches else step_packing.no_batch())
    params.update(attempt=attempt, outcome=outcome, detail=detail)
    try:
        row = db.fetch_one(conn, "finish_run", params)
    except (psycopg.errors.DataError, psycopg.errors.IntegrityError) as exc:
        if not batches:
            raise
        # The events are the likely cause, not the only one: a retry that fails again raises its own error.
        logger.error("run %s: the outcome with its last step events failed (%s); now alone", run_id, exc)
        params.update(step_packing.no_batch())
        row = db.fetch_one(conn, "finish_run", params)
    if row is None:
        _refuse_outcome(conn, run_id, epoch, status)
    return rows.pack(rows.Run, row)


def _outcome(
    status: str,
    result: Any,
    error: str | None,
    reason: str | None,
    current_step: str | None,
    run_id: str,
    epoch: int,
) -> dict[str, Any]:
    if status not in rows.RUN_STATUSES:
        raise ValueError(f"unknown run status {status!r}")
    return {
        "run_id": run_id,
        "epoch": epoch,
        "status": status,
        "result": None if result is None else Jsonb(result),
        "error": error,
        "reason": reason,
        "current_step": current_step,
    }


def _refuse_outcome(conn: db.Conn, run_id: str, epoch: int, status: str) -> NoReturn:
    current = get_run(conn, run_id)
    raise errors.Fenced(
        f"run {run_id}: outcome {status!r} refused for epoch {epoch} "
        f"(run epoch {current.lease_epoch if current else '?'}, "
        f"status {current.status if current else '?'})",
        epoch=epoch,
        current_epoch=current.lease_epoch if current else None,
    )


def set_current_step(conn: db.Conn, *, run_id: str, epoch: int, step: str) -> bool:
    return db.execute(conn, "set_current_step", {"run_id": run_id, "epoch": epoch, "step": step}) == 1


def set_read_only(conn: db.Conn, run_id: str, read_only: bool) -> bool:
    """Refuse (True) or allow (False) new effects. True if the run exists."""
    return db.fetch_one(conn, "set_read_only", {"run_id": run_id, "read_only": read_only}) is not None


def pin_image(conn: db.Conn, *, run_id: str, image: str, digest: str | None, generation: int) -> bool:
    """Record the run's pinned worker image (agent_operator.decide.imagepin); operator only. True if it
    exists."""
    params = {"run_id": run_id, "image": image, "digest": digest, "generation": generation}
    return db.fetch_one(conn, "pin_image", params) is not None


def cancel_run(conn: db.Conn, run_id: str, reason: str) -> bool:
    """Mark the run cancelled unless already final, raising its fencing epoch in the same statement (a
    frozen or partitioned worker can no longer write anything). True if this call cancelled it."""
    return db.fetch_one(conn, "cancel_run", {"run_id": run_id, "reason": reason}) is not None


def expire_run(conn: db.Conn, run_id: str, reason: str, message: str) -> bool:
    """Mark the run failed by a deadline (``reason``: deadline_math.REASONS) unless already final, raising
    its fencing epoch in the same statement as ``cancel_run`` does. True if this call failed it."""
    params = {"run_id": run_id, "reason": reason, "message": message}
    return db.fetch_one(conn, "expire_run", params) is not None


def deadline_clock(conn: db.Conn, run_id: str) -> deadline_math.Clock:
    """The run's attempts and latest step batch with Postgres' now(), for its deadlines."""
    row = db.fetch_one(conn, "deadline_clock", {"run_id": run_id})
    assert row is not None  # one row, run or not
    attempts_ = tuple(
        deadline_math.Interval(
            start=datetime.datetime.fromisoformat(a["started_at"]),
            end=datetime.datetime.fromisoformat(a["ended_at"]) if a.get("ended_at") else None,
            reopens=a.get("start_reason") in REOPENING_START_REASONS,
        )
        for a in row["attempts_doc"] or ()
    )
    return deadline_math.Clock(
        now=row["db_now"], attempts=attempts_, last_step_at=row["last_step_at"], claimed_at=row["claimed_at"]
    )


# The start reasons of an attempt a human's reopening started (agent_operator.decide.steering.REOPEN_REASONS).
REOPENING_START_REASONS = frozenset({"retry", "resolved"})
