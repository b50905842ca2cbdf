"""What the operator reads of a run at each reconcile, in one statement (``observe_run``).

Rule: the answer is exactly what ``get_run_now``, ``list_approvals``, ``effect_counts`` and
``list_interventions`` answer one after the other, after ``sync_approval_policy`` — one round trip and one
transaction instead of four. A reconcile of an idle run (parked on approval, or finished) is a poll, every
``idle_poll_seconds`` for each such run, so Postgres's load while nothing happens grew with the number of
runs four times as fast. The lists come back as JSON (``to_jsonb`` of their rows: ``rows.pack_json``).
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from psycopg.types.json import Jsonb

from agentrun_core.api import protocol
from agentrun_core.store import db, effects_sql, rows, steering

_DOCS = ("policy_synced", "approvals_doc", "effect_counts_doc", "interventions_doc")


@dataclasses.dataclass(frozen=True)
class Observation:
    run: rows.Run | None  # None: not admitted (then nothing else is read)
    db_now: datetime.datetime  # Postgres' now(): deadlines it wrote are compared with its own clock
    approvals: tuple[rows.Approval, ...] = ()
    effects: dict[str, int] = dataclasses.field(default_factory=dict)  # effect_counts' shape; {} without run
    interventions: tuple[steering.Intervention, ...] = ()
    policy_synced: bool = False  # the run's approval policy was changed to the one given


def observe_run(conn: db.Conn, run_id: str, approval_policy: dict[str, Any] | None) -> Observation:
    """The run and all the operator reads with it; ``approval_policy`` (spec.approval) becomes the run's
    policy unless an approval is pending or the run is finished (``sync_approval_policy``'s rule); None:
    nothing is synced."""
    row = db.fetch_one(
        conn,
        "observe_run",
        {
            "run_id": run_id,
            "approval_policy": None if approval_policy is None else Jsonb(approval_policy),
            "final_statuses": list(protocol.FINAL_RUN_STATUSES),
        },
    )
    assert row is not None  # one row, run or not
    now: datetime.datetime = row.pop("db_now")
    synced, approvals, counts, interventions = (row.pop(k) for k in _DOCS)
    if row.get("run_id") is None:
        return Observation(None, now)
    return Observation(
        run=rows.pack(rows.Run, row),
        db_now=now,
        approvals=tuple(rows.pack_json(rows.Approval, a) for a in approvals),
        effects=effects_sql.fold_effect_counts(counts),
        interventions=tuple(rows.pack_json(steering.Intervention, i) for i in interventions),
        policy_synced=bool(synced),
    )
