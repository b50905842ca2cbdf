"""Capped exponential backoff: the one formula every retry loop of agentrun uses. Pure.

Rule: ``capped(n, initial=..., cap=...)`` is the delay before the retry that follows the ``n``-th failure,
counted from 1: ``initial * multiplier ** (n - 1)``, never more than ``cap``. ``n < 1`` counts as 1 (a caller
that wants "no delay before the first try" says so itself). Units are the caller's (all callers pass
seconds); the result is a float in the same unit. Jitter, Retry-After and "no delay yet" are policies of the
callers, not of this formula.

Callers: tool-call retries (agent_worker.retry), the next worker attempt after a lost one
(agent_operator.decide.retry), notification delivery (agent_operator.act.notifier), the dev pod runtime's
crash-loop
restarts (agentrun_dev.podruntime.restarts).
"""

from __future__ import annotations


def capped(n: int, *, initial: float, cap: float, multiplier: float = 2.0) -> float:
    """Seconds (the unit of ``initial`` and ``cap``) to wait after the ``n``-th consecutive failure.

    A delay past the cap is the cap, also when the uncapped value would not fit in a float (a long streak).
    """
    exponent = max(0, n - 1)
    try:
        raw = initial * multiplier**exponent
    except OverflowError:  # float ** big: far past any cap (unless there is no delay to grow)
        return 0.0 if initial == 0 else float(cap)
    return float(min(cap, raw))
