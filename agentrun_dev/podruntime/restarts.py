"""Restart decisions and crash-loop backoff — pure.

kubelet restarts a container per ``restartPolicy`` with a backoff of 10 s doubling to 5 min. A dev cluster
wants tests to see several restarts in seconds, so the defaults here are 1 s doubling to 10 s (settings);
the streak resets after a run that lasted ``reset_after_s``. The first restart waits ``initial_s`` too, so a
``CrashLoopBackOff`` waiting state is always observable between runs.
"""

from __future__ import annotations

import dataclasses

from agentrun_core import backoff as backoff_math
from agentrun_dev.podruntime import model


@dataclasses.dataclass(frozen=True)
class Backoff:
    initial_s: float = 1.0
    """Delay before the first restart, seconds."""
    max_s: float = 10.0
    """Cap of the doubling delay, seconds."""
    reset_after_s: float = 60.0
    """A run at least this long (seconds) forgets earlier crashes."""


def should_restart(policy: str, exit_code: int) -> bool:
    if policy == "Always":
        return True
    if policy == "OnFailure":
        return exit_code != 0
    return False


def delay(streak: int, backoff: Backoff) -> float:
    """Delay before the restart that follows the ``streak``-th consecutive crash (streak ≥ 1)."""
    return backoff_math.capped(streak, initial=backoff.initial_s, cap=backoff.max_s)


def on_exit(c: model.Container, term: model.Terminated, policy: str, now: float, backoff: Backoff) -> None:
    """Record a container's termination and schedule its restart if the policy wants one.

    Init containers restart on failure unless the policy is ``Never`` (kubelet treats ``Always`` as
    ``OnFailure`` for them).
    """
    ran_for = now - (term.started_at or now)
    c.crash_streak = 1 if ran_for >= backoff.reset_after_s else c.crash_streak + 1
    c.state = term
    effective = "OnFailure" if c.init and policy == "Always" else policy
    if should_restart(effective, term.exit_code):
        wait = delay(c.crash_streak, backoff)
        c.restart_at = now + wait
        c.last_state = term
        c.state = model.Waiting(
            "CrashLoopBackOff", f"back-off {wait:g}s restarting failed container={c.name}"
        )
    else:
        c.restart_at = None


def recovered(c: model.Container, now: float) -> model.Terminated:
    """A container the runtime lost (it restarted; the process is gone): kubelet reports it like this."""
    started = c.state.started_at if isinstance(c.state, model.Running) else None
    return model.Terminated(
        exit_code=137,
        reason="ContainerStatusUnknown",
        message="The container could not be located when the pod runtime restarted",
        finished_at=now,
        started_at=started,
        container_id=c.container_id,
    )
