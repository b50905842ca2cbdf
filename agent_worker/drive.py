"""Driving the graph step by step: the stream, its step events, and the SIGTERM drain that stops it.

Rule: the attempt acts only at step boundaries — at each checkpoint it marks a resumed approval resumed,
records the step's event (the saver times the checkpoint's write, ``agent_worker/steps.py``) and checks for a
drain; a stop signalled meanwhile (fenced, lease lost, Postgres lost) ends the stream at the next event. The
step events of a stream are flushed when it ends, whatever the outcome, and never mask that outcome.
"""

from __future__ import annotations

import datetime
import logging
import signal
import threading
import time
from typing import Any

from langchain_core.runnables import RunnableConfig

from agent_worker import budget, context, heartbeat, steps
from agentrun_core import faults, store

logger = logging.getLogger(__name__)


class Drain:
    """SIGTERM: finish at the next step boundary; past ``seconds`` exit 11 anyway (the step re-runs later)."""

    def __init__(self, seconds: float, on_deadline: Any) -> None:
        self.seconds = seconds
        self.on_deadline = on_deadline
        self.requested = threading.Event()

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handler)

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested.is_set():
            return
        self.requested.set()
        logger.warning("SIGTERM: draining at the next step boundary (at most %.0fs)", self.seconds)
        timer = threading.Timer(self.seconds, self.on_deadline)
        timer.daemon = True
        timer.start()


class Stream:
    """One stream of the compiled graph for an attempt holding the run (its context, recorder and beat)."""

    def __init__(
        self,
        pool: store.Conn,
        ctx: context.RunContext,
        recorder: steps.StepRecorder,
        beat: heartbeat.WorkerBeat,
        drain: Drain,
        meter: budget.Meter | None = None,
    ) -> None:
        self.pool = pool
        self.meter = meter  # spec.budget: attached to every model call of the stream
        self.ctx = ctx
        self.steps = recorder
        self.beat = beat
        self.drain = drain
        # The graph's values once a stream ended with nothing left to run (its last checkpoint event named
        # no next task): the state LangGraph would read back from the saver, without reading it back.
        self.finished_values: Any = None
        # With finished_values: the step events (and current step) still unrecorded, for the outcome's own
        # statement to carry (runner: store.finish_attempt), one round trip fewer after the last step.
        self.last_steps: steps.Batch = ([], None)

    def run(
        self, run: store.Run, compiled: Any, config: RunnableConfig, start: Any, resumed: str | None
    ) -> bool:
        """Run the graph, recording step events; True when stopped by a drain at a step boundary."""
        succeeded = False
        try:
            with context.activate(self.ctx):
                token = budget.activate(self.meter) if self.meter is not None else None
                try:
                    drained = self._consume(run, compiled, config, start, resumed)
                finally:
                    if token is not None:
                        budget.deactivate(token)
            succeeded = not drained and self.ctx.stop is None and self.finished_values is not None
            return drained
        finally:
            try:  # the stream has ended: every write it made is done
                if succeeded:
                    self.last_steps = self.steps.take_final()
                else:
                    self.steps.flush(final=True)
            except Exception:  # history only: never mask the outcome (e.g. Postgres gone)
                logger.exception("could not record the last step events")

    def record_last_steps(self) -> None:
        """The run finished but its outcome is not written (the attempt was stopped after its stream ended):
        ``last_steps`` in a statement of their own."""
        batch, self.last_steps = self.last_steps, ([], None)
        try:
            self.steps.write_taken(batch)
        except Exception:  # history only: never mask the stop
            logger.exception("could not record the last step events")

    def _consume(
        self, run: store.Run, compiled: Any, config: RunnableConfig, start: Any, resumed: str | None
    ) -> bool:
        tasks: dict[str, tuple[str, float, datetime.datetime]] = {}  # task id -> (name, t0, started_at)
        step_tasks: list[tuple[str, float, datetime.datetime]] = []
        last_result = 0.0
        for event in compiled.stream(start, config, durability=run.durability, stream_mode="debug"):
            kind, payload, now = event.get("type"), event.get("payload") or {}, time.monotonic()
            if kind == "task":
                tasks[payload["id"]] = (payload["name"], now, datetime.datetime.now(datetime.UTC))
            elif kind == "task_result":
                done = tasks.pop(str(payload.get("id")), None)
                if done is not None:
                    step_tasks.append(done)
                last_result = now
            elif kind == "checkpoint":
                faults.hit("after_checkpoint")
                self.finished_values = None if payload.get("next") else payload.get("values")
                if resumed is not None:
                    store.mark_approval_resumed(self.pool, run_id=self.ctx.run_id, approval_id=resumed)
                    resumed = None
                if step_tasks:
                    self._step_event(event, step_tasks, last_result, payload)
                    step_tasks = []
                self.steps.flush(final=False)
                if self.drain.requested.is_set():
                    return True
            if self.ctx.stop is not None:
                return False
        return False

    def _step_event(
        self,
        event: dict[str, Any],
        step_tasks: list[tuple[str, float, datetime.datetime]],
        last_result: float,
        payload: dict[str, Any],
    ) -> None:
        number = event.get("step")
        names = sorted({name for name, _, _ in step_tasks})
        step_name = ",".join(names)
        first = min(t0 for _, t0, _ in step_tasks)
        effect_keys: list[str] = []
        for name in names:
            effect_keys += self.ctx.take_effect_keys(f"{name}:{number}")
        checkpoint_id = (payload.get("config") or {}).get("configurable", {}).get("checkpoint_id")
        self.beat.step = f"{step_name}:{number}"
        self.steps.add(  # recorded once the saver has timed this checkpoint's write (agent_worker/steps.py)
            step=f"{step_name}:{number}",
            checkpoint_id=checkpoint_id,
            started_at=min(s for _, _, s in step_tasks),
            duration_seconds=max(0.0, last_result - first),
            effect_keys=effect_keys,
            current_step=step_name,  # written with the events, one statement (agent_worker/steps.py)
        )
