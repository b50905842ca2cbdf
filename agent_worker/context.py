"""The run context the worker hands to graph code: which run, which epoch, where the ledger lives.

Carried in a ``contextvars.ContextVar``: LangGraph runs each task in a copy of the caller's context (checked
on langgraph 1.2: a value set before ``invoke``/``stream`` is visible inside sync nodes and their threads), so
nodes and tools find it without the graph author threading anything through.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from agent_worker import identity, positions
from agentrun_core import errors, keys
from agentrun_core.store import db


def _always() -> bool:
    return True


def _never_raises() -> None:
    return None


@dataclasses.dataclass
class RunContext:
    conn: db.Conn  # an autocommit pool: one statement = one round trip
    run_id: str
    attempt: int
    epoch: int
    retry_generation: int = 0  # agentrun_runs.retry_generation: failed effects are retried under it
    may_act: Callable[[], bool] = _always  # the LeaseKeeper's: False past the renew deadline
    lease_check: Callable[[], None] = _never_raises  # raises with the reason when may_act() is False
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = dataclasses.field(default_factory=random.Random)
    heartbeat_interval: float = 1.0  # seconds: tool heartbeats are coalesced to at most one write per key
    key_version: int = keys.KEY_VERSION  # the run's key format (agentrun_runs.key_version): never changes
    tracker: positions.Tracker = dataclasses.field(default_factory=positions.Tracker)
    flows: identity.Flows = dataclasses.field(default_factory=identity.Flows)  # v3: racing positions
    # Sticky stop: once fenced or needing a human, every later effect refuses at once, even when graph
    # code swallowed the first exception. The runner checks it after the graph returns.
    stop: errors.ControlSignal | None = None
    _occurrences: collections.Counter[tuple[str, str, str]] = dataclasses.field(
        default_factory=collections.Counter
    )
    effect_keys: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    _beats: dict[str, float] = dataclasses.field(default_factory=dict)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        # Key format v3: tool calls name their effects and the subgraphs they invoke (agent_worker.positions).
        self.tracker.scoped = self.key_version >= 3

    def next_occurrence(self, task: str, action: str, args_hash: str) -> int:
        """Key format v1 only: 0 for the first identical call within one task execution, 1 for the second."""
        with self._lock:
            n = self._occurrences[(task, action, args_hash)]
            self._occurrences[(task, action, args_hash)] = n + 1
            return n

    def note_effect(self, step: str, key: str) -> None:
        with self._lock:
            keys = self.effect_keys.setdefault(step, [])
            if key not in keys:
                keys.append(key)

    def take_effect_keys(self, step_prefix: str) -> list[str]:
        """Keys noted for steps named ``step_prefix`` (node:step, and its push tasks and subgraph tasks),
        removed from the buffer."""
        with self._lock:
            found: list[str] = []
            inside = (step_prefix + ":", step_prefix + "/")
            for step in [s for s in self.effect_keys if s == step_prefix or s.startswith(inside)]:
                found += self.effect_keys.pop(step)
            return found

    def set_stop(self, exc: errors.ControlSignal) -> errors.ControlSignal:
        with self._lock:
            if self.stop is None:
                self.stop = exc
            return self.stop

    def should_beat(self, key: str, now: float) -> bool:
        with self._lock:
            last = self._beats.get(key)
            if last is not None and now - last < self.heartbeat_interval:
                return False
            self._beats[key] = now
            return True


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("agentrun_run", default=None)


def current() -> RunContext:
    ctx = _current.get()
    if ctx is None:
        raise RuntimeError(
            "agent_worker: no run context; effects and heartbeats work only inside a graph run by "
            "`agentrun worker` (or agent_worker.context.activate() in tests)"
        )
    return ctx


def maybe_current() -> RunContext | None:
    return _current.get()


@contextlib.contextmanager
def activate(ctx: RunContext) -> Iterator[RunContext]:
    """Make ``ctx`` current, and attach its positions tracker to every LangGraph run started meanwhile."""
    token = _current.set(ctx)
    tracked = positions.activate(ctx.tracker)
    try:
        yield ctx
    finally:
        positions.deactivate(tracked)
        _current.reset(token)


def config_metadata() -> dict[str, Any]:
    """The current LangGraph task's config metadata ({} outside a node)."""
    try:
        from langgraph.config import get_config

        return dict(get_config().get("metadata") or {})
    except RuntimeError:
        return {}
