"""The effect ledger's pure machine (agentrun_core.ledger), without Postgres.

``TABLE`` lists every (phase, event) pair of the machine — the full product of the two enums, checked by
``test_table_covers_every_pair`` so a new phase or event without a row fails — with the expected next phase
and actions for one baseline tool (lookup hook, provider without key dedupe, timeout 10s, 3 attempts). The
branches that depend on the tool's declaration or on the row's flags are tested after the table.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from agent_worker import retry
from agentrun_core import ledger
from agentrun_core.ledger import EventKind as E
from agentrun_core.ledger import Phase as P

KEY = "k1"
HASH = "h" * 64
SPEC = ledger.Spec(
    tool="charge",
    step="s",
    run_id="r1",
    args_hash=HASH,
    has_lookup=True,
    dedupes_by_key=False,
    timeout=10.0,
    max_attempts=3,
)
# The baseline state of each phase: one call made and not yet recorded, reconciling "why".
STATE = {phase: ledger.State(phase, KEY, total=1, unrecorded=1, why="why") for phase in P}
RETRY = retry.Decision("retry", 0.5, "boom")
EVENT = {
    E.RESERVED_NEW: ledger.Event(E.RESERVED_NEW, key=KEY),
    E.RESERVED_PENDING: ledger.Event(E.RESERVED_PENDING, key=KEY, args_hash=HASH, epoch=3, attempts=1),
    E.RESERVED_SENT: ledger.Event(E.RESERVED_SENT, key=KEY, args_hash=HASH),
    E.RESERVED_CONFIRMED: ledger.Event(E.RESERVED_CONFIRMED, key=KEY, args_hash=HASH),
    E.RESERVED_FAILED: ledger.Event(E.RESERVED_FAILED, key=KEY, args_hash=HASH, error="gone"),
    E.WAITED: ledger.Event(E.WAITED),
    E.FOUND: ledger.Event(E.FOUND),
    E.NOT_FOUND: ledger.Event(E.NOT_FOUND),
    E.LOOKUP_ERROR: ledger.Event(E.LOOKUP_ERROR, message="KeyError: 'x'"),
    E.CALL_OK: ledger.Event(E.CALL_OK),
    E.CALL_FAILED: ledger.Event(E.CALL_FAILED, decision=RETRY, message="Retryable: busy", elapsed=1.0),
    E.SLEPT: ledger.Event(E.SLEPT),
    E.RECORDED: ledger.Event(E.RECORDED),
}
UNEXPECTED = None
HIT = ledger.Hit("after_reserve")
CALL_2 = (ledger.Guard(), ledger.Call(2))
FAILED_EARLIER = f"effect {KEY} (charge) failed earlier: gone"

_RESERVED = {E.RESERVED_NEW, E.RESERVED_PENDING, E.RESERVED_SENT, E.RESERVED_CONFIRMED, E.RESERVED_FAILED}
_EXPECTED: dict[tuple[P, E], tuple[P, tuple[ledger.Action, ...]] | None] = {
    (P.RESERVING, E.RESERVED_NEW): (P.CALLING, (HIT, ledger.Guard(), ledger.Call(2))),
    # pending, earlier call past its deadline (in_flight 0): look it up with the row's arguments
    (P.RESERVING, E.RESERVED_PENDING): (P.LOOKING_UP, (HIT, ledger.Lookup(earlier=True))),
    (P.RESERVING, E.RESERVED_SENT): (P.DONE, (HIT, ledger.Return())),
    (P.RESERVING, E.RESERVED_CONFIRMED): (P.DONE, (HIT, ledger.Return())),
    (P.RESERVING, E.RESERVED_FAILED): (
        P.RAISED,
        (HIT, ledger.Raise(ledger.ErrorKind.FAILED, FAILED_EARLIER)),
    ),
    (P.WAITING, E.WAITED): (P.LOOKING_UP, (ledger.Lookup(earlier=False),)),
    (P.LOOKING_UP, E.FOUND): (P.RECORDING, (ledger.RecordSuccess(1),)),
    (P.LOOKING_UP, E.NOT_FOUND): (
        P.CALLING,
        (ledger.Record("pending", 1, deadline_seconds=10.0, reissue=True), *CALL_2),
    ),
    (P.LOOKING_UP, E.LOOKUP_ERROR): (
        P.RAISED,
        (
            ledger.Record(
                "pending",
                1,
                error=f"effect {KEY} (charge, step s): outcome unknown: why; lookup failed: KeyError: 'x'",
                needs_human=True,
            ),
            ledger.Raise(
                ledger.ErrorKind.NEEDS_HUMAN,
                f"effect {KEY} (charge, step s): outcome unknown: why; lookup failed: KeyError: 'x'",
            ),
        ),
    ),
    (P.CALLING, E.CALL_OK): (P.RECORDING, (ledger.Hit("after_call"), ledger.RecordSuccess(1))),
    (P.CALLING, E.CALL_FAILED): (
        P.BACKING_OFF,
        (ledger.Record("pending", 1, error="Retryable: busy", deadline_seconds=10.5), ledger.Sleep(0.5)),
    ),
    (P.BACKING_OFF, E.SLEPT): (P.CALLING, CALL_2),
    (P.RECORDING, E.RECORDED): (P.DONE, (ledger.Hit("after_record"), ledger.Return())),
}
TABLE = {pair: _EXPECTED.get(pair, UNEXPECTED) for pair in itertools.product(P, E)}


def test_table_covers_every_pair() -> None:
    assert set(TABLE) == set(itertools.product(P, E))
    assert set(_EXPECTED) <= set(TABLE)
    assert set(EVENT) == set(E) and set(STATE) == set(P)
    # every phase but the terminal ones takes some event; every event is taken in some phase
    assert {p for p, _ in _EXPECTED} == set(P) - {P.DONE, P.RAISED}
    assert {e for _, e in _EXPECTED} == set(E)


@pytest.mark.parametrize(("phase", "kind"), list(itertools.product(P, E)), ids=lambda v: v.value)
def test_transition_table(phase: P, kind: E) -> None:
    state, event = STATE[phase], EVENT[kind]
    expected = TABLE[(phase, kind)]
    if expected is UNEXPECTED:
        with pytest.raises(ledger.Unexpected):
            ledger.transition(SPEC, state, event)
        return
    step = ledger.transition(SPEC, state, event)
    assert (step.state.phase, step.actions) == expected
    assert step.state.key == KEY


def _run(spec: ledger.Spec, state: ledger.State, *events: ledger.Event) -> ledger.Transition:
    step = ledger.Transition(state, ())
    for event in events:
        step = ledger.transition(spec, step.state, event)
    return step


def test_start_guards_then_reserves() -> None:
    step = ledger.start(SPEC, KEY)
    assert step.state == ledger.State(P.RESERVING, KEY)
    assert step.actions == (ledger.Guard(), ledger.Reserve())


def test_happy_path_counts_one_call() -> None:
    step = _run(SPEC, ledger.start(SPEC, KEY).state, EVENT[E.RESERVED_NEW])
    assert step.actions[-1] == ledger.Call(1)
    step = _run(SPEC, step.state, EVENT[E.CALL_OK])
    assert step.actions == (ledger.Hit("after_call"), ledger.RecordSuccess(1))
    assert _run(SPEC, step.state, EVENT[E.RECORDED]).state.phase is P.DONE


def test_retries_count_calls_and_record_each_failure_once() -> None:
    state = ledger.start(SPEC, KEY).state
    step = _run(SPEC, state, EVENT[E.RESERVED_NEW], EVENT[E.CALL_FAILED])
    assert step.actions[0] == ledger.Record("pending", 1, error="Retryable: busy", deadline_seconds=10.5)
    step = _run(SPEC, step.state, EVENT[E.SLEPT])
    assert step.actions == (ledger.Guard(), ledger.Call(2))
    assert (step.state.total, step.state.unrecorded) == (2, 1)


def test_failed_call_records_failed_and_raises_from_the_call() -> None:
    fail = dataclasses.replace(EVENT[E.CALL_FAILED], decision=retry.Decision("fail", reason="nope"))
    step = ledger.transition(SPEC, STATE[P.CALLING], fail)
    assert step.state.phase is P.RAISED
    assert step.actions == (
        ledger.Record("failed", 1, error="Retryable: busy", deadline_seconds=10.0),
        ledger.Raise(ledger.ErrorKind.FAILED, f"effect {KEY} (charge) failed: nope", from_call=True),
    )


def test_ambiguous_call_waits_out_the_deadline_then_looks_up() -> None:
    ambiguous = dataclasses.replace(
        EVENT[E.CALL_FAILED], decision=retry.Decision("reconcile", reason="unknown outcome: x"), elapsed=4.0
    )
    step = ledger.transition(SPEC, STATE[P.CALLING], ambiguous)
    assert (step.state.phase, step.actions) == (P.WAITING, (ledger.Wait(6.0),))
    assert step.state.why == "call 1 unknown outcome: x"
    # past the deadline already: look up at once
    late = dataclasses.replace(ambiguous, elapsed=12.0)
    step = ledger.transition(SPEC, STATE[P.CALLING], late)
    assert (step.state.phase, step.actions) == (P.LOOKING_UP, (ledger.Lookup(earlier=False),))


def test_in_flight_longer_than_the_wait_bound_goes_to_a_human() -> None:
    spec = dataclasses.replace(SPEC, max_in_flight_wait=5.0)
    pending = dataclasses.replace(EVENT[E.RESERVED_PENDING], in_flight=7.0)
    step = ledger.transition(spec, STATE[P.RESERVING], pending)
    assert step.state.phase is P.RAISED
    reason = (
        "left pending by an earlier attempt (epoch 3); the earlier call may still take effect for 7.0s "
        "(> max_in_flight_wait 5s)"
    )
    message = f"effect {KEY} (charge, step s): outcome unknown: {reason}"
    assert step.actions == (
        HIT,
        ledger.Record("pending", 0, error=message, needs_human=True),
        ledger.Raise(ledger.ErrorKind.NEEDS_HUMAN, message),
    )


def test_pending_with_in_flight_waits_unless_the_provider_dedupes() -> None:
    pending = dataclasses.replace(EVENT[E.RESERVED_PENDING], in_flight=2.0)
    step = ledger.transition(SPEC, STATE[P.RESERVING], pending)
    assert (step.state.phase, step.actions) == (P.WAITING, (HIT, ledger.Wait(2.0)))
    assert _run(SPEC, step.state, EVENT[E.WAITED]).actions == (ledger.Lookup(earlier=True),)
    dedupes = dataclasses.replace(SPEC, dedupes_by_key=True)
    step = ledger.transition(dedupes, STATE[P.RESERVING], pending)
    assert (step.state.phase, step.actions) == (P.LOOKING_UP, (HIT, ledger.Lookup(earlier=True)))


def test_pending_without_lookup_reissues_only_where_the_provider_dedupes() -> None:
    no_lookup = dataclasses.replace(SPEC, has_lookup=False, dedupes_by_key=True)
    step = ledger.transition(no_lookup, STATE[P.RESERVING], EVENT[E.RESERVED_PENDING])
    assert step.state.phase is P.CALLING
    assert step.actions == (
        HIT,
        ledger.Record("pending", 0, deadline_seconds=10.0, reissue=True),
        ledger.Guard(),
        ledger.Call(2),  # the row counted one attempt already
    )
    blind = dataclasses.replace(SPEC, has_lookup=False)
    step = ledger.transition(blind, STATE[P.RESERVING], EVENT[E.RESERVED_PENDING])
    assert step.state.phase is P.RAISED
    assert step.actions[-1] == ledger.Raise(
        ledger.ErrorKind.NEEDS_HUMAN,
        f"effect {KEY} (charge, step s): outcome unknown: left pending by an earlier attempt (epoch 3); "
        "tool 'charge' has no lookup hook and its provider does not dedupe by key",
    )


def test_not_found_out_of_attempts_fails() -> None:
    state = dataclasses.replace(STATE[P.LOOKING_UP], total=3)
    step = ledger.transition(SPEC, state, EVENT[E.NOT_FOUND])
    reason = "why; not performed (lookup) and out of attempts"
    assert step.actions == (
        ledger.Record("failed", 1, error=reason, not_performed=True),  # the lookup proved it
        ledger.Raise(ledger.ErrorKind.FAILED, f"effect {KEY} (charge) failed: {reason}"),
    )


@pytest.mark.parametrize(
    ("has_lookup", "events", "suffix"),
    [
        (False, (), ""),
        (True, (ledger.Event(E.NOT_FOUND),), "; not found at the provider"),
        (True, (ledger.Event(E.LOOKUP_ERROR, message="OSError: down"),), "; lookup failed: OSError: down"),
    ],
)
def test_read_only_run_never_performs(
    has_lookup: bool, events: tuple[ledger.Event, ...], suffix: str
) -> None:
    spec = dataclasses.replace(SPEC, has_lookup=has_lookup)
    pending = dataclasses.replace(EVENT[E.RESERVED_PENDING], read_only=True, in_flight=5.0)
    step = _run(spec, STATE[P.RESERVING], pending, *events)
    assert step.state.phase is P.RAISED
    why = "left pending by an earlier attempt (epoch 3)" + suffix
    assert step.actions[-1] == ledger.Raise(
        ledger.ErrorKind.READ_ONLY, f"run r1 is read-only: effect {KEY} (charge) {why}; not performed"
    )
    assert not any(isinstance(a, ledger.Call | ledger.Record | ledger.Wait) for a in step.actions)


def test_read_only_found_is_recorded_without_calls() -> None:
    pending = dataclasses.replace(EVENT[E.RESERVED_PENDING], read_only=True)
    step = _run(SPEC, ledger.State(P.RESERVING, KEY), pending, EVENT[E.FOUND])
    assert (step.state.phase, step.actions) == (P.RECORDING, (ledger.RecordSuccess(0),))


def test_divergence_returns_stored_or_stops_for_a_human() -> None:
    other = dataclasses.replace(EVENT[E.RESERVED_SENT], args_hash="x" * 64, needs_human=True, error="e")
    step = ledger.transition(SPEC, STATE[P.RESERVING], other)
    assert step.state.phase is P.DONE
    warn = step.actions[1]
    assert isinstance(warn, ledger.Warn) and "xxxxxxxxxxxx)" in warn.message
    assert warn.message.endswith("the effect is not repeated (return_stored)")
    human = dataclasses.replace(SPEC, on_divergence="needs_human")
    step = ledger.transition(human, STATE[P.RESERVING], other)
    assert step.actions[-1] == ledger.Raise(
        ledger.ErrorKind.NEEDS_HUMAN, f"effect {KEY} (charge, step s) is flagged for a human: e"
    )
    # not flagged by the store (a later divergence): the stored result is returned
    unflagged = dataclasses.replace(other, needs_human=False)
    assert ledger.transition(human, STATE[P.RESERVING], unflagged).state.phase is P.DONE


def test_flagged_pending_row_stops_for_a_human_without_recording() -> None:
    flagged = dataclasses.replace(EVENT[E.RESERVED_PENDING], needs_human=True, error="e")
    step = ledger.transition(SPEC, STATE[P.RESERVING], flagged)
    assert step.actions == (
        HIT,
        ledger.Raise(
            ledger.ErrorKind.NEEDS_HUMAN, f"effect {KEY} (charge, step s) is flagged for a human: e"
        ),
    )


def test_retried_run_walks_key_generations() -> None:
    spec = dataclasses.replace(SPEC, retry_generation=2)
    state = ledger.start(spec, KEY).state
    proven = dataclasses.replace(EVENT[E.RESERVED_FAILED], not_performed=True)
    step = ledger.transition(spec, state, proven)
    assert (step.state.phase, step.actions) == (P.RESERVING, (ledger.Rekey(1), ledger.Reserve()))
    failed_1 = dataclasses.replace(proven, key="k1.g1")
    step = ledger.transition(spec, step.state, failed_1)
    assert step.actions == (ledger.Rekey(2), ledger.Reserve())
    sent_2 = dataclasses.replace(EVENT[E.RESERVED_SENT], key="k1.g2")
    step = ledger.transition(spec, step.state, sent_2)
    assert (step.state.phase, step.state.key, step.state.generation) == (P.DONE, "k1.g2", 2)
    # the last generation failed too: the effect fails, under the last key
    step = _run(spec, state, proven, failed_1, proven)
    assert step.actions[-1] == ledger.Raise(ledger.ErrorKind.FAILED, FAILED_EARLIER)


def test_retried_run_never_rekeys_a_failure_that_may_have_been_performed() -> None:
    spec = dataclasses.replace(SPEC, retry_generation=1)
    step = ledger.transition(spec, ledger.start(spec, KEY).state, EVENT[E.RESERVED_FAILED])
    assert step.state.phase is P.RAISED
    assert not any(isinstance(a, ledger.Rekey | ledger.Call) for a in step.actions)
    raised = step.actions[-1]
    assert isinstance(raised, ledger.Raise) and raised.error is ledger.ErrorKind.FAILED
    assert "may have been performed: not re-keyed" in raised.message and "agentrun resolve" in raised.message


def test_failed_record_says_whether_the_failure_proves_nothing_was_done() -> None:
    fail = retry.Decision("fail", reason="nope")
    refused = dataclasses.replace(EVENT[E.CALL_FAILED], decision=fail, not_performed=True)
    step = ledger.transition(SPEC, STATE[P.CALLING], refused)
    assert step.actions[0] == ledger.Record(
        "failed", 1, error="Retryable: busy", deadline_seconds=10.0, not_performed=True
    )
    # an earlier call of this key may have taken effect: the last refusal proves nothing about it
    dedupes = dataclasses.replace(SPEC, has_lookup=False, dedupes_by_key=True)
    retry_ambiguous = dataclasses.replace(
        EVENT[E.CALL_FAILED], decision=retry.Decision("retry", 0.5, "timeout"), not_performed=False
    )
    step = _run(dedupes, STATE[P.CALLING], retry_ambiguous, EVENT[E.SLEPT], refused)
    assert step.actions[0] == ledger.Record("failed", 1, error="Retryable: busy", deadline_seconds=10.0)
    # so may a call an earlier attempt left pending
    pending = _run(dedupes, STATE[P.RESERVING], EVENT[E.RESERVED_PENDING], refused)
    assert pending.actions[0] == ledger.Record("failed", 1, error="Retryable: busy", deadline_seconds=10.0)
    # a lookup that found nothing (after the deadline) proves the earlier calls did nothing
    looked = _run(SPEC, STATE[P.RESERVING], EVENT[E.RESERVED_PENDING], EVENT[E.NOT_FOUND], refused)
    assert looked.actions[0] == ledger.Record(
        "failed", 1, error="Retryable: busy", deadline_seconds=10.0, not_performed=True
    )


def test_ambiguous_last_allowed_call_stays_pending_never_failed() -> None:
    out = ledger.State(P.CALLING, KEY, total=3, unrecorded=1)
    reason = "unknown outcome after 3 calls (out of attempts): TimeoutError: timed out"
    timeout = dataclasses.replace(
        EVENT[E.CALL_FAILED], decision=retry.Decision("reconcile", reason=reason), elapsed=12.0
    )
    # provider dedupes, no lookup: not called again now (out of attempts); the row stays pending, so a
    # retry calls again under the SAME key, which the provider answers without performing twice
    dedupes = dataclasses.replace(SPEC, has_lookup=False, dedupes_by_key=True)
    step = ledger.transition(dedupes, out, timeout)
    assert step.state.phase is P.RAISED
    record, raised = step.actions
    assert isinstance(record, ledger.Record) and record.status == "pending" and record.calls == 1
    assert not record.needs_human and "agentrun retry" in (record.error or "")
    assert isinstance(raised, ledger.Raise) and raised.error is ledger.ErrorKind.FAILED
    assert not any(isinstance(a, ledger.Record) and a.status == "failed" for a in step.actions)
    # with a lookup hook: looked up (a negative lookup then proves it and fails the effect)
    step = ledger.transition(SPEC, out, timeout)
    assert (step.state.phase, step.actions) == (P.LOOKING_UP, (ledger.Lookup(earlier=False),))
    step = ledger.transition(SPEC, step.state, EVENT[E.NOT_FOUND])
    assert step.actions[0] == ledger.Record(
        "failed", 1, error=f"call 3 {reason}; not performed (lookup) and out of attempts", not_performed=True
    )
    # neither: a human decides (pending, flagged)
    blind = dataclasses.replace(SPEC, has_lookup=False)
    step = ledger.transition(blind, out, timeout)
    assert step.actions[-2] == ledger.Record("pending", 1, error=step.actions[-2].error, needs_human=True)


def test_call_failed_without_decision_is_a_shell_bug() -> None:
    with pytest.raises(ledger.Unexpected):
        ledger.transition(SPEC, STATE[P.CALLING], ledger.Event(E.CALL_FAILED))
