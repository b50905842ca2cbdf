"""What a notification call's outcome proves, and what follows from it: the worker's effect ledger decides.

Pure: no I/O. A notification is one more effect of the run, sent through the same ledger machine
(``agentrun_core.ledger``) and the same outcome table (``agentrun_core.outcomes``) as the worker's effects.
This module only translates: the receiver's answer into an outcome kind, the notification's ledger row and
the answer into the machine's events, and the machine's actions back into what the notifier records.

A notification is a POST: not idempotent (RFC 9110 §9.2.2), and a receiver may act on it and still answer an
error. So:

* **Proves it was not processed** (``NOT_PROCESSED``, the machine's ``refused``): 429, 503, 408, and anything
  that failed before a byte of the request was sent (a name that does not resolve, a refused or unreachable
  connection, a failed TLS handshake). Resent with backoff to any receiver.
* **Proves nothing** (``AMBIGUOUS``): 500, 502, 504, any other 5xx we do not know, a timeout or a broken
  connection after the request was sent. Resent only to a receiver that dedupes by the ``Idempotency-Key``
  header (``receiverDedupes``, the machine's ``dedupes_by_key``); otherwise pending, handed to a human.
* **Refused by the receiver** (``REJECTED``: other 4xx, 501 / 505, a 3xx, as redirects are not followed) or
  **by the operator** (``REFUSED``: the outbound policy forbids the target): it did not act. Failed.

Once any call's outcome was ambiguous, the notification can never be recorded ``failed`` (that would say it
provably never landed): it ends ``sent`` or unknown. That memory is the ledger row's ``issued`` flag (the
machine's ``maybe_done``), which stays set across resends. Notifications have no run-level retry, so the
machine runs them with ``retry_by_run=False``: out of attempts, an unknown outcome goes to a human.
"""

from __future__ import annotations

import dataclasses

from agentrun_core import ledger, outcomes

DELIVERED = "delivered"
NOT_PROCESSED = "not_processed"
AMBIGUOUS = "ambiguous"
REJECTED = "rejected"
REFUSED = "refused"
KINDS = (DELIVERED, NOT_PROCESSED, AMBIGUOUS, REJECTED, REFUSED)

# The outcome table's kind of each failed call (agentrun_core.outcomes).
_FAILURE: dict[str, outcomes.Kind] = {
    NOT_PROCESSED: "refused",
    AMBIGUOUS: "ambiguous",
    REJECTED: "permanent",
    REFUSED: "permanent",
}
_BY_TABLE = {"refused": NOT_PROCESSED, "ambiguous": AMBIGUOUS, "permanent": REJECTED}

# What the notifier does with a reserved row: nothing (sent, failed, or with a human already), call now,
# or record its outcome as unknown (pending, flagged for a human) without calling.
SKIP, CALL, UNKNOWN = "skip", "call", "unknown"


def classify_status(code: int) -> str:
    """What an HTTP answer to our POST proves (the table the worker's effects use)."""
    kind = outcomes.classify_status(code)
    return DELIVERED if kind is None else _BY_TABLE[kind]


@dataclasses.dataclass(frozen=True)
class Next:
    """What to record after a call. ``status``: the row's next status (sent | pending | failed)."""

    status: str
    resend: bool = False  # pending: call again, under the same key, after a backoff
    maybe_delivered: bool = False  # the row's issued flag: a call's outcome is unknown
    needs_human: bool = False  # pending and flagged: the outcome is unknown and it is not sent again


def spec(*, dedupes: bool, max_attempts: int) -> ledger.Spec:
    """A notification as the ledger machine sees it: no lookup hook, the receiver's dedupe, no run retry."""
    return ledger.Spec(
        tool="notification",
        step="notify",
        run_id="",
        args_hash="",
        dedupes_by_key=dedupes,
        max_attempts=max_attempts,
        retry_by_run=False,
    )


def decide(kind: str, *, dedupes: bool, maybe_delivered: bool, attempt: int, max_attempts: int) -> Next:
    """The next state of a notification after call ``attempt`` (from 1) ended with ``kind``: the machine's
    transition from ``calling``. ``maybe_delivered``: an earlier call's outcome was ambiguous (the row's
    ``issued`` flag before this call)."""
    if kind not in KINDS:
        raise ValueError(f"unknown outcome kind {kind!r}")
    machine = spec(dedupes=dedupes, max_attempts=max_attempts)
    state = ledger.State(ledger.Phase.CALLING, "notification", total=attempt, unrecorded=1,
                         maybe_done=maybe_delivered)  # fmt: skip
    if kind == DELIVERED:
        event = ledger.Event(ledger.EventKind.CALL_OK)
    else:
        failure = _FAILURE[kind]
        decision = outcomes.decide(
            failure, attempt, max_attempts=max_attempts, dedupes_by_key=dedupes, delay=0.0, message=kind
        )
        proven = failure != "ambiguous"  # the call proves nothing was done
        event = ledger.Event(
            ledger.EventKind.CALL_FAILED, decision=decision, message=kind, not_performed=proven
        )
    step = ledger.transition(machine, state, event)
    if any(isinstance(action, ledger.RecordSuccess) for action in step.actions):
        return Next("sent")
    record = next(action for action in step.actions if isinstance(action, ledger.Record))
    if record.status == "failed":
        return Next("failed")
    if record.needs_human:
        return Next("pending", maybe_delivered=True, needs_human=True)
    if any(isinstance(action, ledger.Sleep) for action in step.actions):
        return Next("pending", resend=True, maybe_delivered=step.state.maybe_done)
    raise ledger.Unexpected(f"notification after {kind}: no plan the notifier can record: {step.actions}")


_RESERVED = {
    "pending": ledger.EventKind.RESERVED_PENDING,
    "sent": ledger.EventKind.RESERVED_SENT,
    "failed": ledger.EventKind.RESERVED_FAILED,
}


def reserved(
    *, status: str, inserted: bool, issued: bool, needs_human: bool, attempts: int, dedupes: bool,
    max_attempts: int,
) -> str:  # fmt: skip
    """What a reserved notification row calls for (``SKIP``, ``CALL``, ``UNKNOWN``): the machine's transition
    from ``reserving``. A row found ``issued`` had a call out whose outcome is not recorded: re-sent under
    its key only to a receiver that dedupes, else unknown; a row not issued proves nothing of it is out."""
    machine = spec(dedupes=dedupes, max_attempts=max_attempts)
    kind = ledger.EventKind.RESERVED_NEW if inserted else _RESERVED[status]
    event = ledger.Event(kind, key="notification", needs_human=needs_human, attempts=attempts,
                         unsent=not issued)  # fmt: skip
    step = ledger.transition(machine, ledger.start(machine, "notification").state, event)
    if any(isinstance(action, ledger.Call) for action in step.actions):
        return CALL
    if any(isinstance(action, ledger.Record) and action.needs_human for action in step.actions):
        return UNKNOWN
    return SKIP  # returned (sent), failed, or flagged for a human already
