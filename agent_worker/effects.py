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

Each call: derive the key from the call's POSITION (``agentrun_core.keys``: run, identity, action,
occurrence — not the arguments; the identity names the step, the tool call, an enclosing effect and
``effects.position(...)``: agent_worker.identity, docs/worker.md "What identifies an effect") →
**reserve** (one round trip: insert ``pending`` or return the existing row, fenced) → **check**
(``sent``/``confirmed``: return the stored result, call nothing) → **perform** (the function gets a
``Call``: a ``str`` that *is* the idempotency key, with ``.idempotency_key``, ``.attempt``,
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

These rules are one pure state machine, ``agentrun_core.ledger`` (tested as a table without Postgres);
``agent_worker.ledger_shell`` performs its actions. This module is the API: ``tool``, ``Tool``, ``confirm``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, cast

from agent_worker import calls, context, identity, ledger_shell, retry
from agentrun_core import canonical, keys, store

P = ParamSpec("P")
R = TypeVar("R")

RetryPolicy = retry.RetryPolicy
Retryable = retry.Retryable
Ambiguous = retry.Ambiguous
Permanent = retry.Permanent

Lookup = Callable[[str, dict[str, Any]], Any]
ON_DIVERGENCE = ("return_stored", "needs_human")


UnstablePosition = identity.UnstablePosition
position = identity.position

Outcome = calls.Outcome
Call = calls.Call
heartbeat = calls.heartbeat
_step = calls.step


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
        permanent: tuple[type[BaseException], ...] = (),
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
        self.permanent = tuple(permanent)  # exception types that prove the provider did nothing
        self._signature = inspect.signature(fn)
        self.is_async = inspect.iscoroutinefunction(fn)  # awaited: ``await send(...)`` (ledger_shell.arun)
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
        if self.is_async:  # an ``async def`` effect: the call is awaited (``await send(...)``)
            return cast(R, self._acall(args, kwargs))
        with self._begin(args, kwargs) as execution:
            result: R = execution.run()
            return result

    async def _acall(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The awaited form: keyed, reserved and recorded exactly as the sync one. Its occurrence space is
        held by this asyncio task until the effect ends, so two such calls that overlap (``asyncio.gather``)
        in one space without a stable identity raise ``UnstablePosition``, as threads do."""
        with self._begin(args, kwargs) as execution:
            return await execution.arun()

    @contextlib.contextmanager
    def _begin(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[ledger_shell.Execution]:
        """The call's key and its ledger execution; its occurrence space is held while the caller runs it."""
        ctx = context.current()
        if ctx.stop is not None:
            raise ctx.stop
        named = self.arguments(*args, **kwargs)
        normal = canonical.normalise(named)
        args_hash = canonical.digest(named)
        md = context.config_metadata()
        step = _step(ctx, md)
        if ctx.key_version >= 3:  # tool calls, nesting and positions identify it (agent_worker.identity)
            step = identity.qualify(ctx.tracker.identity(md, identity.caller_run_id()))
            space = (step, self.action)
            with ctx.flows.enter(space):
                occurrence = ctx.tracker.next_occurrence(step, self.action)
                key = keys.derive(ctx.run_id, step, self.action, occurrence, version=ctx.key_version)
                yield self._execution(ctx, step, key, occurrence, (normal, args_hash), args, kwargs, space)
            return
        if ctx.key_version == 1:  # a run started under key format v1 keeps deriving v1 keys
            task = str(md.get("langgraph_checkpoint_ns") or step)
            occurrence = ctx.next_occurrence(task, self.action, args_hash)
            key = keys.derive(ctx.run_id, step, self.action, occurrence, version=1, args_hash=args_hash)
        else:  # v2: the order in which calls reach the ledger (racy under concurrency: issue 34)
            occurrence = ctx.tracker.next_occurrence(step, self.action)
            key = keys.derive(ctx.run_id, step, self.action, occurrence, version=2)
        yield self._execution(ctx, step, key, occurrence, (normal, args_hash), args, kwargs, None)

    def _execution(
        self,
        ctx: context.RunContext,
        step: str,
        key: str,
        occurrence: int,
        canonical_args: tuple[Any, str],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        space: identity.Space | None,
    ) -> ledger_shell.Execution:
        normal, args_hash = canonical_args
        ctx.note_effect(step, key)
        version = ctx.key_version
        return ledger_shell.Execution(
            self,
            ctx,
            key=key,
            step=step,
            args=normal,
            args_hash=args_hash,
            occurrence=occurrence,
            call_args=args,
            call_kwargs=kwargs,
            rekey=lambda g: keys.derive(
                ctx.run_id, step, self.action, occurrence, version=version, args_hash=args_hash, generation=g
            ),
            # A space seen racing: a row with other arguments may be another call's, so a human decides.
            raced=(lambda: ctx.flows.raced(space)) if space is not None else None,
        )


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
    permanent: tuple[type[BaseException], ...] = (),
) -> Callable[[Callable[Concatenate[Call, P], R]], Tool[P, R]]:
    """Declare a side-effecting tool. ``name`` is a bounded label (metrics); ``action`` (default: name)
    enters the key. ``dedupes_by_key``: the provider honours the key (``Idempotency-Key``), so an
    unknown outcome may be retried blindly. ``lookup(key, args)``: find the effect at the provider.
    ``timeout``: seconds after issuing a call during which it may still take effect at the provider (the
    provider's bound, at least the client timeout); required for a lookup without ``dedupes_by_key``.
    ``on_divergence``: a replay with other arguments gets the stored result (``"return_stored"``) or stops
    the run for a human the first time (``"needs_human"``). ``max_in_flight_wait``: longest wait for an
    earlier call's deadline before handing the effect to a human instead. ``permanent``: exception types
    that prove the provider did not perform the call and never will (like raising ``effects.Permanent``);
    any exception nobody classified is an unknown outcome (docs/worker.md, "Retries and outcomes")."""

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
            permanent=permanent,
        )

    return wrap


_DEFAULT_RETRY = retry.RetryPolicy()


def confirm(key: str, *, result: Any = None, provider_ref: str | None = None) -> bool:
    """Mark a sent effect confirmed (the provider confirmed it later: webhook, poll). True if changed."""
    ctx = context.current()
    confirmed = store.confirm_effect(
        ctx.conn, run_id=ctx.run_id, key=key, result=result, provider_ref=provider_ref
    )
    return confirmed is not None
