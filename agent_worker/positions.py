"""Where an effect happens: the full, replay-stable step identity of the calling task, and occurrences.

Rule: an effect's position is (step identity, action, occurrence) and must be the same on every replay of
the step, whatever process replays it and whatever LangGraph task ids it gets.

Inside a subgraph LangGraph's task metadata names only the innermost node and step: the parent's step and
push index are gone (checked on langgraph 1.2: a subgraph task's metadata has ``langgraph_step``,
``langgraph_node``, ``langgraph_path`` of its own level and a ``langgraph_checkpoint_ns`` of
``parent:<task id>|node:<task id>``; task ids hash checkpoint ids, which change when a lost checkpoint is
re-made). So a callback handler (``Tracker``), attached to every LangGraph run started while a run context
is active (``langchain_core``'s configure hook, inherited by subgraph runs and by subgraphs invoked from
inside a node), sees each task start with its own metadata and maps its checkpoint namespace to a stable
identity: the parent's identity + ``/`` + ``node:step[:push<idx>]``.

A subgraph invoked several times from inside one node gets LangGraph's invocation counter in its namespace
(``node:<id>|1|leaf:<id>`` for the second call): its identity is ``node:3#1/leaf:1``, distinct and stable.

Occurrences count calls of one action per identity within one execution of the top-level step. A top-level
task starting (a replay of its step, also in the same process) or any task starting again under the same
namespace (a LangGraph ``RetryPolicy`` retry) restarts the counts of its subtree, so the re-execution
repeats its keys; other nested executions under one identity keep counting, so they get distinct keys.

Key format v3 (``scoped``): what the checkpoint holds identifies a tool call, not arrival order. The tracker
also sees every tool run start (``on_tool_start``: LangChain's ``BaseTool.run``/``arun`` pass the model's
``tool_call_id``, and run the tool's body under a child callback manager whose ``parent_run_id`` is the tool
run). An effect walks up from its own run to the nearest enclosing tool run WITH an id inside the same task
(a tool called by a tool without an id inherits the enclosing call's space): its identity is
``<task identity>/call#<i>``, the call's index in the AI message of the task's input that asked for it (so a
model step re-run after a lost checkpoint, which gives its calls new ids, still finds them), or
``<task identity>/call:<tool_call_id>`` when the input does not hold that message. A subgraph invoked inside
a tool call is named by that call instead of LangGraph's invocation counter ``|<n>|`` (the order in which
parallel calls reached ``invoke``).
"""

from __future__ import annotations

import collections
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

from agent_worker import hooks
from agentrun_core import keys

_NS_KEY = "langgraph_checkpoint_ns"


class Tracker(BaseCallbackHandler):
    """Task-start observer (one per run context). Thread-safe: LangGraph runs tasks in threads."""

    raise_error = False  # a bug here must not fail graph code; identity() then falls back visibly

    def __init__(self, *, scoped: bool = False) -> None:
        self.scoped = scoped  # key format v3: tool calls name their effects and subgraphs (module doc)
        self._lock = threading.Lock()
        self._runs: dict[uuid.UUID, str] = {}  # live callback run id -> its checkpoint namespace
        self._parents: dict[uuid.UUID, uuid.UUID | None] = {}  # scoped: live run id -> its parent run id
        self._calls: dict[uuid.UUID, str] = {}  # scoped: live tool run id -> the model's tool_call_id
        self._indexes: dict[
            str, dict[str, int]
        ] = {}  # scoped: task ns -> tool_call_id -> index in its message
        self._ident: dict[str, str] = {}  # task checkpoint namespace -> stable identity
        self._started: set[str] = set()
        self._counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        ns = (metadata or {}).get(_NS_KEY)
        if not isinstance(ns, str) or not ns:
            return
        with self._lock:
            self._runs[run_id] = ns
            if self.scoped:
                self._parents[run_id] = parent_run_id
            if parent_run_id is not None and self._runs.get(parent_run_id) == ns:
                return  # a runnable nested inside the same task (its node, writers, a subgraph's root run)
            try:
                ident = self._resolve(ns, metadata or {}, parent_run_id)
            except LookupError:
                return
            if self.scoped:
                self._indexes[ns] = call_indexes(inputs)
            # A top-level task starting, or any task starting again (a LangGraph retry), executes its step
            # afresh: its positions repeat. A nested task under a new namespace with a known identity is the
            # same subgraph invoked again from inside one node execution: it keeps counting.
            if "|" not in ns or ns in self._started:
                for k in [k for k in self._counts if k[0] == ident or k[0].startswith(ident + "/")]:
                    del self._counts[k]
            self._started.add(ns)

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        ns = (metadata or {}).get(_NS_KEY)
        if not self.scoped or not isinstance(ns, str) or not ns:
            return
        call = kwargs.get("tool_call_id")
        with self._lock:
            self._runs[run_id] = ns  # inside its task: a subgraph invoked by the tool is not a task restart
            self._parents[run_id] = parent_run_id
            if isinstance(call, str) and call:
                self._calls[run_id] = call

    def on_chain_end(self, outputs: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._forget(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._forget(run_id)

    def on_tool_end(self, output: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._forget(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._forget(run_id)

    def _forget(self, run_id: uuid.UUID) -> None:
        with self._lock:
            self._runs.pop(run_id, None)
            self._parents.pop(run_id, None)
            self._calls.pop(run_id, None)

    def _enclosing_call(self, run_id: uuid.UUID | None, ns: str) -> str | None:
        """The nearest enclosing tool call with an id, walking up from ``run_id`` without leaving the task
        ``ns`` (under the lock)."""
        for _ in range(10_000):  # a bound, not a depth anyone reaches: a cycle would be a bug elsewhere
            if run_id is None or self._runs.get(run_id) != ns:
                return None
            call = self._calls.get(run_id)
            if call is not None:
                return call
            run_id = self._parents.get(run_id)
        return None

    def _resolve(self, ns: str, metadata: Mapping[str, Any], parent_run_id: uuid.UUID | None = None) -> str:
        known = self._ident.get(ns)
        if known is not None:
            return known
        own = keys.step_part(metadata)
        parent_ns = ns.rsplit("|", 1)[0] if "|" in ns else ""
        if parent_ns:
            own = f"{self._call_prefix(parent_run_id) or self._prefix(parent_ns)}/{own}"
        self._ident[ns] = own
        return own

    def _call_prefix(self, parent_run_id: uuid.UUID | None) -> str | None:
        """Scoped: a subgraph task started inside a tool call of its calling task is named by that call
        (``<calling task>/call:<id>``), not by LangGraph's invocation counter."""
        if not self.scoped or parent_run_id is None:
            return None
        outer = self._runs.get(parent_run_id)  # the subgraph's root run: in the calling task's namespace
        outer_ident = self._ident.get(outer) if outer is not None else None
        if outer is None or outer_ident is None:
            return None
        call = self._enclosing_call(parent_run_id, outer)
        return f"{outer_ident}/{self._call_part(outer, call)}" if call is not None else None

    def _call_part(self, ns: str, call: str) -> str:
        """``call#<index>``: the call's place in the model message that asked for it, found in the task's
        input — kept when a re-run model step (``exit``/``async`` durability lost its checkpoint) gives the
        calls new ids; ``call:<id>`` when the task's input does not hold that message."""
        index = self._indexes.get(ns, {}).get(call)
        return f"call#{index}" if index is not None else f"call:{call}"

    def _prefix(self, ns: str) -> str:
        """The identity of a namespace prefix: a task seen starting, or ``<prefix>#<n>`` for LangGraph's
        n-th invocation of a subgraph inside one task (a bare counter part, stable across replays)."""
        known = self._ident.get(ns)
        if known is not None:
            return known
        parent, _, last = ns.rpartition("|")
        if last.isdigit() and parent:
            return f"{self._prefix(parent)}#{last}"
        # Only without the tracker attached (no run context when the parent task started): the parent's
        # step is unknown, so say so in the identity rather than silently collide.
        return "/".join(p.split(":", 1)[0] + ":?" for p in ns.split("|"))

    def identity(self, metadata: Mapping[str, Any], run_id: uuid.UUID | None = None) -> str:
        """The calling task's stable identity (``LookupError`` outside a LangGraph node); scoped, with the
        enclosing tool call found from ``run_id`` (the caller's parent run): ``<task>/call:<id>``."""
        ns = metadata.get(_NS_KEY)
        with self._lock:
            if not isinstance(ns, str) or not ns:
                return keys.step_part(metadata)
            ident = self._resolve(ns, metadata)
            call = self._enclosing_call(run_id, ns) if self.scoped else None
            return f"{ident}/{self._call_part(ns, call)}" if call is not None else ident

    def next_occurrence(self, identity: str, action: str) -> int:
        with self._lock:
            n = self._counts[(identity, action)]
            self._counts[(identity, action)] = n + 1
            return n


def call_indexes(value: Any, depth: int = 0) -> dict[str, int]:
    """tool_call_id -> its index in the AI message that asked for it, for every AI message in a task's input
    (a state's ``messages``), or in a list of tool calls handed to the task (``create_agent`` sends each call
    as ``[tool_call]`` to its own task, whose push index is the call's place). A later message wins: a fake
    or careless model may reuse ids across turns, and the newest turn is the one executing."""
    found: dict[str, int] = {}
    if depth > 4:
        return found
    calls = getattr(value, "tool_calls", None)
    if isinstance(calls, list) and getattr(value, "type", None) == "ai":
        for i, call in enumerate(calls):
            ident = call.get("id") if isinstance(call, Mapping) else None
            if isinstance(ident, str) and ident:
                found[ident] = i
    elif isinstance(value, Mapping):
        for v in value.values():
            found.update(call_indexes(v, depth + 1))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            if isinstance(v, Mapping) and v.get("type") == "tool_call" and isinstance(v.get("id"), str):
                found[v["id"]] = i  # calls handed over as a list (create_agent sends each in its own task)
            else:
                found.update(call_indexes(v, depth + 1))
    return found


_hook = hooks.Hook[Tracker]("agentrun_positions")
activate, deactivate = _hook.activate, _hook.deactivate
