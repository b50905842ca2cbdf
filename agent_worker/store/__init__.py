"""agent_worker.store: the only module that runs SQL.

Public functions (docs/design.md): sync psycopg 3, each takes a ``psycopg.Connection`` or a
``psycopg_pool.ConnectionPool`` (autocommit connections make each call one round trip). Rows come back as the
frozen dataclasses of ``agent_worker.store.rows``.
"""

from __future__ import annotations

from agent_worker.store.db import Conn
from agent_worker.store.effects_sql import (
    Reservation,
    confirm_effect,
    effect_counts,
    get_effect,
    list_effects,
    record_effect,
    reserve_effect,
)
from agent_worker.store.rows import Approval, Attempt, Effect, Heartbeat, Run, StepEvent
from agent_worker.store.runs import (
    admit_run,
    cancel_run,
    claim_run,
    decide_approval,
    fail_unclaimed_run,
    finish_run,
    get_approval,
    get_run,
    heartbeat,
    list_approvals,
    list_attempts,
    list_heartbeats,
    list_runs,
    list_step_events,
    mark_approval_resumed,
    record_approval,
    record_attempt_end,
    record_attempt_start,
    record_step_event,
    set_current_step,
    set_read_only,
)
from agent_worker.store.schema import migrate, schema_version

__all__ = [
    "Approval",
    "Attempt",
    "Conn",
    "Effect",
    "Heartbeat",
    "Reservation",
    "Run",
    "StepEvent",
    "admit_run",
    "cancel_run",
    "claim_run",
    "confirm_effect",
    "decide_approval",
    "effect_counts",
    "fail_unclaimed_run",
    "finish_run",
    "get_approval",
    "get_effect",
    "get_run",
    "heartbeat",
    "list_approvals",
    "list_attempts",
    "list_effects",
    "list_heartbeats",
    "list_runs",
    "list_step_events",
    "mark_approval_resumed",
    "migrate",
    "record_approval",
    "record_attempt_end",
    "record_attempt_start",
    "record_effect",
    "record_step_event",
    "reserve_effect",
    "schema_version",
    "set_current_step",
    "set_read_only",
]
