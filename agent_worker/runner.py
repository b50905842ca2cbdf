"""One attempt of a run: admission read → Lease → graph with the fenced saver → outcome → exit code.

Exit codes (docs/design.md): 0 succeeded · 1 failed · 2 config/usage · 10 parked · 11 drained · 12 fenced ·
13 needs a human · 14 lost to infrastructure (Postgres went away; retried, never ``GraphFailed``) · 15 this
code does not run against the schema (``agentrun_core.compat``; checked first, the run waits). Postgres
(``agentrun_runs.status``) is the truth; the exit code tells people and the pod runtime what happened.

Checkpoints go through ``checkpointer.FencedSaver``: every write is fenced by the attempt's epoch, and "the
latest checkpoint" is the run's head (written fenced), never the newest id. Where the graph starts from is
``resume``'s rule; streaming it step by step (step events, the SIGTERM drain) is ``drive``'s. This module
holds the attempt's life around them: the Lease and the claim first, then exactly one exit — park, finish,
fenced, needs a human, drained, or lost to infrastructure — each recorded as the attempt's end.
"""

from __future__ import annotations

import json
import logging
import os
import traceback
from typing import Any

from langchain_core.runnables import RunnableConfig

from agent_worker import budget as budget_mod
from agent_worker import checkpointer as checkpointer_mod
from agent_worker import context, drive, graphs, heartbeat, infra, leasing, resume, steps
from agent_worker import settings as settings_mod
from agentrun_core import budget, compat, errors, faults, keys, results, store
from agentrun_core.api import protocol
from agentrun_core.api import status as api_status
from agentrun_core.store import connect

logger = logging.getLogger(__name__)

# Status found at startup → exit code, for a worker started on a run that needs no work.
_STATUS_EXIT = {
    "succeeded": protocol.EXIT_SUCCEEDED,
    "failed": protocol.EXIT_FAILED,
    "cancelled": protocol.EXIT_SUCCEEDED,
    "needs_human": protocol.EXIT_NEEDS_HUMAN,
}


def _json(value: Any) -> Any:
    """JSON for a prompt: non-JSON leaves (messages, objects) become their repr."""
    return json.loads(json.dumps(value, default=repr))


def _result(values: Any) -> Any:
    """The run's result as it is kept (``agentrun_core.results``: whole when small, else summarised; the
    whole is the last checkpoint's state), as JSON: non-JSON leaves (messages, objects) become their repr."""
    return results.summarise(values, default=repr)


def _error_text(exc: BaseException) -> str:
    lines = traceback.format_exception(exc)
    text = f"{type(exc).__name__}: {exc}\n" + "".join(lines[-12:])
    return text[-8000:]


def _worker_error(exc: BaseException) -> errors.ControlSignal | None:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, errors.Fenced | errors.NeedsHuman):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


class Attempt:
    def __init__(self, settings: settings_mod.WorkerSettings, pool: connect.Pool) -> None:
        self.settings = settings
        self.pool = pool
        self.run_id = settings.run_id
        self.holder: leasing.Holder | None = None
        self.epoch = 0
        self.ctx: context.RunContext | None = None
        self.beat: heartbeat.WorkerBeat | None = None
        self.drain = drive.Drain(settings.drain_seconds, self._drain_deadline)
        self.steps: steps.StepRecorder | None = None
        self.meter: budget_mod.Meter | None = None  # spec.budget's counting (None: no budget)

    # --- lifecycle -------------------------------------------------------------------------------------

    def run(self) -> int:
        self.drain.install()
        run = store.get_run(self.pool, self.run_id)
        if run is None:
            raise errors.RunNotFound(f"run {self.run_id} is not admitted (no agentrun_runs row)")
        faults.hit("after_admission_read")
        if run.status in _STATUS_EXIT:
            logger.info("run %s is %s: nothing to do", self.run_id, run.status)
            return _STATUS_EXIT[run.status]
        # The Lease first, the graph after: loading may retry a transient import for seconds, and a load
        # failure fails the run — a write that, like every write on the failure path, must carry our epoch
        # so that a worker deposed meanwhile is refused (finish_run is fenced in its statement).
        code = self._acquire(run)
        if code is not None:
            return code
        try:
            try:
                graph_obj = graphs.load(run.graph)
            except errors.GraphLoadError as exc:
                return self._fail(str(exc), "GraphLoadError")
            return self._execute(run, graph_obj)
        except BaseException as exc:
            return self._on_error(exc)

    def _acquire(self, run: store.Run) -> int | None:
        self.beat = heartbeat.WorkerBeat(self.pool, self.run_id, self.settings.attempt, lambda: self.epoch)
        self.holder = leasing.make_holder(self.settings, on_lost=self._lease_lost, on_renewed=self.beat)
        from agentrun_core import lease

        try:
            self.epoch = self.holder.acquire(self.settings.lease_wait_seconds, min_epoch=run.lease_epoch + 1)
        except lease.LeaseHeld as exc:
            logger.error("lease held by another worker: %s", exc)
            return protocol.EXIT_FENCED
        except lease.LeaseError as exc:
            logger.error("could not acquire the lease: %s", exc)
            return protocol.EXIT_FAILED
        try:  # the claim and this attempt's row (its pod, its epoch): one statement
            store.claim_attempt(
                self.pool,
                run_id=self.run_id,
                epoch=self.epoch,
                holder=self.settings.pod_name,
                attempt=self.settings.attempt,
            )
        except errors.Fenced as exc:
            logger.error("%s", exc)
            return protocol.EXIT_FENCED
        self.holder.start()
        faults.hit("after_lease_acquired")
        return None

    def _lease_lost(self, reason: str) -> None:
        if self.ctx is not None:
            self.ctx.set_stop(errors.Fenced(f"lease lost: {reason}"))

    def _write_refused(self, exc: errors.ControlSignal) -> None:
        """A checkpoint write was refused (fenced) or lost Postgres, maybe on a background thread: stop."""
        if self.ctx is not None:
            self.ctx.set_stop(exc)

    def _drain_deadline(self) -> None:
        logger.warning("drain deadline reached inside a step: exiting 11 now (the step re-runs)")
        self._end_attempt("drained", "drain deadline inside a step")
        if self.holder is not None:
            self.holder.release()
        os._exit(protocol.EXIT_DRAINED)

    def _end_attempt(self, outcome: str, detail: str | None = None) -> None:
        try:
            store.record_attempt_end(
                self.pool, run_id=self.run_id, attempt=self.settings.attempt, outcome=outcome, detail=detail
            )
        except Exception:
            logger.exception("could not record the attempt's end")

    def _release(self) -> None:
        if self.holder is not None:
            try:
                self.holder.release()
            except Exception:
                logger.exception("lease release failed (it will expire)")

    # --- the graph -------------------------------------------------------------------------------------

    def _execute(self, run: store.Run, graph_obj: Any) -> int:
        assert self.holder is not None
        self.ctx = context.RunContext(
            conn=self.pool,
            run_id=self.run_id,
            attempt=self.settings.attempt,
            epoch=self.epoch,
            retry_generation=run.retry_generation,
            may_act=self.holder.may_act,
            lease_check=self.holder.check,
            key_version=run.key_version,
        )
        checkpointer = checkpointer_mod.FencedSaver(
            self.pool, run_id=self.run_id, epoch=self.epoch, on_refused=self._write_refused
        )
        self.steps = steps.StepRecorder(
            self.pool,
            run_id=self.run_id,
            attempt=self.settings.attempt,
            saver=checkpointer,
            epoch=self.epoch,
            batch_seconds=steps.BATCH_SECONDS.get(run.durability, 0.0),
            on_lost=self._write_refused,
        )
        checkpointer.rider = self.steps.ride  # step events ride on the next checkpoint write
        try:
            compiled = graphs.compile_graph(graph_obj, checkpointer, ref=run.graph)
        except errors.GraphLoadError as exc:
            return self._fail(str(exc), "GraphLoadError")
        config: RunnableConfig = {"configurable": {"thread_id": self.run_id}}
        try:
            spec_budget = budget.Budget.from_json(json.loads(self.settings.budget or "null"))
        except (ValueError, budget.BudgetError) as exc:
            return self._fail(f"spec.budget cannot be read: {exc}", "InvalidSpec")
        if spec_budget.active:
            self.meter = budget_mod.Meter(self.ctx, spec_budget)
            self.meter.load()
        start = resume.start_input(self.pool, run, compiled, checkpointer, config)
        if isinstance(start, resume.Park):
            return self._park(run, compiled, config)
        if isinstance(start, resume.Done):
            return self._succeed(start.values)
        if isinstance(start, resume.Failed):
            return self._fail(start.error, start.reason)
        assert self.beat is not None
        stream = drive.Stream(self.pool, self.ctx, self.steps, self.beat, self.drain, self.meter)
        drained = stream.run(run, compiled, config, start[0], start[1])
        if self.meter is not None and self.meter.refused is not None and self.ctx.stop is None:
            # Graph code swallowed BudgetExceeded (a tool node made it a message): the run ends anyway.
            return self._fail(self.meter.refused, api_status.BUDGET_EXCEEDED)
        if self.ctx.stop is not None:
            stream.record_last_steps()  # stopped after a finished stream: no outcome to carry them
            raise self.ctx.stop
        if drained:
            store.finish_run(
                self.pool, run_id=self.run_id, epoch=self.epoch, status="running", reason="drained (SIGTERM)"
            )
            self._release()
            self._end_attempt("drained")
            return protocol.EXIT_DRAINED
        if stream.finished_values is not None:  # the last step left nothing to run: done, as streamed
            return self._succeed(stream.finished_values, stream.last_steps)
        state = compiled.get_state(config)
        if state.interrupts:
            return self._park(run, compiled, config)
        if state.tasks:  # tasks, not ``next``: a finished task's unapplied writes are pending work too
            pending = tuple(t.name for t in state.tasks)
            return self._fail(f"graph stopped with pending nodes {pending} and no interrupt", "Stopped")
        return self._succeed(state.values)

    # --- outcomes --------------------------------------------------------------------------------------

    def _park(self, run: store.Run, compiled: Any, config: RunnableConfig) -> int:
        state = compiled.get_state(config)
        interrupt = resume.single_interrupt(state.interrupts)
        approval_id = keys.approval_id(self.run_id, interrupt.id)
        approval = store.record_approval(
            self.pool,
            run_id=self.run_id,
            epoch=self.epoch,
            approval_id=approval_id,
            interrupt_id=interrupt.id,
            prompt=_json(interrupt.value),
            reason=f"waiting for approval {approval_id}",
        )
        if approval.status != "pending":
            # The graph asks again under an id that was already decided (a second interrupt() sharing the
            # first one's id, langgraph < 1.2.20): parking would hand it the earlier decision. Never.
            raise errors.ApprovalReused(
                f"interrupt {interrupt.id} asks for approval {approval_id}, which is already "
                f"{approval.status} (by {approval.decided_by}): refusing to reuse a decision for another "
                "gate (is langgraph >= 1.2.20 installed? see constraints.txt)"
            )
        faults.hit("while_parking")
        self._release()
        self._end_attempt("parked", approval_id)
        logger.info("run %s parked on approval %s", self.run_id, approval_id)
        return protocol.EXIT_PARKED

    def _succeed(self, values: Any, last_steps: steps.Batch = ([], None)) -> int:
        events, current_step = last_steps
        self._finish("succeeded", result=_result(values), step_events=events, current_step=current_step)
        return protocol.EXIT_SUCCEEDED

    def _fail(self, error: str, reason: str) -> int:
        self._finish("failed", detail=reason, error=error, reason=reason)
        logger.error("run %s failed: %s", self.run_id, error.splitlines()[0] if error else "")
        return protocol.EXIT_FAILED

    def _finish(self, status: str, **fields: Any) -> None:
        """The run's final ``status`` (this attempt's outcome too), this attempt's end and its last step
        events in one statement (``store.finish_attempt``), then the Lease given back."""
        store.finish_attempt(
            self.pool,
            run_id=self.run_id,
            epoch=self.epoch,
            attempt=self.settings.attempt,
            status=status,
            outcome=status,
            **fields,
        )
        self._release()

    def _on_error(self, exc: BaseException) -> int:
        found = _worker_error(exc) or (self.ctx.stop if self.ctx is not None else None)
        if found is None or isinstance(found, infra.InfraLost):
            lost = infra.cause(exc) or found
            if lost is not None:
                return self._lost_to_infra(infra.lost(lost, "the attempt"))
        if isinstance(found, errors.Fenced):
            logger.error("fenced: %s", found)
            self._end_attempt("fenced", str(found))  # attempts are not fenced: history, not decisions
            return protocol.EXIT_FENCED
        if isinstance(found, errors.NeedsHuman):
            try:
                store.finish_run(
                    self.pool,
                    run_id=self.run_id,
                    epoch=self.epoch,
                    status="needs_human",
                    error=str(found),
                    reason="EffectOutcomeUnknown",
                )
            except errors.Fenced:
                return protocol.EXIT_FENCED
            self._release()
            self._end_attempt("needs_human", str(found))
            logger.error("needs a human: %s", found)
            return protocol.EXIT_NEEDS_HUMAN
        if not isinstance(exc, Exception):
            raise exc  # KeyboardInterrupt, SystemExit
        refused = self.meter.refused if self.meter is not None else None
        try:
            if refused is not None:  # whatever the node made of BudgetExceeded, that is why it ended
                return self._fail(refused, api_status.BUDGET_EXCEEDED)
            return self._fail(_error_text(exc), type(exc).__name__)
        except errors.Fenced:
            return protocol.EXIT_FENCED
        except Exception as failed:
            if infra.cause(failed) is None:
                raise
            return self._lost_to_infra(infra.lost(failed, "recording the failure"))

    def _lost_to_infra(self, lost: infra.InfraLost) -> int:
        """Postgres went away under us: not the graph's failure. Leave the run ``running`` (nothing to write,
        maybe nowhere to write it), give the Lease back so the next attempt starts at once, exit 14."""
        logger.error("attempt lost to infrastructure (the operator retries it): %s", lost)
        self._release()
        infra.record_lost(self.pool, run_id=self.run_id, attempt=self.settings.attempt, lost=lost)
        return protocol.EXIT_INFRA


def _check_schema(pool: connect.Pool) -> None:
    """Refuse a schema this code does not run against (agentrun_core.compat), before anything is read or
    written for the run: exit 15 and the operator keeps the run waiting until an upgrade makes them match."""
    verdict = compat.judge(store.schema_compat_level(pool))
    if not verdict.compatible:
        raise errors.WorkerIncompatible(f"{verdict.problem}: {verdict.message}")


def run(settings: settings_mod.WorkerSettings) -> int:
    pool = connect.open_pool(
        settings.dsn,
        name=f"agentrun-worker-{settings.run_id}",
        max_size=settings.pool_max_size,
        planned_once=True,
    )
    try:
        _check_schema(pool)
        return Attempt(settings, pool).run()
    except Exception as exc:  # before the Lease (admission read, claim): nothing to release
        if infra.cause(exc) is None:
            raise
        logger.error("attempt lost to infrastructure before it ran: %s", infra.lost(exc, "startup"))
        return protocol.EXIT_INFRA
    finally:
        pool.close()
