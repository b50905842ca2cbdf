"""The ledger's I/O shell: drives the pure machine of ``agentrun_core.ledger`` for one effect call.

Rule: this module decides nothing. It performs the machine's actions — the store calls (reserve, record;
a refused, fenced write stops the run at once), the tool call and its retry classification, the lookup
hook, waits and sleeps, fault points, log lines — and feeds what happened back as the next event. Every
branch of the ledger's logic lives in ``agentrun_core.ledger`` and is tested there without Postgres.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Generator
from typing import Any

from agent_worker import calls, context, identity, retry
from agentrun_core import errors, faults, ledger, store

logger = logging.getLogger("agent_worker.effects")  # the effect API's logger, as before the split


# eq/repr: an effect call is itself, and its repr would print the tool's arguments.
@dataclasses.dataclass(eq=False, repr=False)
class Execution:
    """One logical effect: the I/O shell around ``agentrun_core.ledger``. It performs the machine's actions
    (the store calls, the tool call, lookups, waits, sleeps) and feeds back what happened; every decision is
    the machine's."""

    tool: calls.ToolSpec
    ctx: context.RunContext
    _: dataclasses.KW_ONLY
    key: str
    step: str
    args: Any
    args_hash: str  # computed once, by the caller
    occurrence: int
    call_args: tuple[Any, ...]
    call_kwargs: dict[str, Any]
    rekey: Callable[[int], str]  # the key of a retry generation (agentrun_core.keys.derive)
    # key format v3: was this call's occurrence space seen racing (agent_worker.identity)
    raced: Callable[[], bool] | None = None
    # What the walk keeps: the machine's spec, the row the last reserve returned, the last value obtained
    # (call or lookup, recorded by RecordSuccess), what Return returns (the stored result or the one just
    # recorded), the last provider call's exception (Raise from_call).
    spec: ledger.Spec = dataclasses.field(init=False)
    row: store.Effect | None = dataclasses.field(default=None, init=False)
    value: Any = dataclasses.field(default=None, init=False)
    result: Any = dataclasses.field(default=None, init=False)
    call_error: Exception | None = dataclasses.field(default=None, init=False)

    def __post_init__(self) -> None:
        tool_ = self.tool
        self.spec = ledger.Spec(
            tool=tool_.name,
            step=self.step,
            run_id=self.ctx.run_id,
            args_hash=self.args_hash,
            has_lookup=tool_.lookup is not None,
            dedupes_by_key=tool_.dedupes_by_key,
            timeout=tool_.timeout,
            max_attempts=tool_.retry_policy.max_attempts,
            on_divergence=tool_.on_divergence,
            max_in_flight_wait=tool_.max_in_flight_wait,
            retry_generation=self.ctx.retry_generation,
        )

    def run(self) -> Any:
        walk = self._walk()
        action = next(walk)
        while not isinstance(action, ledger.Return):
            action = walk.send(self._perform(action))
        return self.result

    async def arun(self) -> Any:
        """``run`` for an ``async def`` effect: the provider call and the backoff are awaited; every other
        action (the store's statements, the lookup hook) is the sync one, in the event loop's thread."""
        walk = self._walk()
        action = next(walk)
        while not isinstance(action, ledger.Return):
            action = walk.send(await self._aperform(action))
        return self.result

    def _walk(self) -> Generator[ledger.Action, ledger.Event | None, None]:
        """The machine's actions in order, up to its ``Return`` (``run`` and ``arun`` walk the one machine,
        each performing in its own way): each action's outcome is sent back, the last one's is the event
        of the next transition."""
        step = ledger.start(self.spec, self.key)
        while True:
            event: ledger.Event | None = None
            for action in step.actions:
                event = yield action
            if event is None:
                raise ledger.Unexpected(f"effect {self.key}: a transition left nothing to wait for")
            step = ledger.transition(self.spec, step.state, event)

    async def _aperform(self, action: ledger.Action) -> ledger.Event | None:
        if isinstance(action, ledger.Call):
            return await self._acall(action.attempt)
        if isinstance(action, ledger.Sleep) and self.ctx.sleep is time.sleep:
            await asyncio.sleep(action.seconds)  # other tasks of the step run meanwhile
            return ledger.Event(ledger.EventKind.SLEPT)
        return self._perform(action)

    def _perform(self, action: ledger.Action) -> ledger.Event | None:
        """Do one action; the ones whose outcome the machine waits for return it as the next event."""
        match action:
            case ledger.Guard():
                self._guard()
            case ledger.Reserve():
                return self._reserve()
            case ledger.Rekey(generation=generation):
                self.key = self.rekey(generation)
                self.ctx.note_effect(self.step, self.key)
            case ledger.Hit(point=point):
                faults.hit(point)
            case ledger.Warn(message=message):
                logger.warning("%s", message)
            case ledger.Call(attempt=attempt):
                return self._call(attempt)
            case ledger.Lookup(earlier=earlier):
                return self._lookup(earlier)
            case ledger.Wait(seconds=seconds):
                return self._wait_in_flight(seconds)
            case ledger.Sleep(seconds=seconds):
                self.ctx.sleep(seconds)
                return ledger.Event(ledger.EventKind.SLEPT)
            case ledger.Record():
                self._record_action(action)
            case ledger.RecordSuccess(calls=count):
                self.result = self._record_success(self.value, count=count)
                return ledger.Event(ledger.EventKind.RECORDED)
            case ledger.Raise():
                error = self._exception(action)
                if action.from_call:
                    raise error from self.call_error
                raise error
        return None

    def _guard(self) -> None:
        """Before any provider call: stop at once if we cannot prove we still hold the Lease."""
        if self.ctx.stop is not None:
            raise self.ctx.stop
        if not self.ctx.may_act():
            try:
                self.ctx.lease_check()
                reason = "the lease renew deadline passed"
            except Exception as exc:
                reason = str(exc)
            raise self.ctx.set_stop(errors.Fenced(f"effect {self.key} not issued: lease not held ({reason})"))

    def _reserve(self) -> ledger.Event:
        if self.raced is not None and self.raced() and self.spec.on_divergence != "needs_human":
            # Another call raced this one for its position: a row with other arguments may be that call's.
            self.spec = dataclasses.replace(self.spec, on_divergence="needs_human")
        try:
            reservation = store.reserve_effect(
                self.ctx.conn,
                key=self.key,
                run_id=self.ctx.run_id,
                epoch=self.ctx.epoch,
                step=self.step,
                action=self.tool.action,
                tool=self.tool.name,
                occurrence=self.occurrence,
                args_hash=self.args_hash,
                args=self.args,
                key_version=self.ctx.key_version,
                timeout_seconds=self.tool.timeout,
                divergence_needs_human=self.spec.on_divergence == "needs_human",
            )
        except errors.Fenced as exc:
            raise self.ctx.set_stop(exc) from None
        row = self.row = reservation.effect
        if row is None:  # reserved: a new row, which holds what we sent
            self.result = None
            return ledger.Event(ledger.EventKind.RESERVED_NEW, key=self.key, read_only=reservation.read_only)
        self.result = row.result
        needs_human, error = row.needs_human, row.error
        if row.args_hash != self.args_hash and self.raced is not None and self.raced() and not needs_human:
            # The race was seen while this reservation was on its way: the row with other arguments may be the
            # racing call's. The machine hands it to a human (on_divergence=needs_human), as when seen before.
            self.spec = dataclasses.replace(self.spec, on_divergence="needs_human")
            needs_human = True
            error = "another call raced this one for its position and the stored arguments differ"
        return ledger.Event(
            _RESERVED[row.status],
            key=self.key,
            args_hash=row.args_hash,
            needs_human=needs_human,
            error=error,
            epoch=row.epoch,
            attempts=row.attempts,
            in_flight=reservation.in_flight_seconds,
            read_only=reservation.read_only,
            not_performed=row.not_performed,
        )

    def _call(self, attempt: int) -> ledger.Event:
        call, issued = self._call_of(attempt), time.monotonic()
        try:
            with identity.enclosing(self.key):  # effects the body calls are numbered under this key (v3)
                self.value = self.tool.fn(call, *self.call_args, **self.call_kwargs)
        except errors.WorkerError:
            raise
        except Exception as exc:
            return self._failed(exc, attempt, issued)
        return ledger.Event(ledger.EventKind.CALL_OK)

    async def _acall(self, attempt: int) -> ledger.Event:
        call, issued = self._call_of(attempt), time.monotonic()
        try:
            with identity.enclosing(self.key):
                self.value = await self.tool.fn(call, *self.call_args, **self.call_kwargs)
        except errors.WorkerError:
            raise
        except Exception as exc:
            return self._failed(exc, attempt, issued)
        return ledger.Event(ledger.EventKind.CALL_OK)

    def _call_of(self, attempt: int) -> calls.Call:
        ctx, tool_ = self.ctx, self.tool
        return calls.Call(self.key, attempt=attempt, run_id=ctx.run_id, step=self.step, tool=tool_.name)

    def _failed(self, exc: Exception, attempt: int, issued: float) -> ledger.Event:
        self.call_error = exc
        failure = retry.classify(exc, permanent=self.tool.permanent)
        tool_ = self.tool
        decision = retry.decide(
            tool_.retry_policy, attempt, failure, dedupes_by_key=tool_.dedupes_by_key, rng=self.ctx.rng
        )
        return ledger.Event(
            ledger.EventKind.CALL_FAILED,
            decision=decision,
            message=failure.message,
            elapsed=time.monotonic() - issued,
            not_performed=failure.proves_not_performed,
        )

    def _lookup(self, earlier: bool) -> ledger.Event:
        assert self.tool.lookup is not None  # the machine looks up only for a tool with a hook
        earlier_args = self.row.args if earlier and self.row is not None else None
        try:
            self.value = self.tool.lookup(self.key, self.args if earlier_args is None else earlier_args)
        except Exception as exc:
            return ledger.Event(ledger.EventKind.LOOKUP_ERROR, message=f"{type(exc).__name__}: {exc}")
        kind = ledger.EventKind.NOT_FOUND if self.value is None else ledger.EventKind.FOUND
        return ledger.Event(kind)

    def _wait_in_flight(self, seconds: float) -> ledger.Event:
        """The earlier call may still take effect for ``seconds``: a negative lookup now proves nothing.
        Wait it out (monotonic clock; the Lease keeps renewing, checked every slice)."""
        logger.info(
            "effect %s: waiting %.2fs for the earlier call's deadline, then look up", self.key, seconds
        )
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            self._guard()
            self.ctx.sleep(min(left, 0.25))
        return ledger.Event(ledger.EventKind.WAITED)

    def _record_action(self, action: ledger.Record) -> None:
        fields: dict[str, Any] = {}
        if action.error is not None:
            fields["error"] = action.error
        if action.needs_human:
            fields["needs_human"] = True
        if action.deadline_seconds is not None:
            fields["deadline_seconds"] = action.deadline_seconds
        if action.reissue:
            fields.update(args=self.args, args_hash=self.args_hash)
        if action.not_performed:
            fields["not_performed"] = True
        self._record(action.status, action.calls, **fields)

    def _record(self, status: str, count: int, **fields: Any) -> None:
        """Record this key's new status, fenced by our epoch in the same statement.

        A refused write (a newer epoch owns the run) stops the run at once."""
        try:
            store.record_effect(
                self.ctx.conn,
                key=self.key,
                run_id=self.ctx.run_id,
                epoch=self.ctx.epoch,
                status=status,
                calls=count,
                **fields,
            )
        except errors.Fenced as exc:
            raise self.ctx.set_stop(exc) from None

    def _record_success(self, value: Any, *, count: int) -> Any:
        outcome = value if isinstance(value, calls.Outcome) else calls.Outcome(value)
        result = calls.jsonable(outcome.result, f"the result of tool {self.tool.name!r}")
        status = "confirmed" if outcome.confirmed else "sent"
        # Its commit does not wait for the flush: lost only with the server, it leaves the row pending,
        # which is reconciled (store.record_effect).
        self._record(status, count, result=result, provider_ref=outcome.provider_ref, flush=False)
        return result

    def _exception(self, action: ledger.Raise) -> BaseException:
        if action.error is ledger.ErrorKind.NEEDS_HUMAN:
            return self.ctx.set_stop(errors.NeedsHuman(action.message, key=self.key))
        if action.error is ledger.ErrorKind.READ_ONLY:
            return errors.ReadOnlyRun(action.message)
        return errors.EffectFailed(action.message)


_RESERVED = {
    "pending": ledger.EventKind.RESERVED_PENDING,
    "sent": ledger.EventKind.RESERVED_SENT,
    "confirmed": ledger.EventKind.RESERVED_CONFIRMED,
    "failed": ledger.EventKind.RESERVED_FAILED,
}
