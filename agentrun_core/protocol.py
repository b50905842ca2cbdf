"""The protocol every agentrun process shares: names and values written by one process and read by another.

Rule: a value that crosses a process boundary (Postgres column, API object, Pod env, exit code) is defined
here once, and every writer and reader imports it from here; nothing here does I/O.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------------------
# Statuses: the values of the ledger's status columns (agentrun_core/store/sql migrations) and the run
# durabilities. Written by the worker and the store, read by the operator, the CLI and the metrics.
# ---------------------------------------------------------------------------------------------------------

# agentrun_runs.status
RUN_STATUSES = ("admitted", "running", "parked", "needs_human", "succeeded", "failed", "cancelled")
# The run statuses nothing moves out of, except a human's retry (agentrun_core.store.steering).
FINAL_RUN_STATUSES = ("succeeded", "failed", "cancelled")
# agentrun_effects.status
EFFECT_STATUSES = ("pending", "sent", "confirmed", "failed")
# agentrun_approvals.status: pending, then one of the decisions
APPROVAL_PENDING = "pending"
DECISIONS = ("approved", "rejected", "expired")
APPROVAL_STATUSES = (APPROVAL_PENDING, *DECISIONS)
# agentrun_runs.durability = spec.durability of the AgentRun (LangGraph checkpoint durability)
DURABILITIES = ("sync", "async", "exit")
