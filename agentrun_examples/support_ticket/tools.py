"""The agent's side effects, declared through the worker's effect ledger (:mod:`agent_worker.effects`).

``send_email`` is not idempotent at the provider (SMTP delivers duplicates), so it is declared with
``dedupes_by_key=False`` and a lookup hook. When an earlier attempt left the ledger row ``pending`` (it
may or may not have sent), or the connection broke while the message was in flight, the worker calls
:func:`find_email` with the same key: a message found in the mailbox is recorded without sending again, a
message provably absent is sent, and a lookup that cannot answer stops the run for a human instead of
guessing.
"""

from __future__ import annotations

import time
from typing import Any, cast

from agent_worker import context, effects
from agentrun_examples.support_ticket import mail, settings


def find_email(key: str, args: dict[str, Any]) -> effects.Outcome | None:
    """Lookup hook: the message with this key's Message-ID, if it reached the mailbox; else ``None``.

    Raises :class:`mail.LookupUnavailable` when it cannot tell (no lookup configured, mailbox down): the
    worker then flags the effect for a human.
    """
    found = mail.lookup(settings.from_env().smtp, key)
    if found is None:
        return None
    # Seen in the mailbox: delivered, which is more than the SMTP server's 250 ("sent") tells.
    return effects.Outcome(found, provider_ref=str(found["message_id"]), confirmed=True)


# timeout: an SMTP submission either completes within the client's timeout or the server drops it; 30 s
# covers the default settings.SmtpConfig timeout with margin (a lookup is trusted only after it).
@effects.tool(name="send_email", dedupes_by_key=False, lookup=find_email, timeout=30)
def _send_email(call: effects.Call, *, to: str, subject: str, body: str) -> effects.Outcome:
    try:
        result = mail.send(
            settings.from_env().smtp, key=call.idempotency_key, to=to, subject=subject, body=body
        )
    except mail.NotSent as exc:
        raise effects.Retryable(str(exc)) from exc
    except mail.Rejected as exc:
        raise effects.Permanent(str(exc)) from exc
    except mail.OutcomeUnknown as exc:
        raise effects.Ambiguous(str(exc)) from exc
    return effects.Outcome(result, provider_ref=str(result["message_id"]))


def send_email(*, to: str, subject: str, body: str) -> dict[str, Any]:
    """Send the reply exactly once per position in the run (run, step, occurrence); returns the stored
    result, also when a replay drafted another body."""
    # The ledger returns the stored Outcome.result (the dict), not the Outcome the tool built.
    return cast(dict[str, Any], _send_email(to=to, subject=subject, body=body))


def pause(step: str, seconds: float) -> None:
    """Sleep inside a step (the demo's ``options.pause_seconds``), heartbeating when run by a worker."""
    deadline = time.monotonic() + seconds
    in_worker = context.maybe_current() is not None
    while (left := deadline - time.monotonic()) > 0:
        if in_worker:
            effects.heartbeat({"pausing": step, "seconds_left": round(left, 1)})
        time.sleep(min(1.0, left))
