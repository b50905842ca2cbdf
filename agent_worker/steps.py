"""Step events (``agentrun_step_events``), each carrying the saver's own time for writing its checkpoint, and
the run's ``current_step``, written together in ONE statement (``store.record_steps``: the events of a
statement are one ``agentrun_step_batches`` row, migration 21, packed by ``store.step_packing``, migration
22).

Rule: ``checkpoint_seconds`` is what ``checkpointer.FencedSaver`` measured around its ``put`` of that step's
checkpoint (connection, blobs, the checkpoint row and its fence, commit) — never a gap between stream events.
An event waits here until its checkpoint's write has been timed: at once under ``durability="sync"``; a
little later under ``async`` (the write runs on LangGraph's background thread); under ``exit`` only the last
checkpoint is written, so the others are recorded at the end with ``None`` — and with no ``checkpoint_id``:
a checkpoint never written is none a trace may offer or a fork start from. Events are recorded in order.

Round trips: none of their own on the graph's path, and rarely a statement per step. Events gather here and
go in ONE statement, which *rides* on a checkpoint write of the saver (``ride``: sent inside that write's
pipeline, one implicit transaction, so it costs no round trip and commits with it) once the oldest has waited
half of ``batch_seconds``; what no write carried within ``batch_seconds`` (a slow node runs) is written by the
recorder's own thread, beside the running node (never in its way). Fast steps so share a statement, a slow
step rides on its own checkpoint's neighbour. ``current_step`` and the trace lag the graph by at most
``batch_seconds``; the events are history, and a crash loses at most that window of them (never a
checkpoint). The current step is written only when it changes. ``batch_seconds`` 0 writes at every
``flush`` instead (tests, and callers with no saver to ride on). When the stream ends with the run
finished, what is left goes in the outcome's own statement (``take_final``, ``store.finish_attempt``): the
attempt's last events cost no round trip either. The thread's write meeting a lost Postgres
stops the attempt (``on_lost``) as a write on the graph's path would: it is retried, but the attempt ends as
lost to infrastructure (exit 14). The current step is fenced by the attempt's epoch in the statement: a
deposed worker never moves it.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from agent_worker import checkpointer, infra
from agentrun_core import errors, store

logger = logging.getLogger(__name__)
# The longest a step event waits for a checkpoint write to ride on before the recorder writes it itself.
# sync: short, so current_step follows the graph closely; async/exit promise fewer writes per step.
BATCH_SECONDS = {"sync": 0.25, "async": 1.0, "exit": 1.0}

Batch = tuple[list[dict[str, Any]], str | None]  # (ready events, current step) taken for one statement


class StepRecorder:
    def __init__(
        self,
        conn: store.Conn,
        *,
        run_id: str,
        attempt: int,
        saver: checkpointer.FencedSaver,
        epoch: int | None = None,
        batch_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        on_lost: Callable[[errors.ControlSignal], None] | None = None,
    ) -> None:
        self.conn = conn
        self.run_id = run_id
        self.attempt = attempt
        self.saver = saver
        self.epoch = epoch  # None: never move current_step (the events alone)
        self.batch_seconds = batch_seconds
        self._clock = clock
        self.on_lost = on_lost  # told when the thread's write met a lost Postgres (the attempt stops: 14)
        self._cond = threading.Condition()  # guards everything below
        self._pending: list[dict[str, Any]] = []
        self._current: str | None = None  # newest step name, not yet written to the run row
        self._written: str | None = None  # the step name last written (taken) for the run row
        self._since: float | None = None  # monotonic: when the oldest unwritten item was added
        self._busy = False  # a batch is being written (ridden or by the thread): one at a time, in order
        self._thread: threading.Thread | None = None
        # The thread waits with no deadline (nothing was pending): only then does a new item need to wake it.
        # Otherwise it wakes by itself at the deadline it computed, never later than the oldest item's, so a
        # step costs no thread switch of its own.
        self._idle = False
        self._closed = False

    def add(
        self,
        *,
        step: str,
        checkpoint_id: str | None,
        started_at: datetime.datetime,
        duration_seconds: float,
        effect_keys: list[str],
        current_step: str | None = None,
    ) -> None:
        event = {
            "step": step,
            "checkpoint_id": checkpoint_id,
            "started_at": started_at,
            "duration_seconds": duration_seconds,
            "effect_keys": effect_keys,
        }
        with self._cond:
            self._pending.append(event)
            if current_step is not None and current_step != self._written:
                self._current = current_step
            elif current_step is not None:
                self._current = None  # back to the name the run row already shows
            if self._since is None:
                self._since = self._clock()

    def flush(self, *, final: bool) -> None:
        """``final``: record everything now (the stream has ended; every write it made is done). Otherwise
        make sure what is pending gets written within ``batch_seconds`` (at once when that is 0)."""
        if final:
            self._close()
            self._write(final=True)
        elif self.batch_seconds <= 0:
            self._write(final=False)
        else:
            self._ensure_thread()

    def take_final(self) -> Batch:
        """The stream has ended and the attempt's outcome is written next: close, and hand over everything
        still unrecorded (events, and the current step to move) for the outcome's own statement
        (``store.finish_attempt``), instead of a statement of its own. ``([], None)``: nothing left."""
        self._close()
        batch = self._take_last()
        if batch is None:
            return [], None
        self._done(batch, written=True)  # handed over: the recorder, closed, writes nothing more
        return batch

    def write_taken(self, batch: Batch) -> None:
        """A batch ``take_final`` handed over for an outcome that is not written after all (the attempt was
        stopped meanwhile): recorded in a statement of its own, as history is, whatever the epoch."""
        events, current = batch
        if events or current is not None:
            self._record(batch)

    # --- riding on the saver's writes ---------------------------------------------------------------------

    def ride(self, conn: Any) -> Callable[[bool], None] | None:
        """Called by the saver inside a write's pipeline, before its Sync: once the oldest pending item has
        waited half of ``batch_seconds``, send the ready batch on ``conn`` (read nothing back) and return the
        callback the saver calls with whether the transaction committed. ``None``: nothing sent (nothing due,
        or a batch is already being written: order first)."""
        with self._cond:
            due = self._since is not None and self._clock() - self._since >= self.batch_seconds / 2
        batch = self._take(final=False) if due else None
        if batch is None:
            return None
        events, current = batch
        store.send_steps(
            conn,
            run_id=self.run_id,
            attempt=self.attempt,
            epoch=self.epoch,
            events=events,
            current_step=current,
        )
        return lambda committed: self._done(batch, written=committed)

    # --- internals ----------------------------------------------------------------------------------------

    def _take(self, *, final: bool) -> Batch | None:
        """Under the lock: the events whose checkpoint write is timed (with ``final`` all of them), in order,
        and the newest current step; marked busy. ``None`` if there is nothing, or a batch is in flight."""
        with self._cond:
            if self._busy:
                return None
            ready: list[dict[str, Any]] = []
            for event in self._pending:
                cp_id = event["checkpoint_id"]
                seconds = self.saver.write_seconds(cp_id) if cp_id else None
                if seconds is None and not final:
                    break  # events are recorded in order: a later one waits for this one's timing
                if seconds is None:  # never written (exit mode): no checkpoint to read, fork from or trace
                    event = {**event, "checkpoint_id": None}
                ready.append({**event, "checkpoint_seconds": seconds})
            current = self._current if self.epoch is not None else None
            if not ready and current is None:
                return None
            del self._pending[: len(ready)]
            if current is not None:
                self._written = current
            self._current = None
            self._since = self._clock() if self._pending else None
            self._busy = True
            return ready, current

    def _take_last(self) -> Batch | None:
        """``_take(final=True)`` once any batch in flight (riding a write, or the thread's) ended: order."""
        with self._cond:
            self._cond.wait_for(lambda: not self._busy)
        return self._take(final=True)

    def _done(self, batch: Batch, *, written: bool) -> None:
        with self._cond:
            self._busy = False
            if not written:  # rolled back with the write it rode on: still to be recorded, first in line
                events, current = batch
                untimed = [{k: v for k, v in e.items() if k != "checkpoint_seconds"} for e in events]
                self._pending[:0] = untimed
                if self._current is None and current is not None:
                    self._current = current
                if current is not None:
                    self._written = None  # the run row may not show it: write the next name, whatever it is
                self._since = self._since or self._clock()
            self._cond.notify_all()

    def _write(self, *, final: bool) -> bool:
        """Write the ready batch in a statement of its own; False if there was none to take."""
        batch = self._take_last() if final else self._take(final=False)
        if batch is None:
            return False
        try:
            self._record(batch)
        except BaseException:
            self._done(batch, written=False)
            raise
        self._done(batch, written=True)
        return True

    def _record(self, batch: Batch) -> None:
        events, current = batch
        store.record_steps(
            self.conn,
            run_id=self.run_id,
            attempt=self.attempt,
            epoch=self.epoch,
            events=events,
            current_step=current,
        )

    def _ensure_thread(self) -> None:
        with self._cond:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._loop, name="step-events", daemon=True)
                self._thread.start()
            elif self._idle and self._since is not None:
                self._cond.notify_all()

    def _loop(self) -> None:
        """Write what has waited ``batch_seconds`` for a ride; history only, so a failure is retried at the
        next interval and, at the latest, by the final flush (whose error the stream reports)."""
        while True:
            with self._cond:
                if self._closed:
                    return
                due = None if self._since is None else self._since + self.batch_seconds
                now = self._clock()
                if due is None or due > now:
                    self._idle = due is None
                    self._cond.wait(None if due is None else due - now)
                    self._idle = False
                    continue
            try:
                wrote = self._write(final=False)
            except Exception as exc:
                logger.warning("could not record step events (retried)", exc_info=True)
                if self.on_lost is not None and infra.cause(exc) is not None:
                    # As a write on the graph's path would: Postgres went away under the attempt.
                    self.on_lost(infra.lost(exc, "recording step events"))
                wrote = False
            if not wrote:  # failed, or nothing ready yet (a write still untimed, a ride in flight):
                with self._cond:  # look again one interval later, not in a loop
                    if self._since is not None:
                        self._since = self._clock()

    def _close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
