"""What a tool and a node see of an effect call: ``Call`` (the key as a ``str`` plus details), ``Outcome``,
heartbeats, and the calling task's step identity in the run's key format. Re-exported by
``agent_worker.effects``, the public API; the ledger logic lives in ``agentrun_core.ledger``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from agent_worker import context, retry
from agentrun_core import keys, store


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Optionally returned by a tool (or a lookup) to record a provider reference or a confirmation."""

    result: Any
    provider_ref: str | None = None
    confirmed: bool = False


class ToolSpec(Protocol):
    """What the ledger's shell (``agent_worker.ledger_shell``) reads of a tool; ``effects.Tool`` is one. Here,
    below both, so the shell that performs a call never imports the API that declares the tool."""

    @property
    def fn(self) -> Callable[..., Any]: ...
    @property
    def name(self) -> str: ...
    @property
    def action(self) -> str: ...
    @property
    def dedupes_by_key(self) -> bool: ...
    @property
    def lookup(self) -> Callable[[str, dict[str, Any]], Any] | None: ...
    @property
    def retry_policy(self) -> retry.RetryPolicy: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def on_divergence(self) -> str: ...
    @property
    def max_in_flight_wait(self) -> float: ...
    @property
    def permanent(self) -> tuple[type[BaseException], ...]: ...


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
        """Progress of a long call; written (coalesced, ~1/s) to agentrun_heartbeats under this key.
        Raises the attempt's stop (``Fenced``, or a lost Postgres) once the attempt is over: a long call
        ends early."""
        _beat(
            context.current(),
            self.idempotency_key,
            {"tool": self.tool, "step": self.step, "details": details},
        )


def heartbeat(details: Any = None) -> None:
    """Heartbeat from anywhere in a node (outside a tool call: keyed by the step). Raises the attempt's stop
    once the attempt is over (fenced, lease lost, Postgres lost), so a long node ends at its next beat."""
    ctx = context.current()
    md = context.config_metadata()
    try:
        where = f"step:{step(ctx, md)}"
    except LookupError:
        where = "worker"
    _beat(ctx, where, {"details": details})


def step(ctx: context.RunContext, md: dict[str, Any]) -> str:
    """The calling task's step identity in the run's key format (``LookupError`` outside a node)."""
    if ctx.key_version == 1:
        return str(keys.step_from_metadata(md))
    return ctx.tracker.identity(md)


# A counter observers compare, so staleness never depends on comparing clocks. Tools may beat from several
# threads at once (a node's parallel tool calls): the lock keeps every number unique and increasing.
_seq = itertools.count(1)
_seq_lock = threading.Lock()


def _next_seq() -> int:
    with _seq_lock:
        return next(_seq)


def _beat(ctx: context.RunContext, key: str, details: dict[str, Any]) -> None:
    if ctx.stop is not None:  # the attempt is over (fenced, lease lost, Postgres lost): the node learns it
        raise ctx.stop
    if not ctx.should_beat(key, time.monotonic()):
        return
    store.heartbeat(ctx.conn, run_id=ctx.run_id, key=key, details={**details, "seq": _next_seq()})


def jsonable(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable (it is stored in the ledger): {exc}") from exc
