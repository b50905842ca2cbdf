"""agentrun_core.store: the only module that runs SQL.

Public functions (docs/design.md): sync psycopg 3, each takes a ``psycopg.Connection`` or a
``psycopg_pool.ConnectionPool`` (autocommit connections make each call one round trip). Rows come back as the
frozen dataclasses of ``agentrun_core.store.rows``.
"""

from __future__ import annotations

from agentrun_core.store.approvals import (
    decide_approval,
    decide_approval_detail,
    get_approval,
    list_approvals,
    mark_approval_resumed,
    record_approval,
    sync_approval_policy,
)
from agentrun_core.store.attempts import (
    heartbeat,
    list_attempts,
    list_heartbeats,
    list_step_events,
    record_attempt_end,
    record_attempt_loss,
    record_attempt_start,
    record_step_event,
    record_steps,
    send_steps,
)
from agentrun_core.store.checkpoints import (
    Head,
    abandon_write,
    checkpoint_head,
    delta_chain,
    get_checkpoint_head,
    mark_fence,
    raise_if_refused,
)
from agentrun_core.store.db import Conn
from agentrun_core.store.effects_sql import (
    Reservation,
    confirm_effect,
    effect_counts,
    get_effect,
    list_effects,
    record_effect,
    reserve_effect,
)
from agentrun_core.store.forks import ForkSource, admit_fork, find_fork_source, list_forks
from agentrun_core.store.observation import Observation, observe_run
from agentrun_core.store.retention import fold_runs, mark_for_purge, purge_due, purge_due_namespaces
from agentrun_core.store.rows import Approval, Attempt, Decision, Effect, Heartbeat, Run, StepEvent
from agentrun_core.store.runs import (
    admit_run,
    cancel_run,
    claim_attempt,
    claim_run,
    finish_attempt,
    finish_run,
    get_run,
    get_run_now,
    list_runs,
    pin_image,
    set_current_step,
    set_read_only,
)
from agentrun_core.store.schema import migrate, schema_version
from agentrun_core.store.steering import (
    Intervention,
    Reopening,
    Resolution,
    list_interventions,
    reopen_run,
    resolve_effect,
)
from agentrun_core.store.tenants import (
    RANDOM_SECRET_ITERATIONS,
    drop_tenant,
    list_idle_tenants,
    provision_random_tenant,
    provision_tenant,
    scram_verifier,
    tenant_role,
)
from agentrun_core.store.usage import model_usage, model_usage_by_step, record_model_usage

__all__ = [
    "RANDOM_SECRET_ITERATIONS",
    "Approval",
    "Attempt",
    "Conn",
    "Decision",
    "Effect",
    "ForkSource",
    "Head",
    "Heartbeat",
    "Intervention",
    "Observation",
    "Reopening",
    "Reservation",
    "Resolution",
    "Run",
    "StepEvent",
    "abandon_write",
    "admit_fork",
    "admit_run",
    "cancel_run",
    "checkpoint_head",
    "claim_attempt",
    "claim_run",
    "confirm_effect",
    "decide_approval",
    "decide_approval_detail",
    "delta_chain",
    "drop_tenant",
    "effect_counts",
    "find_fork_source",
    "finish_attempt",
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
    "list_idle_tenants",
    "list_interventions",
    "list_runs",
    "list_step_events",
    "mark_approval_resumed",
    "mark_fence",
    "mark_for_purge",
    "migrate",
    "model_usage",
    "model_usage_by_step",
    "observe_run",
    "pin_image",
    "provision_random_tenant",
    "provision_tenant",
    "purge_due",
    "purge_due_namespaces",
    "raise_if_refused",
    "record_approval",
    "record_attempt_end",
    "record_attempt_loss",
    "record_attempt_start",
    "record_effect",
    "record_model_usage",
    "record_step_event",
    "record_steps",
    "reopen_run",
    "reserve_effect",
    "resolve_effect",
    "schema_version",
    "scram_verifier",
    "send_steps",
    "set_current_step",
    "set_read_only",
    "sync_approval_policy",
    "tenant_role",
]
