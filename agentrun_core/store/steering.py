"""Humans steering a stopped run: retry it, resolve an effect of unknown outcome. One statement each.

Rule: every change here raises the run's ``lease_epoch`` in the same statement that makes it, and records who
made it (``agentrun_interventions``) in that statement too. So nothing that ran before the change can write
after it, and there is never a change without its record (or a record without its change).
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from psycopg.types.json import Jsonb

from agentrun_core.store import db, rows

RESOLUTIONS = ("sent", "not_sent")


@dataclasses.dataclass(frozen=True)
class Intervention:
    id: int
    run_id: str
    kind: str  # retry | resolve_sent | resolve_not_sent
    effect_key: str | None
    generation: int | None
    by: str
    at: datetime.datetime
    from_status: str | None
    detail: Any


@dataclasses.dataclass(frozen=True)
class Resolution:
    """What ``resolve_effect`` did. ``resolved`` False: nothing changed; ``refusal`` says why."""

    resolved: bool
    run_status: str | None  # before the statement (None: run unknown or not stopped)
    effect_status: str | None  # before the statement (None: no such effect)
    new_status: str | None  # the run's status after (admitted when a needs_human run was reopened)
    not_performed: bool = False  # the effect's failure proves nothing was performed (not resolvable)

    @property
    def reopened(self) -> bool:
        return self.resolved and self.run_status == "needs_human"

    @property
    def refusal(self) -> str | None:
        if self.resolved:
            return None
        if self.run_status is None:
            return "the run is not stopped (only effects of a needs-human, failed or cancelled run)"
        if self.effect_status is None:
            return "no effect with this key in the run's ledger"
        if self.effect_status == "failed" and self.not_performed:
            return (
                "the effect failed and its failure proves nothing was performed: `agentrun retry` performs "
                "it again under a new key"
            )
        return f"the effect is {self.effect_status!r}, not 'pending': its outcome is already known"


@dataclasses.dataclass(frozen=True)
class Reopening:
    """What a retry did. ``rekeyed``: failed effects whose failure proves nothing was performed (the worker
    gives them their next key generation); ``kept``: failed effects that may have happened, back to
    ``pending`` under their key (reconciled by lookup / a deduping provider, or resolved by a human).
    Each entry: ``{"key", "tool", "step"}`` (``kept`` also ``"error"``)."""

    run: rows.Run
    rekeyed: list[dict[str, Any]]
    kept: list[dict[str, Any]]


def reopen_run(conn: db.Conn, *, run_id: str, generation: int, by: str, reason: str) -> Reopening | None:
    """Retry: reopen a stopped run under ``generation`` (only forward). None if unchanged."""
    row = db.fetch_one(
        conn, "reopen_run", {"run_id": run_id, "generation": generation, "by": by, "reason": reason}
    )
    if row is None or row["run"] is None:
        return None
    detail = row["detail"] or {}
    run = rows.pack_json(rows.Run, row["run"])
    return Reopening(run, list(detail.get("rekeyed") or []), list(detail.get("kept") or []))


def resolve_effect(
    conn: db.Conn, *, run_id: str, key: str, outcome: str, by: str, result: Any = None
) -> Resolution:
    """A human's verdict on an effect of unknown outcome of a stopped run: ``pending``, or ``failed`` by a
    failure that does not prove nothing was performed.

    ``outcome='sent'``: it happened; ``result`` becomes the tool's return value on replay.
    ``'not_sent'``: it did not; the next attempt performs it once more under the same key.
    A needs-human run is reopened."""
    if outcome not in RESOLUTIONS:
        raise ValueError(f"outcome must be one of {RESOLUTIONS}, not {outcome!r}")
    row = db.fetch_one(
        conn,
        "resolve_effect",
        {
            "run_id": run_id,
            "key": key,
            "outcome": outcome,
            "by": by,
            "result": None if result is None else Jsonb(result),
            "reason": f"effect {key} resolved {outcome.replace('_', '-')} by {by}",
        },
    )
    assert row is not None  # the statement always yields one row
    return Resolution(
        resolved=int(row["resolved"]) > 0,
        run_status=row["run_status"],
        effect_status=row["effect_status"],
        new_status=row["new_status"],
        not_performed=bool(row["not_performed"]),
    )


def list_interventions(conn: db.Conn, run_id: str) -> list[Intervention]:
    found = db.fetch_all(conn, "list_interventions", {"run_id": run_id})
    return [rows.pack(Intervention, r) for r in found]
