"""Named fault points: the process SIGKILLs itself exactly at a named boundary.

``AGENTRUN_FAULT_POINTS`` is a comma list of ``name`` (first hit) or ``name@N`` (the N-th hit, counting from
1) entries. Chaos tests use it to kill a worker at every boundary where a crash could lose progress or repeat
a side effect. Unknown names are a configuration error raised at startup (``configure``), not silently
ignored: a typo would otherwise make a chaos test pass without ever crashing.

SIGKILL (not an exception, not ``sys.exit``) because that is what a real OOM kill or node loss looks like: no
``finally`` blocks, no atexit handlers, no flushing.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Mapping

ENV_VAR = "AGENTRUN_FAULT_POINTS"

# Every point the worker can crash at, with where it sits. Keep in sync with docs/worker.md.
WORKER_POINTS: dict[str, str] = {
    "after_admission_read": "the run row was read from Postgres, nothing else done",
    "after_lease_acquired": "the Lease is held and the epoch written to the run row",
    "after_resume_read": "the decided approval (resume payload) was read, before invoking the graph",
    "after_reserve": "an effect's ledger row was reserved (pending), before the provider call",
    "after_call": "the provider call returned, before the ledger records its result",
    "after_record": "the ledger recorded the effect as sent, before the node returns",
    "after_checkpoint": "a step's checkpoint was written (step boundary)",
    "after_task_writes": "a task's writes were saved, before its step's checkpoint (any durability but exit)",
    "while_parking": "an interrupt's approval was recorded, before the lease is released and the run parked",
    "before_lease_renew": "the background keeper is about to renew the Lease",
}
# The operator's notifier (agent_operator.act.notifier), same mechanism in the operator process; the worker
# chaos matrix covers WORKER_POINTS, tests/integration/test_notify_faults.py these.
NOTIFY_POINTS: dict[str, str] = {
    "notify_after_reserve": "a notification's ledger row was reserved, before it is marked issued and sent",
    "notify_after_call": "the webhook answered, before the ledger records the notification's outcome",
    "notify_after_record": "the notification was recorded sent, before the operator goes on",
}
# The scheduler (agent_operator.act.scheduler): tests/integration/test_schedules.py.
SCHEDULE_POINTS: dict[str, str] = {
    "schedule_after_create": "a schedule's tick run was created, before its status records the tick",
}
OPERATOR_POINTS: dict[str, str] = {**NOTIFY_POINTS, **SCHEDULE_POINTS}
# The worker's model-call counting (agent_worker.budget, spec.budget): tests/integration/test_budgets.py.
MODEL_POINTS: dict[str, str] = {
    "after_model_usage": "a model call's usage was recorded, before its answer returns to the node",
    "before_model_check": "a model call is about to be checked against the budget (nothing recorded yet)",
}
POINTS: dict[str, str] = {**WORKER_POINTS, **OPERATOR_POINTS, **MODEL_POINTS}


class FaultConfigError(ValueError):
    """``AGENTRUN_FAULT_POINTS`` names an unknown point or has a malformed entry."""


@dataclasses.dataclass(frozen=True)
class FaultPlan:
    """point name -> the hit number (1-based) at which to die."""

    targets: Mapping[str, int]


def parse(value: str | None, known: Mapping[str, str] = POINTS) -> FaultPlan:
    """Parse the env var's value (pure). Empty or None → no faults."""
    targets: dict[str, int] = {}
    for raw in (value or "").split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, count_text = entry.partition("@")
        name = name.strip()
        if name not in known:
            raise FaultConfigError(
                f"{ENV_VAR}: unknown fault point {name!r}; known points: {', '.join(sorted(known))}"
            )
        count = 1
        if sep:
            try:
                count = int(count_text)
            except ValueError:
                raise FaultConfigError(f"{ENV_VAR}: {entry!r}: expected name@N with N an integer") from None
            if count < 1:
                raise FaultConfigError(f"{ENV_VAR}: {entry!r}: N counts hits from 1")
        if name in targets:
            raise FaultConfigError(f"{ENV_VAR}: point {name!r} listed twice")
        targets[name] = count
    return FaultPlan(targets=targets)


_lock = threading.Lock()
_plan: FaultPlan | None = None
_hits: dict[str, int] = {}


def configure(environ: Mapping[str, str] | None = None) -> FaultPlan:
    """Read the plan from the environment (call at startup so a bad value fails before any work)."""
    global _plan
    env = os.environ if environ is None else environ
    plan = parse(env.get(ENV_VAR))
    with _lock:
        _plan = plan
        _hits.clear()
    return plan


def hit(point: str) -> None:
    """Mark that execution reached ``point``; SIGKILL the process if the plan says this is the hit."""
    if point not in POINTS:
        # A programming error in the worker itself, not configuration.
        raise KeyError(f"unknown fault point {point!r}")
    global _plan
    with _lock:
        if _plan is None:
            _plan = parse(os.environ.get(ENV_VAR))
        target = _plan.targets.get(point)
        if target is None:
            return
        _hits[point] = _hits.get(point, 0) + 1
        if _hits[point] != target:
            return
    # Say where we died (stderr is unbuffered enough for tests reading the pod log), then die like OOM.
    sys.stderr.write(f"agentrun fault point {point} hit #{target}: SIGKILL\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def hits() -> dict[str, int]:
    """How often each targeted point was reached so far (for diagnostics)."""
    with _lock:
        return dict(_hits)
