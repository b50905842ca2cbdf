"""Step events (``agentrun_step_events``), each carrying the saver's own time for writing its checkpoint, and
the run's ``current_step``, written together in ONE statement per flush (``store.record_steps``).

Rule: ``checkpoint_seconds`` is what ``checkpointer.FencedSaver`` measured around its ``put`` of that step's
checkpoint (connection, fencing statement, blobs, checkpoint row, commit) — never a gap between stream events.
An event waits here until its checkpoint's write has been timed: at once under ``durability="sync"``; a
little later under ``async`` (the write runs on LangGraph's background thread); under ``exit`` only the last
checkpoint is written, so the others are recorded at the end with ``None``. Events are recorded in order.

Round trips: a flush is one statement — the ready events (one multi-row INSERT) and the current step (an
UPDATE fenced by the attempt's epoch: a deposed worker never moves it). ``batch_seconds`` bounds how often
a flush writes: 0 (``sync``: the mode already pays a round trip per step, the event goes with it) writes at
every step; ``async`` and ``exit`` promise not to wait on Postgres at every step, so they write at most once
per ``batch_seconds`` and at the end (``final``). ``current_step`` and the trace then lag the graph by at
most that long; the events are history and a crash loses at most that window of them (never a checkpoint).
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from agent_worker import checkpointer
from agentrun_core import store

# async/exit: at most one step-event write per second (docstring above); sync writes at every step.
BATCH_SECONDS = {"sync": 0.0, "async": 1.0, "exit": 1.0}


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
    ) -> None:
        self.conn = conn
        self.run_id = run_id
        self.attempt = attempt
        self.saver = saver
        self.epoch = epoch  # None: never move current_step (the events alone)
        self.batch_seconds = batch_seconds
        self._pending: list[dict[str, Any]] = []
        self._current: str | None = None  # newest step name, not yet written to the run row
        self._last_write = time.monotonic()

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
        self._pending.append(
            {
                "step": step,
                "checkpoint_id": checkpoint_id,
                "started_at": started_at,
                "duration_seconds": duration_seconds,
                "effect_keys": effect_keys,
            }
        )
        if current_step is not None:
            self._current = current_step

    def flush(self, *, final: bool) -> None:
        """Record the pending events whose checkpoint write is timed (with ``final`` all of them) and the
        newest current step, in one statement; outside ``final`` at most once per ``batch_seconds``."""
        now = time.monotonic()
        if not final and now - self._last_write < self.batch_seconds:
            return
        ready: list[dict[str, Any]] = []
        for event in self._pending:
            cp_id = event["checkpoint_id"]
            seconds = self.saver.write_seconds(cp_id) if cp_id else None
            if seconds is None and not final:
                break  # events are recorded in order: a later one waits for this one's timing
            ready.append({**event, "checkpoint_seconds": seconds})
        current = self._current if self.epoch is not None else None
        if not ready and current is None:
            return
        store.record_steps(
            self.conn,
            run_id=self.run_id,
            attempt=self.attempt,
            epoch=self.epoch,
            events=ready,
            current_step=current,
        )
        del self._pending[: len(ready)]
        self._current = None
        self._last_write = now
