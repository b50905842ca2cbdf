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
    """An attempt that ended without finishing or parking the run, as recorded in status.lastAttemptEnd."""

    attempt: int
    reason: str
    message: str
    restarts: int  # lost attempts so far, this one included
    next_attempt_at: datetime.datetime | None  # None: the limit is reached, no further attempt

    @property
    def exhausted(self) -> bool:
        return self.next_attempt_at is None


def on_loss(
    policy: model.RetryPolicy,
    attempt: int,
    reason: str,
    message: str,
    previous_restarts: int,
    now: datetime.datetime,
) -> Loss:
    restarts = previous_restarts + 1
    if restarts >= policy.max_attempts:
        return Loss(attempt, reason, message, restarts, None)
    delay = backoff_seconds(policy, restarts)
    return Loss(attempt, reason, message, restarts, now + datetime.timedelta(seconds=delay))


def on_control_plane_loss(
    policy: model.RetryPolicy,
    attempt: int,
    reason: str,
    message: str,
    previous_restarts: int,
    now: datetime.datetime,
) -> Loss:
    """A loss the control plane caused (API server unreachable, ...): restarts and the limit unchanged; the
    next attempt after the base backoff (the cause may still be there, so not at once)."""
    delay = backoff_seconds(policy, 1)
    return Loss(attempt, reason, message, previous_restarts, now + datetime.timedelta(seconds=delay))


def on_incompatible(
    policy: model.RetryPolicy,
    attempt: int,
    reason: str,
    message: str,
    previous_restarts: int,
    now: datetime.datetime,
    waits: int,
) -> Loss:
    """The worker refused the schema (exit 15) for the ``waits``-th time in a row: restarts and the limit
    unchanged, never exhausted; the next try after the run's backoff, doubled per wait up to its cap (an
    upgrade in progress takes minutes, a wrong image until someone changes it)."""
    delay = backoff_seconds(policy, waits)
    return Loss(attempt, reason, message, previous_restarts, now + datetime.timedelta(seconds=delay))
