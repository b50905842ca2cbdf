"""One ledger machine for both senders: a worker's effect and the operator's notification.

The same scenarios run for each sender through the shared machine (``agentrun_core.ledger``) and outcome
table (``agentrun_core.outcomes``): the worker's spec as ``agent_worker.ledger_shell`` builds it, the
notification's as ``agent_operator.decide.notify_outcome`` builds it (and its ``decide`` / ``reserved``
adapters,
which the notifier calls). Where the senders differ (a run-level retry exists only for effects), both sides
are pinned.
"""

from __future__ import annotations

import dataclasses
import email.message
import urllib.error

import pytest

from agent_operator.decide import notify_outcome
from agent_worker import retry
from agentrun_core import ledger, outcomes
from agentrun_core.ledger import EventKind as E
from agentrun_core.ledger import Phase as P

SENDERS = ("effect", "notification")
KEY = "k"


def _spec(sender: str, *, dedupes: bool, max_attempts: int = 3) -> ledger.Spec:
    if sender == "notification":
        return notify_outcome.spec(dedupes=dedupes, max_attempts=max_attempts)
    return ledger.Spec(
        tool="notify", step="s", run_id="r", args_hash="", dedupes_by_key=dedupes, max_attempts=max_attempts
    )


def _http_error(code: int) -> urllib.error.HTTPError:
    return urllib.error.HTTPError("http://x", code, "err", email.message.Message(), None)


def _kind(sender: str, code: int) -> str:
    """What each sender's classifier makes of an HTTP answer, in the outcome table's words."""
    if sender == "notification":
        kind = notify_outcome.classify_status(code)
        return {"not_processed": "refused", "ambiguous": "ambiguous", "rejected": "permanent"}[kind]
    return retry.classify(_http_error(code)).kind


@pytest.mark.parametrize("sender", SENDERS)
@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (500, "ambiguous"),  # proves nothing: it may have acted before failing
        (502, "ambiguous"),
        (504, "ambiguous"),
        (599, "ambiguous"),
        (503, "refused"),  # provably not processed
        (429, "refused"),
        (408, "refused"),
        (501, "permanent"),  # cannot do it at all: did nothing
        (404, "permanent"),
        (301, "permanent"),
    ],
)
def test_one_outcome_table_for_both_senders(sender: str, code: int, kind: str) -> None:
    assert _kind(sender, code) == kind


def _after_call(
    sender: str, kind: outcomes.Kind, *, dedupes: bool, attempt: int = 1, before: bool = False
) -> ledger.Transition:
    """The machine's plan after call ``attempt`` failed with ``kind`` (outcome table), for ``sender``."""
    spec = _spec(sender, dedupes=dedupes)
    decision = outcomes.decide(
        kind, attempt, max_attempts=spec.max_attempts, dedupes_by_key=dedupes, delay=1.0, message=kind
    )
    state = ledger.State(P.CALLING, KEY, total=attempt, unrecorded=1, maybe_done=before)
    event = ledger.Event(E.CALL_FAILED, decision=decision, message=kind, not_performed=kind != "ambiguous")
    return ledger.transition(spec, state, event)


def _records(step: ledger.Transition) -> list[ledger.Record]:
    return [a for a in step.actions if isinstance(a, ledger.Record)]


@pytest.mark.parametrize("sender", SENDERS)
def test_not_performed_is_sent_again_with_backoff_to_any_provider(sender: str) -> None:
    for dedupes in (True, False):
        step = _after_call(sender, "refused", dedupes=dedupes)
        assert step.state.phase is P.BACKING_OFF and ledger.Sleep(1.0) in step.actions
        assert [r.status for r in _records(step)] == ["pending"] and not step.state.maybe_done


@pytest.mark.parametrize("sender", SENDERS)
def test_ambiguous_is_sent_again_only_where_the_provider_dedupes(sender: str) -> None:
    step = _after_call(sender, "ambiguous", dedupes=True)
    assert step.state.phase is P.BACKING_OFF and step.state.maybe_done  # the memory of a maybe-landed call
    step = _after_call(sender, "ambiguous", dedupes=False)
    assert step.state.phase is P.RAISED
    (record,) = _records(step)
    assert record.status == "pending" and record.needs_human
    assert not any(isinstance(a, ledger.Call) for a in step.actions)


@pytest.mark.parametrize("sender", SENDERS)
def test_a_failure_that_proves_nothing_was_done_fails_and_says_so(sender: str) -> None:
    step = _after_call(sender, "permanent", dedupes=False)
    (record,) = _records(step)
    assert (record.status, record.not_performed) == ("failed", True)
    step = _after_call(sender, "refused", dedupes=True, attempt=3)  # out of attempts, never landed
    (record,) = _records(step)
    assert (record.status, record.not_performed) == ("failed", True)


@pytest.mark.parametrize("sender", SENDERS)
def test_an_unknown_outcome_is_never_recorded_failed(sender: str) -> None:
    """Out of attempts after an ambiguous call, or a final refusal after one: never ``failed`` as if it had
    provably not happened. The effect stays pending for ``agentrun retry`` (same key) or is marked failed
    without proof (never re-keyed); a notification, which has no run retry, goes to a human."""
    for step in (
        _after_call(sender, "ambiguous", dedupes=True, attempt=3),
        _after_call(sender, "permanent", dedupes=True, before=True),
        _after_call(sender, "refused", dedupes=True, attempt=3, before=True),
    ):
        assert step.state.phase is P.RAISED
        assert not any(r.not_performed for r in _records(step))
        if sender == "notification":
            assert [(r.status, r.needs_human) for r in _records(step)] == [("pending", True)]


@pytest.mark.parametrize("sender", SENDERS)
def test_a_row_left_pending_is_resent_under_its_key_only_where_the_provider_dedupes(sender: str) -> None:
    pending = ledger.Event(E.RESERVED_PENDING, key=KEY, attempts=1)
    step = ledger.transition(_spec(sender, dedupes=True), ledger.State(P.RESERVING, KEY), pending)
    assert step.actions[-1] == ledger.Call(2)
    step = ledger.transition(_spec(sender, dedupes=False), ledger.State(P.RESERVING, KEY), pending)
    assert step.state.phase is P.RAISED and _records(step)[0].needs_human
    # a row proven not issued (a notification's scheduled resend) is called, whoever receives it
    unsent = dataclasses.replace(pending, unsent=True)
    step = ledger.transition(_spec(sender, dedupes=False), ledger.State(P.RESERVING, KEY), unsent)
    assert step.actions[-1] == ledger.Call(2)


def test_the_notifier_adapters_are_the_machine() -> None:
    """``notify_outcome.decide`` / ``reserved`` (what the notifier calls) agree with the machine's plans."""
    pairs: tuple[tuple[str, outcomes.Kind], ...] = (
        (notify_outcome.NOT_PROCESSED, "refused"),
        (notify_outcome.AMBIGUOUS, "ambiguous"),
        (notify_outcome.REJECTED, "permanent"),
    )
    for kind, table in pairs:
        for dedupes in (True, False):
            for attempt in (1, 3):
                for before in (False, True):
                    step = _after_call("notification", table, dedupes=dedupes, attempt=attempt, before=before)
                    nxt = notify_outcome.decide(
                        kind, dedupes=dedupes, maybe_delivered=before, attempt=attempt, max_attempts=3
                    )
                    (record,) = _records(step)
                    assert nxt.status == record.status
                    assert nxt.needs_human == record.needs_human
                    assert nxt.resend == (ledger.Sleep(1.0) in step.actions)
    assert notify_outcome.reserved(
        status="pending", inserted=False, issued=True, needs_human=False, attempts=1, dedupes=False,
        max_attempts=3,
    ) == notify_outcome.UNKNOWN  # fmt: skip
    for status, flagged in (("sent", False), ("failed", False), ("pending", True)):
        assert notify_outcome.reserved(
            status=status, inserted=False, issued=True, needs_human=flagged, attempts=1, dedupes=True,
            max_attempts=3,
        ) == notify_outcome.SKIP  # fmt: skip
