"""Forks (``spec.forkOf``, ``kubectl agentrun fork``): a new run that starts from another run's checkpoint.

Rules:
* Who: creating the fork needs ``create`` on agentruns in the namespace, and the admission policy
  (deploy/admission/fork-policy.yaml) requires ``get`` on the source run by name in the same namespace.
  ``spec.forkOf`` is set at creation only.
* Where from: the operator resolves the source in the fork's own namespace (by name, and uid when given)
  and copies the checkpoint as the tables' owner, at admission, in the statement that admits the fork. The
  fork's worker (a per-tenant database role under row-level security) only ever reads its own thread, so a
  tenant cannot fork another tenant's run, whatever its spec names.
* What: the fork has its own run id (its uid), so its idempotency keys, ledger and effects are its own: an
  effect the source already performed is performed again by the fork if the fork reaches it.
* Past a gate: a fork from a checkpoint written after one of the source's approvals was decided acts on
  that decision without asking again (its state already holds it), and an edit can put anything in the
  state, a decision included. Both need ``spec.forkOf.approve`` (edits imply it), which the admission policy
  admits only from someone with the RBAC verb ``approve`` on the source; without it the operator refuses
  the fork. A fork from before the approval asks for it again, as its own approval.
* Edits (``spec.forkOf.set``, dotted state paths): refused at admission unless the top-level key is in the
  state at that checkpoint; applied by the fork's first worker with LangGraph's ``update_state`` (it has the
  graph's reducers) while the head is still the copied checkpoint, so they are applied once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The status reason the fork's worker writes (agent_worker.forking) for an edit path that does not fit.


def carried_problem(
    name: str, checkpoint_id: str | None, carried: tuple[str, ...], approve: bool
) -> str | None:
    """Why a fork that does not approve what it carries is refused (None: it carries no decision, or
    approves it)."""
    if not carried or approve:
        return None
    return (
        f"checkpoint {checkpoint_id} of run {name} was written after its approval {', '.join(carried)} was "
        "decided, so the fork would act on that decision without asking anyone; fork from a step before the "
        f"approval (the fork then asks for it again), or approve what it carries with --approve (needs the "
        f"RBAC verb approve on {name})"
    )


def status_entry(fork_of: Mapping[str, Any]) -> dict[str, Any]:
    """``status.forkOf``: the source run (name and uid), the checkpoint and step, the edited paths."""
    entry: dict[str, Any] = {
        "run": fork_of.get("name"),
        "runUid": fork_of.get("run_id"),
        "checkpointId": fork_of.get("checkpoint_id"),
    }
    if fork_of.get("step"):
        entry["step"] = fork_of["step"]
    if fork_of.get("set"):
        entry["set"] = sorted(fork_of["set"])
    return {k: v for k, v in entry.items() if v is not None}


def admission_record(
    source_run_id: str, name: str, checkpoint_id: str, step: str | None, edits: Mapping[str, Any]
) -> dict[str, Any]:
    """``agentrun_runs.fork_of`` as the operator admits it (what the worker and the trace read)."""
    return {
        "run_id": source_run_id,
        "name": name,
        "checkpoint_id": checkpoint_id,
        "step": step,
        "set": dict(edits),
    }
