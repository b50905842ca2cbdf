"""The chaos agents of tests/graphs/real_agents.py written with ``async def``: async tools, an async model
node, an async effect (``await``-ed), an async effect inside an async effect, a sync effect called from an
async tool, and an async subagent called as a tool. LangGraph's sync stream refuses such graphs; the worker
drives them with ``astream`` (agent_worker.drive).

Same script (``real_agents.CHAOS_SCRIPT``: 3 parallel calls, then 2) and same deliveries
(``real_agents.CHAOS_DELIVERIES``), so tests/chaos/test_real_agent_faults.py checks them with the sync ones.
Every tool drafts with ``await asyncio.sleep`` of a random latency (``AGENTRUN_TEST_JITTER_MS``) before its
effect: a turn's calls, run concurrently by ``ToolNode`` (``asyncio.gather`` in one task) or as ``Send``
tasks by ``create_agent``, reach their effects in a different order on every attempt.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from langchain_core.tools import tool
from langgraph.graph import MessagesState, StateGraph

from agent_worker import effects
from tests.graphs import effect_graph, real_agents
from tests.support.graphs import chain, react_loop


async def _draft() -> None:
    """The model drafting: a random latency, awaited (other calls of the turn run meanwhile)."""
    await asyncio.sleep(random.random() * effect_graph.jitter_ms() / 1000)


async def _post(run_id: str, to: str, key: str) -> Any:
    url = f"{effect_graph.provider_url()}/effects"
    body, headers = {"run": run_id, "to": to}, {"Idempotency-Key": key}
    return await asyncio.to_thread(effect_graph._http, "POST", url, body, headers)


@effects.tool(name="deliver_async", dedupes_by_key=True, lookup=effect_graph.find_charge)
async def deliver(call: effects.Call, *, to: str) -> Any:
    return await _post(call.run_id, to, call.idempotency_key)


@effects.tool(name="refund_order_async", dedupes_by_key=True, lookup=effect_graph.find_charge)
async def refund_order(call: effects.Call, *, order: str) -> Any:
    await deliver(to=f"{order}-notice")  # an async effect inside an async effect
    return await _post(call.run_id, f"{order}-refund", call.idempotency_key)


@tool("note")
async def note(to: str) -> str:
    """Send a note."""
    await _draft()
    return f"sent to {(await deliver(to=to))['request']['to']}"


@tool("settle_refund")
async def settle_refund(order: str) -> str:
    """Refund an order and send the receipt."""
    await _draft()
    refunded = (await refund_order(order=order))["request"]["to"]
    await _draft()
    receipt = real_agents.deliver(to=f"{order}-receipt")["request"]["to"]  # sync, after the nested one
    return f"{refunded}, {receipt}"


async def _report(state: real_agents.Report) -> dict[str, Any]:
    await _draft()
    return {"filed": (await deliver(to=state["topic"]))["request"]}


def _reporter() -> Any:
    return chain(real_agents.Report, report=_report).compile()


reporter = _reporter()


@tool("ask_reporter")
async def ask_reporter(topic: str) -> str:
    """Ask the reporter agent to file a report (an async subagent called as a tool)."""
    return f"filed {(await reporter.ainvoke({'topic': topic, 'messages': []}))['filed']['to']}"


TOOLS = [note, settle_refund, ask_reporter]


async def _model(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await real_agents.ChaosModel().ainvoke(state["messages"])]}


def build_react() -> StateGraph[MessagesState]:
    """The tutorial's ReAct shape with async tools: one ToolNode task gathers a turn's calls."""
    return react_loop(_model, TOOLS)


react = build_react()


def agent() -> Any:
    """LangChain 1.x ``create_agent`` with async tools: each call of a turn is its own ``Send`` task."""
    from langchain.agents import create_agent

    return create_agent(model=real_agents.ChaosModel(), tools=TOOLS)
