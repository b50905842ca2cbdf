"""The AgentRun status vocabulary: phases, condition types and reasons, as the operator writes them and the
CLI, the admission policies and the schedules read them.

Rule: a phase, condition type or reason is written here once; the operator (``agent_operator.decide``),
the CLI (``agentrun``) and the generated CRD (``crdgen``: the ``status.phase`` enum) take it from here.
tests/unit/test_vocabulary.py fails when a phase name appears as a literal anywhere else in source.

Kubernetes' own Pod phases share four of these names but are another resource's vocabulary: they are named
``POD_*`` below so a reader can tell "the worker Pod is Running" from "the AgentRun is Running".
"""

from __future__ import annotations

from typing import Final

# --- status.phase of an AgentRun ------------------------------------------------------------------------
PENDING: Final = "Pending"  # admitted (or not yet), no worker running
RUNNING: Final = "Running"
WAITING_APPROVAL: Final = "WaitingApproval"  # parked at an approval gate; nothing runs
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
CANCELLED: Final = "Cancelled"
SUSPENDED: Final = "Suspended"  # spec.suspend: no worker runs until it is cleared
PHASES: Final = (PENDING, RUNNING, WAITING_APPROVAL, SUCCEEDED, FAILED, CANCELLED, SUSPENDED)
# Nothing moves a run out of these, except a human's retry (kubectl agentrun retry).
FINAL_PHASES: Final = frozenset({SUCCEEDED, FAILED, CANCELLED})
# The same, in the order people read them (a schedule's history, the CLI's retry refusal).
FINISHED: Final = (SUCCEEDED, FAILED, CANCELLED)
# A run in one of these can be retried (kubectl agentrun retry).
RETRYABLE_PHASES: Final = (FAILED, CANCELLED)

# --- Condition types ------------------------------------------------------------------------------------
ADMITTED: Final = "Admitted"
FINISHED_CONDITION: Final = "Finished"  # True in every final phase (`kubectl wait --for=condition=Finished`)
APPROVAL_ESCALATED: Final = "ApprovalEscalated"
READ_ONLY: Final = "ReadOnly"
LEDGER_MISSING: Final = "LedgerMissing"
# Always present (True/False), in this order; the extra ones appear only while True.
CORE_CONDITIONS: Final = (ADMITTED, RUNNING, WAITING_APPROVAL, SUCCEEDED, FAILED, FINISHED_CONDITION)
EXTRA_CONDITIONS: Final = (CANCELLED, SUSPENDED, APPROVAL_ESCALATED, READ_ONLY, LEDGER_MISSING)

# --- Reasons (a condition's reason, status.reason, the Event's reason) ----------------------------------
APPROVAL_PENDING: Final = "ApprovalPending"
REOPENED: Final = "Reopened"  # a retry or a resolve reopened a final run
NOT_ADMITTED: Final = "NotAdmitted"
NOT_FINISHED: Final = "NotFinished"
NO_PENDING_APPROVAL: Final = "NoPendingApproval"
DEADLINE_PASSED: Final = "DeadlinePassed"  # ApprovalEscalated
APPROVAL_EXPIRED: Final = "ApprovalExpired"  # ReadOnly
# Why a run Failed (condition Failed, reason).
INVALID_SPEC: Final = "InvalidSpec"
UNSTORABLE: Final = "Unstorable"  # Postgres refuses to store the spec (U+0000): never admitted, never retried
ATTEMPTS_EXHAUSTED: Final = "AttemptsExhausted"
GRAPH_FAILED: Final = "GraphFailed"
NEEDS_HUMAN: Final = "NeedsHuman"
FORK_REFUSED: Final = "ForkRefused"  # not admitted: no such source, checkpoint or step, or an unknown key
FORK_EDIT_REFUSED: Final = "ForkEditRefused"  # the fork's edits do not fit the copied state
BUDGET_EXCEEDED: Final = "BudgetExceeded"
DEADLINE_EXCEEDED: Final = "DeadlineExceeded"
PROGRESS_DEADLINE_EXCEEDED: Final = "ProgressDeadlineExceeded"

# --- Kubernetes Pod phases (core/v1 Pod status.phase; the operator reads them, the dev pod runtime writes
# them) ------------------------------------------------------------------------------------------------
POD_PENDING: Final = "Pending"
POD_RUNNING: Final = "Running"
POD_SUCCEEDED: Final = "Succeeded"
POD_FAILED: Final = "Failed"
POD_UNKNOWN: Final = "Unknown"
POD_TERMINAL: Final = frozenset({POD_SUCCEEDED, POD_FAILED})
