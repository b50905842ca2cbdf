"""What a notification call's answer proves (``agent_operator.decide.notify_outcome``, pure), and what
follows.

RFC 9110 §9.2.2: a non-idempotent request (our POST) is not retried automatically unless the client can tell
the request was never applied, or the receiver dedupes it. So only answers that say the request was not
processed are resent blindly; 500 / 502 / 504, a timeout or a reset after sending are ambiguous: resent only
to a receiver that dedupes by the Idempotency-Key, otherwise recorded as unknown for a human.
"""

from __future__ import annotations

import pytest

from agent_operator.decide import notify_outcome as rules


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (200, rules.DELIVERED),
        (202, rules.DELIVERED),
        (204, rules.DELIVERED),
        (429, rules.NOT_PROCESSED),  # RFC 6585: rate limited, the request was not processed
        (503, rules.NOT_PROCESSED),  # RFC 9110 §15.6.4: unable to handle the request
        (408, rules.NOT_PROCESSED),  # RFC 9110 §15.5.9: the request was not received in full
        (500, rules.AMBIGUOUS),  # an unexpected condition: it may have acted before it failed
        (502, rules.AMBIGUOUS),  # the gateway's upstream may have acted
        (504, rules.AMBIGUOUS),  # the upstream may have acted after the gateway gave up
        (599, rules.AMBIGUOUS),
        (501, rules.REJECTED),  # the method is not supported: nothing was done
        (301, rules.REJECTED),  # redirects are not followed
        (307, rules.REJECTED),
        (400, rules.REJECTED),
        (404, rules.REJECTED),
    ],
)
def test_what_an_answer_proves(code: int, kind: str) -> None:
    assert rules.classify_status(code) == kind


def decide(kind: str, dedupes: bool, before: bool = False, attempt: int = 1, budget: int = 8) -> rules.Next:
    return rules.decide(kind, dedupes=dedupes, maybe_delivered=before, attempt=attempt, max_attempts=budget)


@pytest.mark.parametrize("dedupes", [True, False])
def test_delivered_is_sent_and_not_processed_is_resent_to_any_receiver(dedupes: bool) -> None:
    assert decide(rules.DELIVERED, dedupes) == rules.Next("sent")
    resend = decide(rules.NOT_PROCESSED, dedupes)
    assert resend == rules.Next("pending", resend=True) and not resend.maybe_delivered


def test_ambiguous_is_resent_only_to_a_receiver_that_dedupes() -> None:
    assert decide(rules.AMBIGUOUS, True) == rules.Next("pending", resend=True, maybe_delivered=True)
    unknown = decide(rules.AMBIGUOUS, False)
    assert unknown == rules.Next("pending", maybe_delivered=True, needs_human=True)


def test_a_budget_spent_fails_only_what_provably_never_landed() -> None:
    assert decide(rules.NOT_PROCESSED, True, attempt=8) == rules.Next("failed")
    # An earlier call was ambiguous (a 500), the last one a 503: the first may have landed — never "failed".
    after = decide(rules.NOT_PROCESSED, True, before=True, attempt=8)
    assert after == rules.Next("pending", maybe_delivered=True, needs_human=True)
    assert decide(rules.AMBIGUOUS, True, attempt=8).needs_human
    # ... and a resend after an ambiguous call keeps that memory (the row's issued flag stays set).
    assert decide(rules.NOT_PROCESSED, True, before=True) == rules.Next(
        "pending", resend=True, maybe_delivered=True
    )


@pytest.mark.parametrize("kind", [rules.REJECTED, rules.REFUSED])
def test_rejected_or_refused_fails_unless_an_earlier_call_may_have_landed(kind: str) -> None:
    assert decide(kind, False) == rules.Next("failed")
    assert decide(kind, True, before=True) == rules.Next("pending", maybe_delivered=True, needs_human=True)
