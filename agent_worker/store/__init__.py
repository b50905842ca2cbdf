"""agent_worker.store: the only module that runs SQL.

Public functions (docs/design.md): sync psycopg 3, each takes a ``psycopg.Connection`` or a
``psycopg_pool.ConnectionPool`` (autocommit connections make each call one round trip). Rows come back as the
frozen dataclasses of ``agent_worker.store.rows``.
"""

from __future__ import annotations

from agent_worker.store.checkpoints import fence_checkpoint, get_checkpoint_head
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
from agent_worker.store.forks import ForkSource, admit_fork, find_fork_source, list_forks
from agent_worker.store.retention import fold_runs, mark_for_purge, purge_due
from agent_worker.store.rows import Approval, Attempt, Decision, Effect, Heartbeat, Run, StepEvent
from agent_worker.store.runs import (
    admit_run,
    cancel_run,
    claim_run,
    decide_approval,
    decide_approval_detail,
    finish_run,
    get_approval,
    get_run,
    get_run_now,
    heartbeat,
    list_approvals,
    list_attempts,
    list_heartbeats,
    list_runs,
    list_step_events,
    mark_approval_resumed,
    pin_image,
    provision_tenant,
    record_approval,
    record_attempt_end,
    record_attempt_loss,
    record_attempt_start,
    record_step_event,
    record_steps,
    set_current_step,
    set_read_only,
    sync_approval_policy,
    tenant_role,
)
from agent_worker.store.schema import migrate, schema_version
from agent_worker.store.steering import (
    Intervention,
    Resolution,
    list_interventions,
    reopen_run,
    resolve_effect,
)

__all__ = [
    "Approval",
    "Attempt",
    "Conn",
    "Decision",
    "Effect",
    "ForkSource",
    "Heartbeat",
    "Intervention",
    "Reservation",
    "Resolution",
    "Run",
    "StepEvent",
    "admit_fork",
    "admit_run",
    "cancel_run",
    "claim_run",
    "confirm_effect",
    "decide_approval",
    "decide_approval_detail",
    "effect_counts",
    "fence_checkpoint",
    "find_fork_source",
    "finish_run",
    "fold_runs",
    "get_approval",
    "get_checkpoint_head",
    "get_effect",
    "get_run",
    "get_run_now",
    "heartbeat",
    "list_approvals",
    "list_attempts",
    "list_effects",
    "list_forks",
    "list_heartbeats",
    "list_interventions",
    "list_runs",
    "list_step_events",
    "mark_approval_resumed",
    "mark_for_purge",
    "migrate",
    "pin_image",
    "provision_tenant",
    "purge_due",
    "record_approval",
    "record_attempt_end",
    "record_attempt_loss",
    "record_attempt_start",
    "record_effect",
    "record_step_event",
    "record_steps",
    "reopen_run",
    "reserve_effect",
    "resolve_effect",
    "schema_version",
    "set_current_step",
    "set_read_only",
    "sync_approval_policy",
    "tenant_role",
]
