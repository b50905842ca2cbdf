"""What a failed call to a provider proves, and what to do next. Pure: no I/O, no clock, no randomness.

One table for every sender: the worker's effects (``agent_worker.retry`` classifies their exceptions) and the
operator's notifications (``agent_operator.act.notify_http`` classifies their answers) both end in
``decide``, whose ``Decision`` the ledger machine (``agentrun_core.ledger``) acts on.

* ``refused``: the provider provably did nothing (429, 503, 408; nothing sent): call again after a backoff.
* ``ambiguous``: it may have acted (500, 502, 504, any other 5xx; a timeout or a reset after sending; an
  exception nobody classified): only a provider that dedupes by key may be called again blindly; otherwise the
  outcome is reconciled (lookup) or handed to a human. Out of attempts it is never recorded ``failed``.
* ``permanent``: it did not act and asking again cannot help (other 4xx, 3xx, 501, 505; refused by policy).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

Kind = Literal["refused", "ambiguous", "permanent"]
Action = Literal["retry", "reconcile", "fail"]

# RFC 6585 (429 rate limited), RFC 9110 §15.6.4 (503 unable to handle), §15.5.9 (408 not received in full).
REFUSED_STATUSES = frozenset({408, 429, 503})
# 5xx answers that say the server cannot do this at all (501 not implemented, 505 version): it did nothing.
UNSUPPORTED_STATUSES = frozenset({501, 505})


def classify_status(code: int) -> Kind | None:
    """What an HTTP answer proves; None for a 2xx (delivered)."""
    if 200 <= code < 300:
        return None
    if code in REFUSED_STATUSES:
        return "refused"
    if 300 <= code < 500 or code in UNSUPPORTED_STATUSES:
        return "permanent"
    return "ambiguous"  # 500, 502, 504, any other 5xx, and 1xx answers that never became final


@dataclasses.dataclass(frozen=True)
class Decision:
    action: Action
    delay: float = 0.0
    reason: str = ""


def decide(
    kind: Kind, calls_made: int, *, max_attempts: int, dedupes_by_key: bool, delay: float, message: str
) -> Decision:
    """What to do after the ``calls_made``-th call (from 1) failed with ``kind``; ``delay``: the backoff a
    retry would wait (the sender's policy: jitter, Retry-After)."""
    if kind == "permanent":
        return Decision("fail", reason=f"non-retryable: {message}")
    if kind == "ambiguous" and not dedupes_by_key:
        # Calling again could do it twice: find out first (lookup hook) or stop for a human.
        return Decision("reconcile", reason=f"unknown outcome: {message}")
    if kind == "ambiguous" and calls_made >= max_attempts:
        # Out of attempts, but it may have happened: never "failed" (a retry would re-key it and the
        # provider would perform it again). The ledger keeps it pending: lookup, the same key again, a human.
        why = f"unknown outcome after {calls_made} calls (out of attempts): {message}"
        return Decision("reconcile", reason=why)
    if calls_made >= max_attempts:
        return Decision("fail", reason=f"gave up after {calls_made} calls: {message}")
    return Decision("retry", delay, message)
