"""P7's agents: a LangChain 1.x ``create_agent`` agent as users write it, in three variants of its one tool.

``agent_<n>`` / ``agentbare_<n>`` / ``agentpair_<n>``: ``n`` turns, each a model call asking for
``CALLS_PER_TURN`` tool calls at once (``create_agent`` runs them as parallel ``Send`` tasks), then a final
answer. The tool ``notify`` is the same in all three but for how it reaches its (no-op, in-process) provider:

* ``agent``: through agentrun's ledger (``effects.tool``: reserve committed before the call, record after);
* ``agentbare``: with a raw idempotency key, derived from the thread and the tool call's id (what a user of
  bare LangGraph passes to a provider that dedupes by key) — no database write of its own;
* ``agentpair``: the raw key plus one raw INSERT and one raw UPDATE, each its own commit (``PAIR_POOL``): the
  floor of any ledger that commits before the call and after it (as ``bench.graphs:pair_<n>``).

The model marks its start in ``bench.graphs.MARKS``: from the first model call to the final answer's are
``n`` whole turns (model step + the turn's tool tasks + their checkpoints).
"""

from __future__ import annotations

import uuid
from typing import Any

from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool

from agent_worker import effects, scripted
from bench import graphs

CALLS_PER_TURN = 2
PROVIDER_KEYS: list[str] = []  # what the no-op provider was handed (kept only to look like a provider)


class TurnsModel(scripted.ScriptedChatModel):
    """Turn k < turns asks for ``CALLS_PER_TURN`` ``notify`` calls (ids ``call_<k>_<j>``), then answers:
    a function of the messages alone, so a replay asks for the same calls."""

    turns: int = 1

    @property
    def _llm_type(self) -> str:
        return "bench-turns"

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        graphs._mark("model")
        turn = sum(isinstance(m, AIMessage) for m in messages)
        if turn < self.turns:
            calls = [
                {"name": "notify", "args": {"to": f"u{turn}-{j}"}, "id": f"call_{turn}_{j}"}
                for j in range(CALLS_PER_TURN)
            ]
            return AIMessage(content="", tool_calls=calls)
        return AIMessage(content="all notified")


@effects.tool(name="bench_notify", dedupes_by_key=True)
def _notify_effect(call: effects.Call, *, to: str) -> str:
    PROVIDER_KEYS.append(call.idempotency_key)
    return f"notified {to}"


def _raw_key(runtime: ToolRuntime) -> str:
    thread = str(runtime.config.get("configurable", {}).get("thread_id", ""))
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{thread}/{runtime.tool_call_id}"))


def _tool(kind: str) -> Any:
    @tool
    def notify(to: str, runtime: ToolRuntime) -> str:
        """Notify someone."""
        if kind == "agent":
            return _notify_effect(to=to)
        key = _raw_key(runtime)
        if kind == "agentpair":
            with graphs.PAIR_POOL.connection() as conn:
                graphs.raw_commits(conn, key, pair=True)
        PROVIDER_KEYS.append(key)
        return f"notified {to}"

    return notify


def _parse(name: str) -> tuple[str, int]:
    kind, _, count = name.rpartition("_")
    if not count.isdigit() or kind not in ("agent", "agentbare", "agentpair"):
        raise AttributeError(f"bench.agents has no agent {name!r} (agent_N, agentbare_N, agentpair_N)")
    return kind, int(count)


def build(name: str) -> Any:
    """``agent_20`` → the compiled agent (no checkpointer: the worker or the benchmark binds one)."""
    kind, turns = _parse(name)
    return create_agent(model=TurnsModel(turns=turns), tools=[_tool(kind)])


def __getattr__(name: str) -> Any:
    # graphs.load() resolves ``bench.agents:agent_20`` with getattr: each name is a factory, built once per
    # attempt as a user's would be (the name is checked now: a bad one is an AttributeError).
    if name.startswith("__"):
        raise AttributeError(name)
    _parse(name)
    return lambda: build(name)
