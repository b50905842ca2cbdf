"""The effect API graph authors use for every side effect.

::

    from agent_worker import effects

    def find_charge(key: str, args: dict) -> dict | None:       # lookup hook (optional)
        found = provider.get(f"/charges?idempotency_key={key}")
        return found or None                                      # None = provably never happened

    @effects.tool(name="charge", dedupes_by_key=True, lookup=find_charge,
                  retry=effects.RetryPolicy(max_attempts=4))
    def charge(call: effects.Call, *, customer: str, cents: int) -> dict:
        call.heartbeat({"phase": "posting"})
        return provider.post("/charges", json={...}, headers={"Idempotency-Key": call.idempotency_key})

    def node(state):                                              # inside a LangGraph node
        receipt = charge(customer="c1", cents=500)                # exactly once per position in the run

Each call: derive the key from the call's POSITION (``agentrun_core.keys``: run, step identity, action,
occurrence — not the arguments) → **reserve** (one round trip: insert ``pending`` or return the existing row,
fenced) → **check** (``sent``/``confirmed``: return the stored result, call nothing) → **perform** (the
function gets a ``Call``: a ``str`` that *is* the idempotency key, with ``.idempotency_key``, ``.attempt``,
``.heartbeat()``) → **record** (one round trip, fenced). Happy path: 2 Postgres round trips.

Divergence: a replay that reaches the same position with other arguments (a nondeterministic step) does NOT
repeat the effect: the row's stored result is returned and the divergence is counted on the row
(``on_divergence="return_stored"``, the default), or the run stops for a human the first time
(``on_divergence="needs_human"``).

A row found ``pending`` was left by an attempt that died between reserve and record: unknown outcome. With a
lookup hook, the hook decides (a value: recorded as sent, nothing called; ``None``: never happened, call) —
but a negative lookup is trusted only once the earlier call can no longer take effect: its deadline (issue
time + the tool's ``timeout``, Postgres clock) and, after a takeover, our attempt's start + ``timeout`` (the
deposed holder could issue calls until its lease ended). Until then the worker waits (bounded by
``max_in_flight_wait``, its Lease renewing meanwhile) or hands the effect to a human. Without a lookup, only
a provider that dedupes by key is called again; otherwise the effect is flagged ``needs_human`` and the run
stops with exit 13 — never a guess.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from agent_worker import calls, context, retry
from agentrun_core import canonical, errors, faults, keys, store

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

RetryPolicy = retry.RetryPolicy
Retryable = retry.Retryable
Ambiguous = retry.Ambiguous
Permanent = retry.Permanent

Lookup = Callable[[str, dict[str, Any]], Any]
ON_DIVERGENCE = ("return_stored", "needs_human")


Outcome = calls.Outcome
Call = calls.Call
heartbeat = calls.heartbeat
_step = calls.step
_jsonable = calls.jsonable


class Tool(Generic[P, R]):
    """A side-effecting function routed through the ledger. Create with ``@effects.tool(...)``."""

    def __init__(
        self,
        fn: Callable[Concatenate[Call, P], R],
        *,
        name: str,
        action: str | None,
        dedupes_by_key: bool,
        lookup: Lookup | None,
        retry_policy: retry.RetryPolicy,
        timeout: float | None = None,
        on_divergence: str = "return_stored",
        max_in_flight_wait: float = 300.0,
    ) -> None:
        if on_divergence not in ON_DIVERGENCE:
            raise ValueError(
                f"tool {name!r}: on_divergence must be one of {ON_DIVERGENCE}, not {on_divergence!r}"
            )
        if timeout is not None and not timeout > 0:
            raise ValueError(f"tool {name!r}: timeout must be a positive number of seconds, not {timeout!r}")
        if lookup is not None and not dedupes_by_key and timeout is None:
            raise ValueError(
                f"tool {name!r} has a lookup hook and its provider does not dedupe by key: give timeout= "
                "(the longest time after a call is issued during which it may still take effect), so a "
                "negative lookup is trusted only after the earlier call can no longer land"
            )
        self.fn = fn
        self.name = name
        self.action = action or name
        self.dedupes_by_key = dedupes_by_key
        self.lookup = lookup
        self.retry_policy = retry_policy
        self.timeout = timeout
        self.on_divergence = on_divergence
        self.max_in_flight_wait = max_in_flight_wait
        self._signature = inspect.signature(fn)
        functools.update_wrapper(self, fn)

    def arguments(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The call's arguments by parameter name (defaults applied), without the leading ``Call``."""
        bound = self._signature.bind(None, *args, **kwargs)
        bound.apply_defaults()
        named = dict(bound.arguments)
        first = next(iter(self._signature.parameters))
        named.pop(first)
        for name, param in self._signature.parameters.items():
            if param.kind is inspect.Parameter.VAR_KEYWORD and name in named:
                named.update(named.pop(name))
        return named

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        ctx = context.current()
        if ctx.stop is not None:
            raise ctx.stop
        named = self.arguments(*args, **kwargs)
        normal = canonical.normalise(named)
        args_hash = canonical.digest(named)
        md = context.config_metadata()
        step = _step(ctx, md)
        if ctx.key_version == 1:  # a run started under key format v1 keeps deriving v1 keys
            task = str(md.get("langgraph_checkpoint_ns") or step)
            occurrence = ctx.next_occurrence(task, self.action, args_hash)
            key = keys.derive(ctx.run_id, step, self.action, occurrence, version=1, args_hash=args_hash)
        else:
            occurrence = ctx.tracker.next_occurrence(step, self.action)
            key = keys.derive(ctx.run_id, step, self.action, occurrence)
        ctx.note_effect(step, key)
        execution = _Execution(self, ctx, key, step, normal, args, kwargs)
        execution.occurrence, execution.args_hash = occurrence, args_hash
        version = ctx.key_version
        execution.rekey = lambda g: keys.derive(
            ctx.run_id, step, self.action, occurrence, version=version, args_hash=args_hash, generation=g
        )
        result: R = execution.run()
        return result


def tool(
    name: str,
    *,
    action: str | None = None,
    dedupes_by_key: bool = False,
    lookup: Lookup | None = None,
    retry: retry.RetryPolicy | None = None,
    timeout: float | None = None,
    on_divergence: str = "return_stored",
    max_in_flight_wait: float = 300.0,
) -> Callable[[Callable[Concatenate[Call, P], R]], Tool[P, R]]:
    """Declare a side-effecting tool. ``name`` is a bounded label (metrics); ``action`` (default: name)
    enters the key. ``dedupes_by_key``: the provider honours the key (``Idempotency-Key``), so an
    unknown outcome may be retried blindly. ``lookup(key, args)``: find the effect at the provider.
    ``timeout``: seconds after issuing a call during which it may still take effect at the provider (the
    provider's bound, at least the client timeout); required for a lookup without ``dedupes_by_key``.
    ``on_divergence``: a replay with other arguments gets the stored result (``"return_stored"``) or stops
    the run for a human the first time (``"needs_human"``). ``max_in_flight_wait``: longest wait for an
    earlier call's deadline before handing the effect to a human instead."""

    def wrap(fn: Callable[Concatenate[Call, P], R]) -> Tool[P, R]:
        return Tool(
            fn,
            name=name,
            action=action,
            dedupes_by_key=dedupes_by_key,
            lookup=lookup,
            retry_policy=retry or _DEFAULT_RETRY,
            timeout=timeout,
            on_divergence=on_divergence,
            max_in_flight_wait=max_in_flight_wait,
        )

    return wrap


_DEFAULT_RETRY = retry.RetryPolicy()


class _Execution:
    """One logical effect: reserve, check, perform with retries, record."""

    def __init__(
        self,
        tool_: Tool[Any, Any],
        ctx: context.RunContext,
        key: str,
        step: str,
        args: Any,
        call_args: tuple[Any, ...],
        call_kwargs: dict[str, Any],
    ) -> None:
        self.tool = tool_
        self.ctx = ctx
        self.key = key
        self.step = step
        self.args = args
        self.call_args = call_args
        self.call_kwargs = call_kwargs
        self.occurrence = 0
        self.args_hash = canonical.digest(args)
        self.generation = 0  # retry generation of the key in use (agentrun_core.keys.derive)
        self.rekey: Callable[[int], str] = lambda g: key

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

    def _fenced(self, exc: errors.Fenced) -> errors.ControlSignal:
        return self.ctx.set_stop(exc)

    def _reserve(self) -> store.Reservation:
        try:
            return store.reserve_effect(
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
                divergence_needs_human=self.tool.on_divergence == "needs_human",
            )
        except errors.Fenced as exc:
            raise self._fenced(exc) from None

    def run(self) -> Any:
        self._guard()
        reservation = self._reserve()
        # A retried run (spec.retryGeneration): an effect that failed is tried again under the next generation
        # of its key, walking the generations in order so one that succeeded under an earlier retry is found.
        while (
            reservation.outcome == "existing"
            and reservation.effect.status == "failed"
            and self.generation < self.ctx.retry_generation
        ):
            self.generation += 1
            self.key = self.rekey(self.generation)
            self.ctx.note_effect(self.step, self.key)
            reservation = self._reserve()
        faults.hit("after_reserve")
        effect = reservation.effect
        if reservation.outcome == "existing":
            diverged = effect.args_hash != self.args_hash
            if diverged:
                logger.warning(
                    "effect %s (%s, step %s): replay asked with other arguments than stored (%s); "
                    "the effect is not repeated (%s)",
                    self.key,
                    self.tool.name,
                    self.step,
                    effect.args_hash[:12],
                    self.tool.on_divergence,
                )
            if effect.needs_human and (
                effect.status == "pending" or (diverged and self.tool.on_divergence == "needs_human")
            ):
                raise self.ctx.set_stop(
                    errors.NeedsHuman(
                        f"effect {self.key} ({self.tool.name}, step {self.step}) is flagged for a human: "
                        f"{effect.error}",
                        key=self.key,
                    )
                )
            if effect.status in ("sent", "confirmed"):
                return effect.result
            if effect.status == "failed":
                raise errors.EffectFailed(
                    f"effect {self.key} ({self.tool.name}) failed earlier: {effect.error}"
                )
            why = f"left pending by an earlier attempt (epoch {effect.epoch})"
            if reservation.read_only:
                return self._reconcile_read_only(why, earlier_args=effect.args)
            return self._reconcile(
                why,
                unrecorded=0,
                total=effect.attempts,
                in_flight=reservation.in_flight_seconds,
                earlier_args=effect.args,
            )
        return self._perform(total=0, unrecorded=0)

    def _reconcile(
        self, why: str, *, unrecorded: int, total: int, in_flight: float, earlier_args: Any = None
    ) -> Any:
        """Unknown outcome: look it up (once the earlier call can no longer land), retry where the provider
        dedupes, or stop for a human."""
        if self.tool.lookup is not None:
            if in_flight > 0 and not self.tool.dedupes_by_key:
                self._wait_in_flight(in_flight, why, unrecorded)
            try:
                found = self.tool.lookup(self.key, self.args if earlier_args is None else earlier_args)
            except Exception as exc:
                return self._needs_human(f"{why}; lookup failed: {type(exc).__name__}: {exc}", unrecorded)
            if found is not None:
                return self._record_success(found, calls=unrecorded)
            if total >= self.tool.retry_policy.max_attempts:
                return self._fail(f"{why}; not performed (lookup) and out of attempts", unrecorded)
            return self._perform(total=total, unrecorded=unrecorded, reissue=True)  # provably never happened
        if self.tool.dedupes_by_key:
            return self._perform(total=total, unrecorded=unrecorded, reissue=True)  # the provider dedupes
        return self._needs_human(
            f"{why}; tool {self.tool.name!r} has no lookup hook and its provider does not dedupe by key",
            unrecorded,
        )

    def _reconcile_read_only(self, why: str, earlier_args: Any = None) -> Any:
        """A read-only run performs nothing, not even an effect left pending: a lookup may show it happened
        (recorded sent, its result returned); otherwise the row stays pending and the effect is refused."""
        if self.tool.lookup is not None:
            try:
                found = self.tool.lookup(self.key, self.args if earlier_args is None else earlier_args)
            except Exception as exc:
                why = f"{why}; lookup failed: {type(exc).__name__}: {exc}"
            else:
                if found is not None:
                    return self._record_success(found, calls=0)
                why = f"{why}; not found at the provider"
        raise errors.ReadOnlyRun(
            f"run {self.ctx.run_id} is read-only: effect {self.key} ({self.tool.name}) {why}; not performed"
        )

    def _wait_in_flight(self, seconds: float, why: str, unrecorded: int) -> None:
        """The earlier call may still take effect for ``seconds``: a negative lookup now proves nothing.
        Wait it out (monotonic clock; the Lease keeps renewing, checked every slice) or hand to a human."""
        if seconds > self.tool.max_in_flight_wait:
            self._needs_human(
                f"{why}; the earlier call may still take effect for {seconds:.1f}s "
                f"(> max_in_flight_wait {self.tool.max_in_flight_wait:g}s)",
                unrecorded,
            )
        logger.info(
            "effect %s: waiting %.2fs for the earlier call's deadline, then look up", self.key, seconds
        )
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            self._guard()
            self.ctx.sleep(min(left, 0.25))

    def _record(self, status: str, calls: int, **fields: Any) -> None:
        """Record this key's new status, fenced by our epoch in the same statement.

        A refused write (a newer epoch owns the run) stops the run at once."""
        try:
            store.record_effect(
                self.ctx.conn,
                key=self.key,
                run_id=self.ctx.run_id,
                epoch=self.ctx.epoch,
                status=status,
                calls=calls,
                **fields,
            )
        except errors.Fenced as exc:
            raise self._fenced(exc) from None

    def _fail(self, reason: str, calls: int) -> Any:
        self._record("failed", calls, error=reason)
        raise errors.EffectFailed(f"effect {self.key} ({self.tool.name}) failed: {reason}")

    def _needs_human(self, reason: str, calls: int) -> Any:
        message = f"effect {self.key} ({self.tool.name}, step {self.step}): outcome unknown: {reason}"
        self._record("pending", calls, error=message, needs_human=True)
        raise self.ctx.set_stop(errors.NeedsHuman(message, key=self.key))

    def _perform(self, *, total: int, unrecorded: int, reissue: bool = False) -> Any:
        """Call the provider (with retries). ``total``: calls made for this key so far (the retry budget
        spans reconciliations); ``unrecorded``: calls not yet counted in the ledger row. ``reissue``: the row
        existed before this call, so its deadline and arguments are recorded first (reserve sets them)."""
        calls = unrecorded
        if reissue:
            self._record(
                "pending", calls, deadline_seconds=self.tool.timeout, args=self.args, args_hash=self.args_hash
            )
            calls = 0
        while True:
            self._guard()
            total += 1
            calls += 1
            call = Call(self.key, attempt=total, run_id=self.ctx.run_id, step=self.step, tool=self.tool.name)
            issued = time.monotonic()
            try:
                value = self.tool.fn(call, *self.call_args, **self.call_kwargs)
            except errors.WorkerError:
                raise
            except Exception as exc:
                failure = retry.classify(exc)
                decision = retry.decide(
                    self.tool.retry_policy,
                    total,
                    failure,
                    dedupes_by_key=self.tool.dedupes_by_key,
                    rng=self.ctx.rng,
                )
                if decision.action == "reconcile":
                    in_flight = issued + (self.tool.timeout or 0.0) - time.monotonic()
                    return self._reconcile(
                        f"call {total} {decision.reason}", unrecorded=calls, total=total, in_flight=in_flight
                    )
                status = "failed" if decision.action == "fail" else "pending"
                deadline = None if self.tool.timeout is None else decision.delay + self.tool.timeout
                self._record(status, calls, error=failure.message, deadline_seconds=deadline)
                calls = 0
                if decision.action == "fail":
                    raise errors.EffectFailed(
                        f"effect {self.key} ({self.tool.name}) failed: {decision.reason}"
                    ) from exc
                self.ctx.sleep(decision.delay)
                continue
            faults.hit("after_call")
            return self._record_success(value, calls=calls)

    def _record_success(self, value: Any, *, calls: int) -> Any:
        outcome = value if isinstance(value, Outcome) else Outcome(value)
        result = _jsonable(outcome.result, f"the result of tool {self.tool.name!r}")
        status = "confirmed" if outcome.confirmed else "sent"
        self._record(status, calls, result=result, provider_ref=outcome.provider_ref)
        faults.hit("after_record")
        return result


def confirm(key: str, *, result: Any = None, provider_ref: str | None = None) -> bool:
    """Mark a sent effect confirmed (the provider confirmed it later: webhook, poll). True if changed."""
    ctx = context.current()
    return store.confirm_effect(ctx.conn, key=key, result=result, provider_ref=provider_ref) is not None
