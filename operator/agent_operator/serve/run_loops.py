"""The per-run loops: one asyncio task per AgentRun, started from kopf's watch events, not a kopf daemon.

Why not a kopf daemon: for every object with a daemon kopf keeps the whole last-seen body as parsed JSON
(``metadata.managedFields`` included: more than half of an AgentRun's values) and the daemon's machinery (its
task, a stopper's asyncio and threading events, the handler call's kwargs, logger and patch): ~45 KiB of the
~65 KiB the operator held per waiting run (docs/dev/performance.md, P4). A loop here holds its run as one
compact JSON string (no managedFields), parsed at each reconcile (which copied the body anyway).

What a sleeping loop holds is what 10,000 parked runs cost (P4), so it holds little: its task runs in a
fresh ``contextvars.Context`` (a task copies its creator's context, and kopf's handler context holds the
event's cause: the whole raw body, managedFields and all, its patch and logger), and it sleeps on one
future and one timer (``asyncio.wait_for`` would add a second task, an ``asyncio.Event`` a deque).

Rules:
* one loop per run: keyed by (namespace, name), bound to the run's uid; a new uid under the same name (the
  run deleted and created again) stops the old loop and starts one for the new run;
* the loop reconciles the latest body the watch delivered; every event of the run, one of its Pods or its
  Lease wakes it (``wake``);
* a deletion (``deletionTimestamp``) or a DELETED event stops the loop after its current round; the on.delete
  handler finishes the run's deletion and waits for the loop to have exited (``stopped``) before kopf removes
  the finalizer, as kopf waits for its daemons;
* the operator's shutdown stops every loop, waits for them (bounded), then cancels what is left;
* at most ``slots`` rounds read their run at once (``Loops.round``, as many as the thread pool the
  reconciles run in has threads): 10,000 runs created at once would otherwise each parse their body and
  queue for a thread, and that burst's garbage, interleaved with what the runs keep, stays in the
  process's heap (P4).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any

STOP_TIMEOUT_SECONDS = 10.0  # a stopping loop's time to end its round (kopf's cancellation_timeout)
ROUND_SLOTS = min(32, (os.cpu_count() or 1) + 4)  # the threads of asyncio's default executor


@dataclasses.dataclass(eq=False, slots=True)
class Loop:
    """One run's loop: the run's latest body (compact JSON) and what wakes and stops it."""

    uid: str
    body: bytes
    stopping: bool = False
    woken: bool = False  # an event came since the current round began: the next sleep returns at once
    task: asyncio.Task[None] | None = None
    waiter: asyncio.Future[None] | None = None  # what the sleeping loop awaits

    def current(self) -> dict[str, Any]:
        """The run as the watch last delivered it (a fresh copy: the round may change it freely)."""
        return dict(json.loads(self.body))

    def begin_round(self) -> None:
        """A round starts from the latest body: wake-ups until now are answered by it."""
        self.woken = False

    def wake(self) -> None:
        self.woken = True
        if self.waiter is not None:
            _resolve(self.waiter)


def start(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    """A long-lived task started from a kopf handler, in a fresh context: ``create_task`` would copy the
    handler's, which holds the event's cause (its raw body, patch and logger) while the task lives."""
    return asyncio.create_task(coro, name=name, context=contextvars.Context())


def compact(body: Mapping[str, Any]) -> bytes:
    """``body`` as compact JSON without ``metadata.managedFields`` (nothing in a reconcile reads them)."""
    doc = dict(body)
    meta = {k: v for k, v in dict(doc.get("metadata") or {}).items() if k != "managedFields"}
    doc["metadata"] = meta
    return json.dumps(doc, separators=(",", ":")).encode()


class Loops:
    """Every run's loop of this process. ``run(key, loop)`` is the loop's body (the caller's reconcile
    loop); it returns when ``loop.stopping`` is set and it has woken."""

    def __init__(
        self, run: Callable[[tuple[str, str], Loop], Awaitable[None]], slots: int = ROUND_SLOTS
    ) -> None:
        self._run = run
        self._loops: dict[tuple[str, str], Loop] = {}
        self._slots = asyncio.Semaphore(slots)

    @contextlib.asynccontextmanager
    async def round(self, loop: Loop) -> AsyncIterator[None]:
        """A round of ``loop``: once a slot is free, from the latest body (wake-ups until now answered)."""
        async with self._slots:
            loop.begin_round()
            yield

    def get(self, key: tuple[str, str]) -> Loop | None:
        return self._loops.get(key)

    def __len__(self) -> int:
        return len(self._loops)

    def seen(self, key: tuple[str, str], uid: str, body: Mapping[str, Any], *, gone: bool) -> None:
        """An event of the run: keep its body and wake its loop; start the loop if it has none; stop it
        when the run is being deleted or gone (``gone``: a DELETED event)."""
        loop = self._loops.get(key)
        if loop is not None and loop.uid != uid:
            self._stop(loop)  # an earlier run of the same name: its loop ends, this run gets its own
            self._loops.pop(key, None)
            loop = None
        deleting = gone or bool((body.get("metadata") or {}).get("deletionTimestamp"))
        if loop is None and deleting:
            return  # nothing to run: the delete handler finishes it
        held = compact(body)
        if loop is None:
            loop = self._loops[key] = Loop(uid, held)
        loop.body = held
        if deleting:
            self._stop(loop)
        elif loop.task is None or loop.task.done():
            # New, or its task ended without being told to stop (an error escaped a round's guard): the
            # run's next event starts it again rather than leaving the run without a loop.
            loop.task = start(self._guarded(key, loop), f"run {key[0]}/{key[1]}")
        loop.wake()

    def wake(self, key: tuple[str, str]) -> None:
        loop = self._loops.get(key)
        if loop is not None:
            loop.wake()

    async def stopped(self, key: tuple[str, str], uid: str, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Stop the run's loop (if it has one for ``uid``) and wait until it has exited (then cancelled)."""
        loop = self._loops.get(key)
        if loop is None or loop.uid != uid:
            return
        self._stop(loop)
        await _finish(loop, timeout)
        if self._loops.get(key) is loop:
            self._loops.pop(key, None)

    async def stop_all(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """The operator stops: every loop ends its round and exits; what is left after ``timeout`` is
        cancelled (a reconcile's thread still finishes its own round: threads cannot be cancelled)."""
        loops = list(self._loops.values())
        self._loops.clear()
        for loop in loops:
            self._stop(loop)
        await asyncio.gather(*(_finish(loop, timeout) for loop in loops))

    @staticmethod
    def _stop(loop: Loop) -> None:
        loop.stopping = True
        loop.wake()

    async def _guarded(self, key: tuple[str, str], loop: Loop) -> None:
        try:
            await self._run(key, loop)
        finally:
            if self._loops.get(key) is loop and loop.stopping:
                self._loops.pop(key, None)


async def _finish(loop: Loop, timeout: float) -> None:
    task = loop.task
    if task is None or task.done():
        return
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def sleep(loop: Loop, seconds: float) -> None:
    """Until ``seconds`` have passed, or the loop is woken (an event) or told to stop."""
    if loop.stopping or loop.woken:
        return
    if seconds <= 0:
        await asyncio.sleep(0)
        return
    running = asyncio.get_running_loop()
    waiter = loop.waiter = running.create_future()
    timer = running.call_later(seconds, _resolve, waiter)
    try:
        await waiter
    finally:
        timer.cancel()
        loop.waiter = None


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
