"""One reconcile pass in progress: what was observed, the plan so far, and the status being decided. Pure.

Rule: the steps of a pass (``reconcile``, ``endings``, ``attempts``) change the ``State`` and say *whether*
the status is written (``Walk.show``); none of them builds the status. ``reconcile.decide`` builds it once,
at the end of the pass, from the final ``State`` (``run_status.build``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agent_operator import settings as settings_
from agent_operator.decide import actions, model, phases
from agentrun_core.api import status as api_status


@dataclasses.dataclass
class State:
    """Status being decided (a mutable copy of the last written status)."""

    phase: str
    reason: str
    message: str
    attempts: int
    attempt_reason: str | None
    restarts: int
    last_end: dict[str, Any] | None
    next_attempt_at: str | None
    start_time: str | None
    completion_time: str | None
    escalated: bool
    control_plane_losses: int = 0
    reopened: int = 0  # agentrun_runs.reopened as last acted on (a higher one in Postgres: reopen now)
    observed_retry_generation: int = 0  # spec.retryGeneration last acted on (applied, waited or refused)
    image: dict[str, Any] | None = None  # status.image: the run's pinned image (decide.imagepin)


def initial(status: Mapping[str, Any]) -> State:
    pending = status.get("pendingApproval") or {}
    return State(
        phase=str(status.get("phase") or api_status.PENDING),
        reason=str(_condition(status, status.get("phase") or "") or "Created"),
        message=str(status.get("message") or ""),
        attempts=int(status.get("attempts") or 0),
        attempt_reason=status.get("attemptReason"),
        restarts=int(status.get("restarts") or 0),
        last_end=dict(status["lastAttemptEnd"]) if status.get("lastAttemptEnd") else None,
        next_attempt_at=status.get("nextAttemptAt"),
        start_time=status.get("startTime"),
        completion_time=status.get("completionTime"),
        escalated=bool(pending.get("escalated")),
        control_plane_losses=int(status.get("controlPlaneLosses") or 0),
        reopened=int(status.get("reopened") or 0),
        observed_retry_generation=int(status.get("observedRetryGeneration") or 0),
        image=dict(status["image"]) if status.get("image") else None,
    )


# Phases only a run with an admission row ever shows (Pending and Failed are also shown before admission:
# waiting for a fork's source, a spec refused).
_ADMITTED_PHASES = frozenset(
    {
        api_status.RUNNING,
        api_status.WAITING_APPROVAL,
        api_status.SUCCEEDED,
        api_status.CANCELLED,
        api_status.SUSPENDED,
    }
)


def shows_admission(status: Mapping[str, Any]) -> bool:
    """Whether the run's status proves its admission row was written: an attempt, a phase only an admitted
    run reaches, or the Admitted condition (written only after the row: the plan's actions run before its
    status is written). Such a run is never admitted again (``reconcile._ledger_missing``)."""
    if int(status.get("attempts") or 0) > 0 or status.get("phase") in _ADMITTED_PHASES:
        return True
    return any(
        c.get("type") == api_status.ADMITTED and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def _condition(status: Mapping[str, Any], phase: str) -> str | None:
    """Reason of the condition that names the phase (Failed -> Failed's reason), for sticky phases."""
    for cond in status.get("conditions") or ():
        if cond.get("type") == phase and cond.get("status") == "True":
            return str(cond.get("reason") or "")
    return None


@dataclasses.dataclass
class Walk:
    """The pass: its inputs (``world``, ``settings``), its outputs (``plan``, ``st``) and the status flags."""

    world: model.World
    settings: settings_.ReconcileSettings
    plan: actions.Plan
    st: State
    write: bool = False  # write the status built from ``st`` (False: leave status as it is)
    admitted_now: bool = (
        False  # the plan writes the admission row (condition Admitted before Postgres shows it)
    )
    new_pod: str | None = None  # the Pod the plan creates (status.workerPod before the watch shows it)

    def show(self, *, admitted_now: bool = False, new_pod: str | None = None) -> None:
        """The status this pass decided is written (built once, by ``reconcile.decide``)."""
        self.write = True
        self.admitted_now = self.admitted_now or admitted_now
        self.new_pod = new_pod or self.new_pod

    def confirm(self, why: str) -> None:
        """Ask the runner for a fresh read of the Pod and the Lease before acting on ``why``."""
        self.plan.confirm = why
        self.show()
        self.plan.soon(0)

    def fail(self, reason: str, message: str) -> None:
        """The run fails now, with ``reason`` (the Failed condition's) and ``message``."""
        st = self.st
        st.phase, st.reason, st.message = api_status.FAILED, reason, message
        st.completion_time = phases.iso(self.world.now)
        st.next_attempt_at = None
        self.plan.warn(reason, message)
        self.show()
