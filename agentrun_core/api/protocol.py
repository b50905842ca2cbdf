"""The protocol every agentrun process shares: names and values written by one process and read by another.

Rule: a value that crosses a process boundary (Postgres column, API object, Pod env, exit code) is defined
here once, and every writer and reader imports it from here; nothing here does I/O. Sections: statuses (the
ledger's columns), exit codes, a worker Pod's environment, labels/annotations/owner, naming.
"""

from __future__ import annotations

import hashlib

from agentrun_core.api import status

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

# AgentRun status.phase: the resource's vocabulary, with its conditions and reasons, is in
# agentrun_core.api.status (the operator writes it, the CLI filters and prints it); here for protocol's
# readers.
FINAL_PHASES = status.FINAL_PHASES
PHASES = status.PHASES

# --- Exit codes ---------------------------------------------------------------------------------------------
# The worker ends each attempt with one of these; the operator reads the Pod's exit code to tell why the
# attempt ended (agent_operator.decide.pods.end_reason). Postgres is the truth; the code tells people and the
# runtime.
EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2  # the worker refused its configuration: the spec cannot run (InvalidSpec)
EXIT_PARKED = 10  # waiting for an approval
EXIT_DRAINED = 11  # SIGTERM: stopped at a step boundary
EXIT_FENCED = 12  # lost (or never took) the run's Lease: another holder may act
EXIT_NEEDS_HUMAN = 13  # an effect of unknown outcome that only a human can settle
EXIT_INFRA = 14  # lost Postgres (restart, crash): the attempt is lost, the graph did not fail
# The worker's code does not run against this schema (agentrun_core.compat): it touched nothing; the operator
# keeps the run waiting (WorkerIncompatible) and tries again with backoff until an upgrade makes them match.
EXIT_INCOMPATIBLE = 15
EXIT_OOM = 137  # SIGKILL, as the kernel's OOM killer leaves it

# --- Environment of a worker Pod ----------------------------------------------------------------------------
# Set by the operator (agent_operator.decide.pods.manifest), read by the worker
# (agent_worker.settings.from_env).
ENV_RUN_ID = "AGENTRUN_RUN_ID"  # AgentRun metadata.uid = LangGraph thread_id
ENV_RUN_NAME = "AGENTRUN_RUN_NAME"
ENV_NAMESPACE = "AGENTRUN_NAMESPACE"
ENV_POD_NAME = "AGENTRUN_POD_NAME"  # the Lease holderIdentity
ENV_ATTEMPT = "AGENTRUN_ATTEMPT"
ENV_LEASE_NAME = "AGENTRUN_LEASE_NAME"
ENV_LEASE_DURATION_SECONDS = "AGENTRUN_LEASE_DURATION_SECONDS"
ENV_DSN = "AGENTRUN_DSN"
ENV_BUDGET = "AGENTRUN_BUDGET"  # spec.budget as JSON (agentrun_core.budget); unset: no budget
# spec.worker.env entries named ENV_FAULT_POINTS_ATTEMPT_PREFIX + <n> become AGENTRUN_FAULT_POINTS in
# attempt n only (agentrun_core.faults.ENV_VAR), so a test can crash one attempt and let the next finish.
ENV_FAULT_POINTS_ATTEMPT_PREFIX = "AGENTRUN_FAULT_POINTS_ATTEMPT_"

# --- Labels, annotations, owner -----------------------------------------------------------------------------
API_VERSION = "agentrun.dev/v1alpha1"
KIND = "AgentRun"
LABEL_RUN = "agentrun.dev/run"  # on the worker Pods and the run Lease: the AgentRun's name
LABEL_ATTEMPT = "agentrun.dev/attempt"  # on a worker Pod: its attempt number
# The run's uid: survives `kubectl delete --cascade=orphan` (which strips owner references), so a run
# recreated under the same name never takes an earlier run's Pods or Lease for its own.
LABEL_RUN_UID = "agentrun.dev/run-uid"
# On a worker Pod of a run with spec.concurrency: which key's limit it counts against (concurrency_label).
LABEL_CONCURRENCY = "agentrun.dev/concurrency"
ANN_START_REASON = "agentrun.dev/start-reason"  # on a worker Pod: why its attempt started
# On every worker Pod: the API server keeps a deleted Pod, with its final status (exit code, OOMKilled,
# DisruptionTarget), until the operator has recorded why its attempt ended, so an operator that restarts
# (or a new leader) in between reads the Pod's last state instead of finding it gone. The operator's
# agent_operator.decide.cleanup decides when to release it; Kubernetes' Job controller holds its Pods the
# same way
# (batch.kubernetes.io/job-tracking).
POD_FINALIZER = "agentrun.dev/attempt-record"


def owner_reference(run_name: str, run_uid: str) -> dict[str, str]:
    """The reference that ties a worker's Pod or Lease to its AgentRun (garbage collection)."""
    return {"apiVersion": API_VERSION, "kind": KIND, "name": run_name, "uid": run_uid}


def concurrency_label(key: str) -> str:
    """The label value of a ``spec.concurrency`` key (any text up to 253 characters, hashed to fit)."""
    return "k" + hashlib.sha256(key.encode()).hexdigest()[:40]


def run_labels(run_name: str, run_uid: str) -> dict[str, str]:
    """The labels every object of a run carries (its Pods and its Lease)."""
    return {LABEL_RUN: run_name, LABEL_RUN_UID: run_uid}


# --- Naming -------------------------------------------------------------------------------------------------
def lease_name(run_name: str) -> str:
    """The run's Lease: the one lock a worker must hold to act for the run."""
    return f"agentrun-{run_name}"


def pod_name(run_name: str, attempt: int) -> str:
    """The worker Pod of ``attempt``: a new name per attempt, so each attempt has its own Lease identity."""
    return f"{run_name}-{attempt}"
