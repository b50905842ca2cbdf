"""What a notification call's outcome proves, and what follows from it. Pure: no I/O.

A notification is a POST: not idempotent (RFC 9110 §9.2.2), and a receiver may act on it and still answer an
error. RFC 9110 §9.2.2: a client SHOULD NOT automatically retry a non-idempotent request unless it can tell
the request was never applied — or the receiver dedupes it. So:

* **Proves it was not processed** (``NOT_PROCESSED``): 429 (RFC 6585: rate limited), 503 (§15.6.4: unable to
  handle the request), 408 (§15.5.9: the request was not received in full), and anything that failed
  before a byte of the request was sent (a name that does not resolve, a refused or unreachable connection, a
  failed TLS handshake). Resent with backoff to any receiver.
* **Proves nothing** (``AMBIGUOUS``): 500 (an unexpected condition, maybe after acting), 502 and 504 (a
  gateway whose upstream may have acted), any other 5xx we do not know, a timeout or a broken connection after
  the request was sent. Resent only to a receiver that declares it dedupes by the ``Idempotency-Key`` header
  (``receiverDedupes``); otherwise recorded as unknown and handed to a human — never guessed.
* **Refused by the receiver** (``REJECTED``): other 4xx, 501 / 505, a 3xx (redirects are not followed): it did
  not act, and asking again would not change the answer. Failed.
* **Refused by the operator** (``REFUSED``): the outbound policy (``agent_operator.outbound``) forbids the
  target; no connection was made. Failed.

Once any call's outcome was ambiguous, the notification can never be recorded ``failed`` (that would say it
provably never landed): it ends ``sent`` or unknown. That memory is the ledger row's ``issued`` flag, which
stays set across resends (``maybe_delivered``).
"""

from __future__ import annotations

import dataclasses

DELIVERED = "delivered"
NOT_PROCESSED = "not_processed"
AMBIGUOUS = "ambiguous"
REJECTED = "rejected"
REFUSED = "refused"
KINDS = (DELIVERED, NOT_PROCESSED, AMBIGUOUS, REJECTED, REFUSED)

# Answers that say the receiver did not process the request (see the module's docstring).
NOT_PROCESSED_STATUSES = frozenset({408, 429, 503})
# 5xx answers that say the server cannot do this at all: it did nothing.
UNSUPPORTED_STATUSES = frozenset({501, 505})


def classify_status(code: int) -> str:
    """What an HTTP answer to our POST proves."""
    if 200 <= code < 300:
        return DELIVERED
    if code in NOT_PROCESSED_STATUSES:
        return NOT_PROCESSED
    if 300 <= code < 500 or code in UNSUPPORTED_STATUSES:
        return REJECTED
    return AMBIGUOUS  # 500, 502, 504, any other 5xx, and 1xx answers that never became final


@dataclasses.dataclass(frozen=True)
class Next:
    """What to record after a call. ``status``: the row's next status (sent | pending | failed)."""

    status: str
    resend: bool = False  # pending: call again, under the same key, after a backoff
    maybe_delivered: bool = False  # the row's issued flag: a call's outcome is unknown
    needs_human: bool = False  # pending and flagged: the outcome is unknown and it is not sent again


def decide(kind: str, *, dedupes: bool, maybe_delivered: bool, attempt: int, max_attempts: int) -> Next:
    """The next state of a notification after call ``attempt`` (from 1) ended with ``kind``.

    ``maybe_delivered``: an earlier call's outcome was ambiguous (the row's ``issued`` flag before this call).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown outcome kind {kind!r}")
    if kind == DELIVERED:
        return Next("sent")
    ambiguous = maybe_delivered or kind == AMBIGUOUS
    budget_left = attempt < max_attempts
    if kind == NOT_PROCESSED and budget_left:
        return Next("pending", resend=True, maybe_delivered=maybe_delivered)
    if kind == AMBIGUOUS and dedupes and budget_left:
        return Next("pending", resend=True, maybe_delivered=True)
    if ambiguous:
        # May have landed: never "failed" (a guess that it did not), never resent here.
        return Next("pending", maybe_delivered=True, needs_human=True)
    return Next("failed")
