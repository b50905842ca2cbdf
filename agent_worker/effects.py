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
        receipt = charge(customer="c1", cents=500)                # exactly once per (run, step, args)

Each call: derive the key (``agent_worker.keys``) → **reserve** (one round trip: insert ``pending`` or
return the existing row, fenced) → **check** (``sent``/``confirmed``: return the stored result, call
nothing) → **perform** (the function gets a ``Call``: a ``str`` that *is* the idempotency key, with
``.idempotency_key``, ``.attempt``, ``.heartbeat()``) → **record** (one round trip, fenced). Happy path:
2 Postgres round trips.

A row found ``pending`` was left by an attempt that died between reserve and record: unknown outcome. With a
lookup hook, the hook decides (a value: recorded as sent, nothing called; ``None``: never happened, call);
without one, only a provider that dedupes by key is called again; otherwise the effect is flagged
``needs_human`` and the run stops with exit 13 — never a guess.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import time
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from agent_worker import canonical, context, errors, faults, keys, retry, store

P = ParamSpec("P")
R = TypeVar("R")

RetryPolicy = retry.RetryPolicy
Retryable = retry.Retryable
Ambiguous = retry.Ambiguous
Permanent = retry.Permanent

Lookup = Callable[[str, dict[str, Any]], Any]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Optionally returned by a tool (or a lookup) to record a provider reference or a confirmation."""

    result: Any
    provider_ref: str | None = None
    confirmed: bool = False


class Call(str):
    """What a tool function receives first: the idempotency key itself (a ``str``) plus call details."""

    idempotency_key: str
    attempt: int
    run_id: str
    step: str
    tool: str

    def __new__(cls, key: str, *, attempt: int, run_id: str, step: str, tool: str) -> Call:
        self = super().__new__(cls, key)
        self.idempotency_key = key
        self.attempt = attempt
        self.run_id = run_id
        self.step = step
        self.tool = tool
        return self

    def heartbeat(self, details: Any = None) -> None:
        """Progress of a long call; written (coalesced, ~1/s) to agentrun_heartbeats under this key."""
        _beat(
            context.current(),
            self.idempotency_key,
            {"tool": self.tool, "step": self.step, "details": details},
        )


def heartbeat(details: Any = None) -> None:
    """Heartbeat from anywhere in a node (outside a tool call: keyed by the step)."""
    ctx = context.current()
    md = context.config_metadata()
    try:
        where = f"step:{keys.step_from_metadata(md)}"
    except LookupError:
        where = "worker"
    _beat(ctx, where, {"details": details})


_seq = 0


def _beat(ctx: context.RunContext, key: str, details: dict[str, Any]) -> None:
    global _seq
    if not ctx.should_beat(key, time.monotonic()):
        return
    _seq += 1  # a counter observers compare, so staleness never depends on comparing clocks
    store.heartbeat(ctx.conn, run_id=ctx.run_id, key=key, details={**details, "seq": _seq})


def _jsonable(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable (it is stored in the ledger): {exc}") from exc


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
    ) -> None:
        self.fn = fn
        self.name = name
        self.action = action or name
        self.dedupes_by_key = dedupes_by_key
        self.lookup = lookup
        self.retry_policy = retry_policy
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
        step = keys.step_from_metadata(md)
        task = str(md.get("langgraph_checkpoint_ns") or step)
        occurrence = ctx.next_occurrence(task, self.action, args_hash)
        key = keys.derive(ctx.run_id, step, self.action, args_hash, occurrence)
        ctx.note_effect(str(step), key)
        execution = _Execution(self, ctx, key, str(step), normal, args, kwargs)
        execution.occurrence, execution.args_hash = occurrence, args_hash
        result: R = execution.run()
        return result


def tool(
    name: str,
    *,
    action: str | None = None,
    dedupes_by_key: bool = False,
    lookup: Lookup | None = None,
    retry: retry.RetryPolicy | None = None,
) -> Callable[[Callable[Concatenate[Call, P], R]], Tool[P, R]]:
    """Declare a side-effecting tool. ``name`` is a bounded label (metrics); ``action`` (default: name)
    enters the key. ``dedupes_by_key``: the provider honours the key (``Idempotency-Key``), so an
    unknown outcome may be retried blindly. ``lookup(key, args)``: find the effect at the provider."""

    def wrap(fn: Callable[Concatenate[Call, P], R]) -> Tool[P, R]:
        return Tool(
            fn,
            name=name,
            action=action,
            dedupes_by_key=dedupes_by_key,
            lookup=lookup,
            retry_policy=retry or _DEFAULT_RETRY,
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

    def _fenced(self, exc: errors.Fenced) -> errors.WorkerError:
        return self.ctx.set_stop(exc)

    def run(self) -> Any:
        self._guard()
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
            )
        except errors.Fenced as exc:
            raise self._fenced(exc) from None
        faults.hit("after_reserve")
        effect = reservation.effect
        if reservation.outcome == "existing":
            if effect.status in ("sent", "confirmed"):
                return effect.result
            if effect.status == "failed":
                raise errors.EffectFailed(
                    f"effect {self.key} ({self.tool.name}) failed earlier: {effect.error}"
                )
            if effect.needs_human:
                raise self.ctx.set_stop(
                    errors.NeedsHuman(f"effect {self.key} already flagged for a human", key=self.key)
                )
            why = f"left pending by an earlier attempt (epoch {effect.epoch})"
            return self._reconcile(why, unrecorded=0, total=effect.attempts)
        return self._perform(total=0, unrecorded=0)

    def _reconcile(self, why: str, *, unrecorded: int, total: int) -> Any:
        """Unknown outcome: look it up, retry where the provider dedupes, or stop for a human."""
        if self.tool.lookup is not None:
            try:
                found = self.tool.lookup(self.key, self.args)
            except Exception as exc:
                return self._needs_human(f"{why}; lookup failed: {type(exc).__name__}: {exc}", unrecorded)
            if found is not None:
                return self._record_success(found, calls=unrecorded)
            if total >= self.tool.retry_policy.max_attempts:
                return self._fail(f"{why}; not performed (lookup) and out of attempts", unrecorded)
            return self._perform(total=total, unrecorded=unrecorded)  # provably never happened
        if self.tool.dedupes_by_key:
            return self._perform(total=total, unrecorded=unrecorded)  # the provider dedupes by key
        return self._needs_human(
            f"{why}; tool {self.tool.name!r} has no lookup hook and its provider does not dedupe by key",
            unrecorded,
        )

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

    def _perform(self, *, total: int, unrecorded: int) -> Any:
        """Call the provider (with retries). ``total``: calls made for this key so far (the retry budget
        spans reconciliations); ``unrecorded``: calls not yet counted in the ledger row."""
        calls = unrecorded
        while True:
            self._guard()
            total += 1
            calls += 1
            call = Call(self.key, attempt=total, run_id=self.ctx.run_id, step=self.step, tool=self.tool.name)
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
                    return self._reconcile(f"call {total} {decision.reason}", unrecorded=calls, total=total)
                status = "failed" if decision.action == "fail" else "pending"
                self._record(status, calls, error=failure.message)
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
