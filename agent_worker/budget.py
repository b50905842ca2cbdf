"""Counting model usage against ``spec.budget`` and parking the run at a limit (``agentrun_core.budget``).

A callback handler (``Meter``), attached to every LangChain run started while the run context is active
(``langchain_core``'s configure hook, as ``agent_worker.positions``), sees each chat model call:

* before it (``on_chat_model_start``): the limits are checked. Reached, the handler calls LangGraph's
  ``interrupt()`` with the budget prompt from inside the node, so the run parks on an ordinary approval (the
  same status, CLI, admission policies and authorization rules as a graph's own gate). The human's decision
  comes back through ``interrupt()`` when the node re-runs: approved, the limits are raised and the call goes
  ahead; rejected (or expired), ``BudgetExceeded`` is raised and stays raised (``refused``): the runner ends
  the run ``Failed`` with that reason, whatever graph code did with the exception.
* after it (``on_llm_end``): the answer's ``usage_metadata`` is written to ``agentrun_model_usage`` (one row
  per call, keyed by this attempt's epoch, the task's step identity and the call's index in that task) and
  only then added to the tally. A call whose answer was lost to a kill before that row was written is not
  counted (it was billed); a re-executed call gets its own row (it was billed again).

The tally starts from the rows already written (a kill cannot reset it) and the limits from the spec raised
by every approved budget approval of the run (raises only, so replaying one is a no-op; what a decision
raises is read from the approval's stored prompt, never from a prompt built now, so a stale resume value
can never raise a limit twice).
"""

from __future__ import annotations

import collections
import logging
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

from agent_worker import calls, context, hooks
from agentrun_core import budget, faults, store

logger = logging.getLogger(__name__)


class Meter(BaseCallbackHandler):
    """One per attempt. Thread-safe: LangGraph runs tasks (and their model calls) in threads."""

    raise_error = True  # the interrupt and BudgetExceeded must reach the node
    run_inline = True  # in the node's thread and context: interrupt() needs the task's config

    def __init__(self, ctx: context.RunContext, spec: budget.Budget) -> None:
        self.ctx = ctx
        self.spec = spec
        self.limits: dict[str, int] = dict(spec.limits)
        self.spent = budget.Usage()
        self.calls = 0
        self.refused: str | None = None  # why the run ends BudgetExceeded (sticky)
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()  # task identity -> calls so far
        self._open: dict[uuid.UUID, tuple[str, str, str | None]] = {}  # run id -> (key, step, model)

    def load(self) -> None:
        """The tally and the limits as Postgres has them (at the attempt's start)."""
        self.spent, self.calls = store.model_usage(self.ctx.conn, self.ctx.run_id)
        decided = [
            (a.prompt, a.status, a.payload) for a in store.list_approvals(self.ctx.conn, self.ctx.run_id)
        ]
        self.limits = budget.replay(self.spec, decided)

    # --- callbacks ------------------------------------------------------------------------------------

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: uuid.UUID, metadata: Any = None, **kwargs: Any
    ) -> None:
        self._before(run_id, metadata, kwargs)

    def on_llm_start(
        self, serialized: Any, prompts: Any, *, run_id: uuid.UUID, metadata: Any = None, **kwargs: Any
    ) -> None:
        self._before(run_id, metadata, kwargs)

    def on_llm_end(self, response: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        with self._lock:
            opened = self._open.pop(run_id, None)
        if opened is None:
            return
        key, step, model = opened
        reported = _reported(response)
        if reported is None:
            logger.warning("model call %s reported no usage_metadata: not counted", key)
            return
        model = model or reported[1]
        usage = budget.usage_of(reported[0], self.spec.price_of(model))
        if usage is None:
            return
        if usage.cost_micro == 0 and "cost" in self.limits and self.spec.price_of(model) is None:
            logger.warning("model %r has no price in spec.budget: its calls cost nothing here", model)
        store.record_model_usage(
            self.ctx.conn,
            run_id=self.ctx.run_id,
            call_key=key,
            attempt=self.ctx.attempt,
            step=step,
            model=model,
            usage=usage,
        )
        with self._lock:
            self.spent = self.spent + usage
            self.calls += 1
        faults.hit("after_model_usage")

    def on_llm_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        with self._lock:
            self._open.pop(run_id, None)

    # --- internals ------------------------------------------------------------------------------------

    def _before(self, run_id: uuid.UUID, metadata: Any, kwargs: Mapping[str, Any]) -> None:
        if self.refused is not None:
            raise budget.BudgetExceeded(self.refused)
        md = dict(metadata or {})
        try:
            identity = calls.step(self.ctx, md)
        except LookupError:
            identity = "worker"
        with self._lock:
            n = self._counts[identity]
            self._counts[identity] = n + 1
            self._open[run_id] = (
                f"e{self.ctx.epoch}/{identity}/{n}",
                _top_step(identity),
                _model(md, kwargs),
            )
        faults.hit("before_model_check")
        if self.limits:
            self._check()

    def _check(self) -> None:
        note: str | None = None
        while True:
            with self._lock:
                limits, spent = dict(self.limits), self.spent
            if not budget.reached(limits, spent):
                return
            asked = budget.prompt(self.spec, limits, spent, note)
            value = _interrupt(asked)
            # What this decision raises is read from the prompt Postgres recorded for ITS approval: a resume
            # value LangGraph hands back again (an earlier interrupt of this task) then raises nothing new.
            approval_id = value.get("approval_id") if isinstance(value, Mapping) else None
            recorded = (
                store.get_approval(self.ctx.conn, run_id=self.ctx.run_id, approval_id=str(approval_id))
                if approval_id
                else None
            )
            try:
                raised, note = budget.decide(limits, recorded.prompt if recorded else asked, value)
            except budget.BudgetExceeded as exc:
                self.refused = str(exc)
                raise
            with self._lock:
                self.limits = {k: max(v, self.limits.get(k, 0)) for k, v in raised.items()}
            logger.info("budget limits now %s (approval %s)", self.limits, approval_id)


def _interrupt(asked: dict[str, Any]) -> Any:
    from langgraph.types import interrupt

    return interrupt(asked)


def _top_step(identity: str) -> str:
    """The top-level step (``node:step``) of a task identity, as the trace names steps."""
    return ":".join(identity.split("/", 1)[0].split(":")[:2])


def _model(md: Mapping[str, Any], kwargs: Mapping[str, Any]) -> str | None:
    params = kwargs.get("invocation_params") or {}
    for value in (md.get("ls_model_name"), params.get("model"), params.get("model_name")):
        if isinstance(value, str) and value:
            return value
    return None


def _reported(response: Any) -> tuple[dict[str, int], str | None] | None:
    """The summed ``usage_metadata`` of a call's generations and the model name the answer gave."""
    total: collections.Counter[str] = collections.Counter()
    model: str | None = None
    found = False
    for generations in getattr(response, "generations", None) or ():
        for generation in generations:
            message = getattr(generation, "message", None)
            usage = getattr(message, "usage_metadata", None)
            if isinstance(usage, Mapping):
                found = True
                for field in ("input_tokens", "output_tokens", "total_tokens"):
                    total[field] += int(usage.get(field) or 0)
            meta = getattr(message, "response_metadata", None)
            if isinstance(meta, Mapping) and model is None:
                name = meta.get("model_name") or meta.get("model")
                model = str(name) if name else None
    return (dict(total), model) if found else None


class _Expected(logging.Filter):
    """LangChain logs every exception a callback raises as "Error in Meter.<event> callback" before raising
    it; the interrupt that parks the run and BudgetExceeded are no errors of the handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        expected = "GraphInterrupt" in text or "BudgetExceeded" in text
        return not (text.startswith("Error in Meter.") and expected)


logging.getLogger("langchain_core.callbacks.manager").addFilter(_Expected())

_hook = hooks.Hook[Meter]("agentrun_budget")
activate, deactivate = _hook.activate, _hook.deactivate
