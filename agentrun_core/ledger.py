"""The effect ledger as a pure state machine: ``transition(spec, state, event) -> Transition``.

Rule: this module decides, it never does (no I/O, clock, randomness, logging): whatever the decision needs
arrives in the ``Event`` (the row a reserve returned, how a call ended, the retry decision, seconds elapsed).
What to do next leaves as ``Action`` values, performed in order by an I/O shell (``agent_worker.ledger_shell``
for a worker's effect, ``agent_operator.decide.notify_outcome`` for a notification); the last action of a
transition
is the one whose outcome is the next event, or it ends the effect (``Return``, ``Raise``). Same inputs, same
plan: tested as a table without Postgres, for both senders (tests/unit/test_ledger_machine.py).

The rules it encodes (docs/worker.md, "The effect ledger"):

* a reserved row that is ``sent``/``confirmed`` is returned, never performed again; ``failed`` fails, unless
  the run was retried (``retry_generation``) and the row's failure proves nothing was performed
  (``not_performed``): then the next generation of the key is reserved. An unknown outcome, also on the last
  allowed call, is never recorded ``failed`` (a retry would re-key it, and the provider perform it again);
* a row left ``pending`` is an unknown outcome: reconciled (lookup hook once the earlier call can no longer
  land, or a re-issue where the provider dedupes by key) or handed to a human — never guessed;
* a read-only run performs nothing: a pending row may only be looked up;
* a replay with other arguments (a divergence) returns the stored result, or stops for a human.
"""

from __future__ import annotations

import dataclasses
import enum

from agentrun_core import outcomes


class Phase(enum.Enum):
    """What the machine is waiting for."""

    RESERVING = "reserving"  # a reserve (insert pending or read the existing row) is outstanding
    WAITING = "waiting"  # waiting out an earlier call's deadline before trusting a lookup
    LOOKING_UP = "looking_up"  # the tool's lookup hook is being asked
    CALLING = "calling"  # a provider call is outstanding
    BACKING_OFF = "backing_off"  # a failed call is recorded; sleeping before the next one
    RECORDING = "recording"  # a success (call or lookup) is being recorded
    DONE = "done"  # terminal: the result was returned
    RAISED = "raised"  # terminal: the effect ended with an exception


class EventKind(enum.Enum):
    RESERVED_NEW = "reserved_new"  # a fresh pending row was inserted
    RESERVED_PENDING = "reserved_pending"  # existing rows, by status
    RESERVED_SENT = "reserved_sent"
    RESERVED_CONFIRMED = "reserved_confirmed"
    RESERVED_FAILED = "reserved_failed"
    WAITED = "waited"  # the in-flight wait is over
    FOUND = "found"  # the lookup found the effect at the provider
    NOT_FOUND = "not_found"  # the lookup proved it never happened
    LOOKUP_ERROR = "lookup_error"  # the lookup hook raised (``message``)
    CALL_OK = "call_ok"  # the provider call returned
    CALL_FAILED = "call_failed"  # the provider call raised (``decision``, ``message``, ``elapsed``)
    SLEPT = "slept"  # the backoff is over
    RECORDED = "recorded"  # the success was recorded


class ErrorKind(enum.Enum):
    NEEDS_HUMAN = "needs_human"  # errors.NeedsHuman, set as the run's stop signal
    FAILED = "failed"  # errors.EffectFailed
    READ_ONLY = "read_only"  # errors.ReadOnlyRun


@dataclasses.dataclass(frozen=True)
class Spec:
    """What does not change during one effect: the tool's declaration and the call's identity."""

    tool: str
    step: str
    run_id: str
    args_hash: str
    has_lookup: bool = False
    dedupes_by_key: bool = False
    timeout: float | None = None
    max_attempts: int = 5
    on_divergence: str = "return_stored"
    max_in_flight_wait: float = 300.0
    retry_generation: int = 0  # the run's spec.retryGeneration: failed effects are tried again under it
    # A run-level retry (``agentrun retry``) may call again: an unknown outcome out of attempts is left
    # pending (not flagged) and the effect fails. Without one (notifications) it goes to a human, and so
    # does a final failure after a call that may have landed (never ``failed``: that would say it did not).
    retry_by_run: bool = True


@dataclasses.dataclass(frozen=True)
class State:
    phase: Phase
    key: str  # the key in use (changes with the retry generation)
    generation: int = 0
    total: int = 0  # provider calls for this key so far (the retry budget spans reconciliations)
    unrecorded: int = 0  # calls not yet counted in the ledger row
    why: str = ""  # why the outcome is being reconciled
    read_only: bool = False  # reconciling for a read-only run: look up, never perform
    earlier: bool = False  # a lookup is about the earlier call's arguments (the row's), not ours
    maybe_done: bool = False  # some call of this key may have taken effect (so a failure proves nothing)


@dataclasses.dataclass(frozen=True)
class Event:
    kind: EventKind
    key: str = ""  # RESERVED_*: the key reserved
    args_hash: str = ""  # RESERVED_* (existing): the stored arguments' hash
    needs_human: bool = False  # RESERVED_* (existing): the row is flagged
    error: str | None = None  # RESERVED_* (existing): the row's error
    epoch: int = 0  # RESERVED_* (existing): the epoch that wrote the row
    attempts: int = 0  # RESERVED_* (existing): calls counted on the row
    in_flight: float = 0.0  # RESERVED_* (existing): seconds the earlier call may still land
    read_only: bool = False  # RESERVED_*: the run refuses effects
    decision: outcomes.Decision | None = None  # CALL_FAILED
    message: str = ""  # CALL_FAILED: the failure; LOOKUP_ERROR: the exception
    not_performed: bool = False  # RESERVED_FAILED: the row's proof; CALL_FAILED: this call did nothing
    elapsed: float = 0.0  # CALL_FAILED: seconds since the call was issued
    unsent: bool = False  # RESERVED_PENDING: the row proves no call of it is out (a notification not issued)


# Actions: performed by the shell in order.
@dataclasses.dataclass(frozen=True)
class Guard:
    """Stop at once unless we can still prove we hold the Lease (before any provider call)."""


@dataclasses.dataclass(frozen=True)
class Reserve:
    """Insert ``pending`` for the state's key or read the existing row (fenced) → a RESERVED_* event."""


@dataclasses.dataclass(frozen=True)
class Rekey:
    """Derive the key of retry ``generation`` and note it for the step (the next Reserve uses it)."""

    generation: int


@dataclasses.dataclass(frozen=True)
class Hit:
    """A named fault point (``agentrun_core.faults``)."""

    point: str


@dataclasses.dataclass(frozen=True)
class Warn:
    message: str


@dataclasses.dataclass(frozen=True)
class Call:
    """Call the tool function (attempt number ``attempt``) → CALL_OK or CALL_FAILED."""

    attempt: int


@dataclasses.dataclass(frozen=True)
class Lookup:
    """Ask the lookup hook (with the row's arguments if ``earlier``) → FOUND, NOT_FOUND or LOOKUP_ERROR."""

    earlier: bool


@dataclasses.dataclass(frozen=True)
class Wait:
    """Wait ``seconds`` (monotonic, guarding the Lease every slice) → WAITED."""

    seconds: float


@dataclasses.dataclass(frozen=True)
class Sleep:
    """Back off ``seconds`` → SLEPT."""

    seconds: float


@dataclasses.dataclass(frozen=True)
class Record:
    """Record the key's new status (fenced). ``reissue``: also the call's arguments and their hash."""

    status: str
    calls: int
    error: str | None = None
    needs_human: bool = False
    deadline_seconds: float | None = None
    reissue: bool = False
    not_performed: bool = False  # status failed: the failure proves nothing was performed (retry may re-key)


@dataclasses.dataclass(frozen=True)
class RecordSuccess:
    """Record the value just obtained (call or lookup) as sent/confirmed → RECORDED."""

    calls: int


@dataclasses.dataclass(frozen=True)
class Return:
    """Return the effect's result: the stored one, or the one just recorded."""


@dataclasses.dataclass(frozen=True)
class Raise:
    """End with an exception; ``from_call``: chained to the provider call's exception."""

    error: ErrorKind
    message: str
    from_call: bool = False


Action = (  # fmt: skip
    Guard | Reserve | Rekey | Hit | Warn | Call | Lookup | Wait | Sleep | Record | RecordSuccess
    | Return | Raise
)


@dataclasses.dataclass(frozen=True)
class Transition:
    state: State
    actions: tuple[Action, ...]


class Unexpected(Exception):
    """An event the state cannot receive: a bug in the shell, never a run's outcome."""


def start(spec: Spec, key: str) -> Transition:
    """The first step of every effect: guard, then reserve the key."""
    del spec  # the same for every spec; kept so every entry point takes the spec
    return Transition(State(Phase.RESERVING, key), (Guard(), Reserve()))


_RESERVED = {
    EventKind.RESERVED_NEW,
    EventKind.RESERVED_PENDING,
    EventKind.RESERVED_SENT,
    EventKind.RESERVED_CONFIRMED,
    EventKind.RESERVED_FAILED,
}
_LOOKED_UP = {EventKind.FOUND, EventKind.NOT_FOUND, EventKind.LOOKUP_ERROR}


def transition(spec: Spec, state: State, event: Event) -> Transition:
    """The next state and the actions that get there; ``Unexpected`` if ``state`` cannot take ``event``."""
    phase, kind = state.phase, event.kind
    if phase is Phase.RESERVING and kind in _RESERVED:
        return _reserved(spec, state, event)
    if phase is Phase.WAITING and kind is EventKind.WAITED:
        return _next(state, Phase.LOOKING_UP, Lookup(state.earlier))
    if phase is Phase.LOOKING_UP and kind in _LOOKED_UP:
        return _looked_up(spec, state, event)
    if phase is Phase.CALLING and kind is EventKind.CALL_OK:
        return _next(state, Phase.RECORDING, Hit("after_call"), RecordSuccess(state.unrecorded))
    if phase is Phase.CALLING and kind is EventKind.CALL_FAILED:
        return _call_failed(spec, state, event)
    if phase is Phase.BACKING_OFF and kind is EventKind.SLEPT:
        return _call(state)
    if phase is Phase.RECORDING and kind is EventKind.RECORDED:
        return _next(state, Phase.DONE, Hit("after_record"), Return())
    raise Unexpected(f"effect {state.key}: event {kind.value} in phase {phase.value}")


def _next(state: State, phase: Phase, *actions: Action) -> Transition:
    return Transition(dataclasses.replace(state, phase=phase), actions)


def _reserved(spec: Spec, state: State, event: Event) -> Transition:
    state = dataclasses.replace(state, key=event.key or state.key)
    retried = event.kind is EventKind.RESERVED_FAILED and state.generation < spec.retry_generation
    if retried and not event.not_performed:  # store.reopen_run made such rows pending; a human decides
        why = f"failed earlier, may have been performed: not re-keyed (agentrun resolve): {event.error}"
        return _next(state, Phase.RAISED, Raise(ErrorKind.FAILED, f"effect {state.key} ({spec.tool}) {why}"))
    if retried:
        # A retried run: walk the key's generations in order, so one that succeeded earlier is found.
        generation = state.generation + 1
        state = dataclasses.replace(state, generation=generation)
        return _next(state, Phase.RESERVING, Rekey(generation), Reserve())
    hit: list[Action] = [Hit("after_reserve")]
    if event.kind is EventKind.RESERVED_NEW:
        return _call(state, *hit)
    diverged = event.args_hash != spec.args_hash
    if diverged:
        hit.append(
            Warn(
                f"effect {state.key} ({spec.tool}, step {spec.step}): replay asked with other arguments than "
                f"stored ({event.args_hash[:12]}); the effect is not repeated ({spec.on_divergence})"
            )
        )
    if event.needs_human and (
        event.kind is EventKind.RESERVED_PENDING or (diverged and spec.on_divergence == "needs_human")
    ):
        message = f"effect {state.key} ({spec.tool}, step {spec.step}) is flagged for a human: {event.error}"
        return _next(state, Phase.RAISED, *hit, Raise(ErrorKind.NEEDS_HUMAN, message))
    if event.kind in (EventKind.RESERVED_SENT, EventKind.RESERVED_CONFIRMED):
        return _next(state, Phase.DONE, *hit, Return())
    if event.kind is EventKind.RESERVED_FAILED:
        message = f"effect {state.key} ({spec.tool}) failed earlier: {event.error}"
        return _next(state, Phase.RAISED, *hit, Raise(ErrorKind.FAILED, message))
    if event.unsent:  # the row proves no call of it is out (not issued): call, nothing to reconcile
        return _call(dataclasses.replace(state, total=event.attempts, unrecorded=0), *hit)
    why = f"left pending by an earlier attempt (epoch {event.epoch})"
    if event.read_only:
        state = dataclasses.replace(state, why=why, read_only=True, earlier=True)
        if spec.has_lookup:
            return _next(state, Phase.LOOKING_UP, *hit, Lookup(earlier=True))
        return _next(state, Phase.RAISED, *hit, _read_only(spec, state, why))
    state = dataclasses.replace(state, total=event.attempts, unrecorded=0, maybe_done=True)
    return _reconcile(spec, state, why, event.in_flight, earlier=True, before=hit)


def _reconcile(
    spec: Spec, state: State, why: str, in_flight: float, *, earlier: bool, before: list[Action]
) -> Transition:
    """Unknown outcome: look it up (once the earlier call can no longer land), re-issue where the provider
    dedupes, or stop for a human."""
    state = dataclasses.replace(state, why=why, earlier=earlier)
    if spec.has_lookup:
        if in_flight > 0 and not spec.dedupes_by_key:
            if in_flight > spec.max_in_flight_wait:
                return _needs_human(
                    spec,
                    state,
                    f"{why}; the earlier call may still take effect for {in_flight:.1f}s "
                    f"(> max_in_flight_wait {spec.max_in_flight_wait:g}s)",
                    before,
                )
            return _next(state, Phase.WAITING, *before, Wait(in_flight))
        return _next(state, Phase.LOOKING_UP, *before, Lookup(earlier))
    if spec.dedupes_by_key and (earlier or state.total < spec.max_attempts):
        return _reissue(spec, state, before)
    if spec.dedupes_by_key and spec.retry_by_run:  # out of attempts: pending, never failed; a retry re-issues
        reason = f"outcome unknown: {why}; left pending: `agentrun retry` calls again under the same key"
        failed = Raise(ErrorKind.FAILED, f"effect {state.key} ({spec.tool}) failed: {reason}")
        return _next(state, Phase.RAISED, *before, Record("pending", state.unrecorded, error=reason), failed)
    if spec.dedupes_by_key:
        return _needs_human(spec, state, f"{why}; out of attempts under one key", before)
    blind = f"{why}; tool {spec.tool!r} has no lookup hook and its provider does not dedupe by key"
    return _needs_human(spec, state, blind, before)


def _looked_up(spec: Spec, state: State, event: Event) -> Transition:
    if event.kind is EventKind.FOUND:
        return _next(state, Phase.RECORDING, RecordSuccess(state.unrecorded))
    if state.read_only:
        if event.kind is EventKind.LOOKUP_ERROR:
            why = f"{state.why}; lookup failed: {event.message}"
        else:
            why = f"{state.why}; not found at the provider"
        return _next(state, Phase.RAISED, _read_only(spec, state, why))
    if event.kind is EventKind.LOOKUP_ERROR:
        return _needs_human(spec, state, f"{state.why}; lookup failed: {event.message}", [])
    # Not found once no earlier call can still land: nothing of this key was performed.
    state = dataclasses.replace(state, maybe_done=False)
    if state.total >= spec.max_attempts:
        reason = f"{state.why}; not performed (lookup) and out of attempts"
        message = f"effect {state.key} ({spec.tool}) failed: {reason}"
        return _next(
            state,
            Phase.RAISED,
            Record("failed", state.unrecorded, error=reason, not_performed=True),
            Raise(ErrorKind.FAILED, message),
        )
    return _reissue(spec, state, [])  # provably never happened


def _call_failed(spec: Spec, state: State, event: Event) -> Transition:
    decision = event.decision
    if decision is None:
        raise Unexpected(f"effect {state.key}: call_failed without a retry decision")
    state = dataclasses.replace(state, maybe_done=state.maybe_done or not event.not_performed)
    if decision.action == "reconcile":
        in_flight = (spec.timeout or 0.0) - event.elapsed
        why = f"call {state.total} {decision.reason}"
        return _reconcile(spec, state, why, in_flight, earlier=False, before=[])
    if decision.action == "fail" and state.maybe_done and not spec.retry_by_run:
        why = f"call {state.total} {decision.reason}; an earlier call may have landed"
        return _needs_human(spec, state, why, [])
    deadline = None if spec.timeout is None else decision.delay + spec.timeout
    status = "failed" if decision.action == "fail" else "pending"
    proven = status == "failed" and not state.maybe_done
    record = Record(status, state.unrecorded, event.message, deadline_seconds=deadline, not_performed=proven)
    state = dataclasses.replace(state, unrecorded=0)  # the record counts them
    if decision.action == "fail":
        message = f"effect {state.key} ({spec.tool}) failed: {decision.reason}"
        return _next(state, Phase.RAISED, record, Raise(ErrorKind.FAILED, message, from_call=True))
    return _next(state, Phase.BACKING_OFF, record, Sleep(decision.delay))


def _reissue(spec: Spec, state: State, before: list[Action]) -> Transition:
    """The row existed before this call: its deadline and arguments are recorded first (reserve sets them
    for a new row), then the provider is called."""
    record = Record("pending", state.unrecorded, deadline_seconds=spec.timeout, reissue=True)
    return _call(dataclasses.replace(state, unrecorded=0), *before, record)


def _call(state: State, *before: Action) -> Transition:
    """Guard the Lease, then call the provider: one more call made, and not yet recorded."""
    state = dataclasses.replace(state, total=state.total + 1, unrecorded=state.unrecorded + 1)
    return _next(state, Phase.CALLING, *before, Guard(), Call(state.total))


def _needs_human(spec: Spec, state: State, reason: str, before: list[Action]) -> Transition:
    message = f"effect {state.key} ({spec.tool}, step {spec.step}): outcome unknown: {reason}"
    return _next(
        state,
        Phase.RAISED,
        *before,
        Record("pending", state.unrecorded, error=message, needs_human=True),
        Raise(ErrorKind.NEEDS_HUMAN, message),
    )


def _read_only(spec: Spec, state: State, why: str) -> Raise:
    return Raise(
        ErrorKind.READ_ONLY,
        f"run {spec.run_id} is read-only: effect {state.key} ({spec.tool}) {why}; not performed",
    )
