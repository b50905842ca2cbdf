"""The effect ledger's SQL: reserve and record are ONE statement (one round trip) each, fencing included
(a reserve of a key that has a row already: two)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from psycopg.types.json import Jsonb

from agentrun_core import errors
from agentrun_core.store import db, rows

ReserveOutcome = Literal["reserved", "existing"]

# Legal transitions: target status -> statuses it may come from.
_FROM: dict[str, list[str]] = {
    "pending": ["pending"],  # a failed attempt that will be retried, or needs_human marked
    "sent": ["pending"],
    "failed": ["pending"],
    "confirmed": ["pending", "sent"],
}


@dataclasses.dataclass(frozen=True)
class Reservation:
    outcome: ReserveOutcome
    # existing: the earlier row. reserved: None, the new row holds what the caller sent (``get_effect``
    # reads it); building it from the statement's JSON cost P2 ~8 % of its effects/s.
    effect: rows.Effect | None
    # existing rows: seconds until the earlier call can no longer take effect (Postgres clock), 0 if past
    in_flight_seconds: float = 0.0
    read_only: bool = False  # the run refuses effects: an existing pending row is looked up, never performed


def reserve_effect(
    conn: db.Conn,
    *,
    key: str,
    run_id: str,
    epoch: int,
    step: str,
    action: str,
    tool: str,
    occurrence: int,
    args_hash: str,
    args: Any,
    key_version: int = 2,
    timeout_seconds: float | None = None,
    divergence_needs_human: bool = False,
) -> Reservation:
    """Insert a ``pending`` row for ``key`` or return the existing one; ``Fenced`` / ``ReadOnlyRun``.

    ``timeout_seconds``: the tool's bound on a call taking effect (sets the new row's call deadline);
    an existing row with another ``args_hash`` counts a divergence (``divergence_needs_human``: the first
    one flags the row for a human).

    A new key costs one statement (``reserve_new_effect``: fence and insert); only a key that has a row
    already (a replay, a retry) or a read-only run costs the second, ``reserve_effect``, which inserts or
    returns the row as one statement of its own, so its answer never rests on the first one's."""
    params = {
        "key": key,
        "run_id": run_id,
        "epoch": epoch,
        "step": step,
        "action": action,
        "tool": tool,
        "occurrence": occurrence,
        "args_hash": args_hash,
        "args": Jsonb(args),
        "key_version": key_version,
        "timeout_seconds": timeout_seconds,
        "divergence_needs_human": divergence_needs_human,
    }
    first = db.fetch_one(conn, "reserve_new_effect", params)
    if rows.fenced(first, run_id=run_id, epoch=epoch, refused=f"effect {key}: write")["inserted"]:
        return Reservation("reserved", None)
    row = db.fetch_one(conn, "reserve_effect", params)
    return reservation_from_row(row, key=key, run_id=run_id, epoch=epoch)


def reservation_from_row(row: dict[str, Any] | None, *, key: str, run_id: str, epoch: int) -> Reservation:
    """Decide the reserve outcome from the statement's single row (pure)."""
    checked = rows.fenced(row, run_id=run_id, epoch=epoch, refused=f"effect {key}: write")
    if checked["inserted"]:
        return Reservation("reserved", None)
    if checked["existing"] is not None:
        wait = float(checked.get("in_flight_seconds") or 0.0)
        effect = rows.pack_json(rows.Effect, checked["existing"])
        return Reservation("existing", effect, wait, read_only=bool(checked["read_only"]))
    if checked["read_only"]:
        raise errors.ReadOnlyRun(f"run {run_id} is read-only: new effect {key} refused")
    # Inserted concurrently by a transaction our snapshot does not see; only possible for two writers of
    # the same epoch, which the Lease rules out. Refuse rather than guess.
    raise errors.Fenced(
        f"effect {key}: concurrent reservation by another writer of epoch {epoch}", epoch=epoch
    )


def record_effect(
    conn: db.Conn,
    *,
    key: str,
    run_id: str,
    epoch: int,
    status: str,
    calls: int = 0,
    result: Any = None,
    provider_ref: str | None = None,
    error: str | None = None,
    needs_human: bool = False,
    deadline_seconds: float | None = None,
    args: Any = None,
    args_hash: str | None = None,
    flush: bool = True,
    not_performed: bool = False,
) -> None:
    """Move ``key`` to ``status`` (fenced, one statement). ``calls``: provider calls since last record.
    Nothing of the row comes back: read it with ``get_effect``.

    ``deadline_seconds``: a call is about to be issued; it may take effect until now + this (Postgres clock).
    ``args``/``args_hash``: the arguments of that call, when they differ from the stored ones.
    ``not_performed`` (``failed`` only): the failure proves the provider did nothing, so a retry may give the
    effect a new key; otherwise a retry keeps its key (``store.reopen_run``).

    ``flush=False`` (a success only): the commit does not wait for the WAL flush. Safe because losing it
    in a server crash leaves the row ``pending`` with its call deadline: the state a worker killed between
    the provider call and this record leaves, which the next attempt reconciles (lookup, re-issue under
    the key, or a human), never guesses. Visible to everyone at once; on disk with the next commit that
    waits (WAL order: the next reserve, the step's checkpoint) or the WAL writer's next round (a fraction of
    a second), whichever is first. What is recorded before a call (a reserve, a re-issue's deadline and
    arguments) and a failure always wait for the flush."""
    if status not in _FROM:
        raise ValueError(f"unknown effect status {status!r}")
    if not flush and status not in ("sent", "confirmed"):
        raise ValueError(f"effect {key}: a {status!r} record must be flushed (only a success may wait)")
    row = db.fetch_one(
        conn,
        "record_effect",
        {
            "key": key,
            "run_id": run_id,
            "epoch": epoch,
            "status": status,
            "calls": calls,
            "result": None if result is None else Jsonb(result),
            "provider_ref": provider_ref,
            "error": error,
            "needs_human": needs_human,
            "from_statuses": _FROM[status],
            "deadline_seconds": deadline_seconds,
            "args": None if args is None else Jsonb(args),
            "args_hash": args_hash,
            "flush": flush,
            "not_performed": not_performed and status == "failed",
        },
    )
    checked = rows.fenced(row, run_id=run_id, epoch=epoch, refused=f"effect {key}: record")
    if checked["updated_status"] is None:
        raise RuntimeError(f"effect {key}: illegal transition {checked['previous_status']!r} -> {status!r}")


def confirm_effect(
    conn: db.Conn, *, run_id: str, key: str, result: Any = None, provider_ref: str | None = None
) -> rows.Effect | None:
    """The provider confirmed ``key`` of ``run_id`` later (poll, webhook): ``pending``/``sent`` →
    ``confirmed``. A key names an effect within its run only (migration 24)."""
    row = db.fetch_one(
        conn,
        "confirm_effect",
        {
            "run_id": run_id,
            "key": key,
            "result": None if result is None else Jsonb(result),
            "provider_ref": provider_ref,
        },
    )
    return rows.pack(rows.Effect, row) if row else None


def get_effect(conn: db.Conn, *, run_id: str, key: str) -> rows.Effect | None:
    row = db.fetch_one(conn, "get_effect", {"run_id": run_id, "key": key})
    return rows.pack(rows.Effect, row) if row else None


def list_effects(conn: db.Conn, run_id: str) -> list[rows.Effect]:
    return [rows.pack(rows.Effect, r) for r in db.fetch_all(conn, "list_effects", {"run_id": run_id})]


def effect_counts(conn: db.Conn, run_id: str) -> dict[str, int]:
    """{pending, sent, confirmed, failed, needsHuman} for the AgentRun status."""
    return fold_effect_counts(db.fetch_all(conn, "effect_counts", {"run_id": run_id}))


def fold_effect_counts(groups: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The counts of ``effect_counts``' rows ({status, n, needs_human} per status), every status present."""
    counts = {s: 0 for s in rows.EFFECT_STATUSES} | {"needsHuman": 0}
    for r in groups:
        counts[r["status"]] = int(r["n"])
        counts["needsHuman"] += int(r["needs_human"])
    return counts
