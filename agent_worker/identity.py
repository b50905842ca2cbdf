"""What identifies an effect under key format v3: tool calls, nesting, explicit positions, and overlaps.

An effect's key is (run, identity, action, occurrence) (``agentrun_core.keys``); the occurrence counts calls
of one action per identity, so it is stable only when the calls of one identity come in a deterministic
order. The identity, from the outside in (docs/worker.md, "What identifies an effect"):

* the calling task's identity (``agent_worker.positions``), and inside a LangChain tool call with an id,
  ``/call#<i>``, the call's index in the model's message (in the task's input, so in the checkpoint: stable
  whatever order parallel calls run in, and when a re-run model step gives the calls new ids);
* inside another effect's body, ``/in:<that effect's key>``: a replay that answers the outer effect from the
  ledger skips its body, and the numbering after it cannot shift;
* inside ``effects.position("...")``, ``/pos:<name>`` for each enclosing position.

What stays positional is refused when it is seen racing: two calls of one action under one identity in
flight at once from different threads or asyncio tasks (``Flows``) raise ``UnstablePosition`` in the later
one, and from then on every call in that space does; a call whose space was seen racing and that meets a
ledger row with other arguments stops for a human instead of taking that row's result.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import threading
import uuid
from collections.abc import Iterator

from agentrun_core import errors

_enclosing: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentrun_enclosing", default=None)
_positions: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("agentrun_positions", default=())

Space = tuple[str, str]  # (identity, action): the domain of one occurrence counter


class UnstablePosition(errors.WorkerError):
    """Two calls of one effect overlapped in one occurrence space: which is which would be a guess."""


@contextlib.contextmanager
def position(name: str) -> Iterator[None]:
    """Effects called inside get ``/pos:<name>`` in their identity, with their own occurrence counts. Enter
    it in the thread or asyncio task that calls the effect (thread pools do not copy context)."""
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"effects.position: a non-empty name without '/' is needed, not {name!r}")
    token = _positions.set((*_positions.get(), name))
    try:
        yield
    finally:
        _positions.reset(token)


@contextlib.contextmanager
def enclosing(key: str) -> Iterator[None]:
    """While an effect's body runs: effects it calls are numbered under its key."""
    token = _enclosing.set(key)
    try:
        yield
    finally:
        _enclosing.reset(token)


def qualify(base: str) -> str:
    """``base`` (the task identity, with its tool call) + the enclosing effect and the explicit positions."""
    outer = _enclosing.get()
    parts = [base]
    if outer is not None:
        parts.append(f"in:{outer}")
    parts += [f"pos:{p}" for p in _positions.get()]
    return "/".join(parts)


def caller_run_id() -> uuid.UUID | None:
    """The callback run the caller runs under (inside a LangChain tool's body: the tool run), if any."""
    from langchain_core.runnables.config import var_child_runnable_config

    config = var_child_runnable_config.get()
    parent = getattr((config or {}).get("callbacks"), "parent_run_id", None)
    return parent if isinstance(parent, uuid.UUID) else None


def _flow() -> tuple[int, int]:
    """Who is calling: the thread, and the asyncio task when one is running in it."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop in this thread
        task = None
    return threading.get_ident(), id(task) if task is not None else 0


class Flows:
    """Effect calls in flight per occurrence space, by thread/asyncio task; spaces seen racing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight: dict[Space, collections.Counter[tuple[int, int]]] = {}
        self._raced: set[Space] = set()

    @contextlib.contextmanager
    def enter(self, space: Space) -> Iterator[None]:
        """Hold ``space`` for one effect call; ``UnstablePosition`` if another flow holds it, or did race."""
        me = _flow()
        with self._lock:
            holders = self._in_flight.setdefault(space, collections.Counter())
            raced = space in self._raced or any(n > 0 for f, n in holders.items() if f != me)
            if raced:
                self._raced.add(space)
            else:
                holders[me] += 1
        if raced:
            identity, action = space
            raise UnstablePosition(
                f"two calls of effect {action!r} ran at once under {identity!r} (threads or asyncio tasks): "
                "their occurrence numbers would follow the order they reach the ledger, which a replay need "
                "not repeat. Call each inside a tool call with an id, or inside "
                "`with effects.position(<a name stable across replays>):` in the thread or task that calls it"
            )
        try:
            yield
        finally:
            with self._lock:
                holders[me] -= 1
                if holders[me] <= 0:
                    del holders[me]
                if not holders:  # one entry per space in flight, not per space ever used
                    self._in_flight.pop(space, None)

    def raced(self, space: Space) -> bool:
        with self._lock:
            return space in self._raced
