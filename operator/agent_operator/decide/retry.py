"""Next-attempt decisions: backoff and the attempt limit. Pure."""

from __future__ import annotations

import dataclasses
import datetime

from agent_operator.decide import model
from agentrun_core import backoff


def backoff_seconds(policy: model.RetryPolicy, restarts: int) -> float:
    """Delay before the attempt that follows the ``restarts``-th lost attempt (1-based).

    ``backoffSeconds`` before the first restart, doubled for each further one, capped at
    ``maxBackoffSeconds``.
    """
    if restarts <= 0:
        return 0.0
    return backoff.capped(restarts, initial=policy.backoff_seconds, cap=policy.max_backoff_seconds)


@dataclasses.dataclass(frozen=True)
class Loss:
    """What an attempt that ended without finishing or parking the run leaves for the next one."""

    restarts: int  # lost attempts so far, this one included
    next_attempt_at: datetime.datetime | None  # None: the limit is reached, no further attempt

    @property
    def exhausted(self) -> bool:
        return self.next_attempt_at is None


def _after(policy: model.RetryPolicy, restarts: int, backoffs: int, now: datetime.datetime) -> Loss:
    """``restarts`` counted so far; the next attempt after the ``backoffs``-th backoff."""
    return Loss(restarts, now + datetime.timedelta(seconds=backoff_seconds(policy, backoffs)))


def on_loss(policy: model.RetryPolicy, previous_restarts: int, now: datetime.datetime) -> Loss:
    restarts = previous_restarts + 1
    if restarts >= policy.max_attempts:
        return Loss(restarts, None)
    return _after(policy, restarts, restarts, now)


def on_control_plane_loss(policy: model.RetryPolicy, previous_restarts: int, now: datetime.datetime) -> Loss:
    """A loss the control plane caused (API server unreachable, ...): restarts and the limit unchanged; the
    next attempt after the base backoff (the cause may still be there, so not at once)."""
    return _after(policy, previous_restarts, 1, now)


def on_incompatible(
    policy: model.RetryPolicy, previous_restarts: int, now: datetime.datetime, waits: int
) -> Loss:
    """The worker refused the schema (exit 15) for the ``waits``-th time in a row: restarts and the limit
    unchanged, never exhausted; the next try after the run's backoff, doubled per wait up to its cap (an
    upgrade in progress takes minutes, a wrong image until someone changes it)."""
    return _after(policy, previous_restarts, waits, now)
