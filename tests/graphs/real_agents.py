"""Agents as LangChain 1.x users write them, run by a real worker: parallel tool calls, nested effects.

``react``: the LangGraph tutorial's ReAct graph (``ToolNode`` + ``tools_condition``) with a deterministic fake
chat model asking for several tool calls at once (``TURNS``, ids fixed by the model). ``ToolNode`` runs one
turn's calls in parallel threads inside ONE task; each tool drafts its note (the order gate below, then a
jitter) and posts it through an agentrun effect to the HTTP provider (``AGENTRUN_TEST_HTTP_URL``), the body
naming the call, so the provider counts deliveries per tool call.

``AGENTRUN_TEST_ORDER`` = ``forward`` / ``reverse``: the order in which one turn's calls reach their effect
(each waits, bounded, for the calls before it in that order): a resumed attempt can take the other order.

``react_helpers``: the same shape, each tool call invoking a helper subgraph (a subagent called as a tool)
whose node posts a report.

``nested``: an effect whose body calls another effect, then a later effect in the same node.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool
from langgraph.graph import MessagesState, StateGraph

from agent_worker import effects
from agent_worker.scripted import ScriptedChatModel
from tests.graphs import effect_graph
from tests.support.graphs import chain, react_loop

TURNS: tuple[tuple[str, ...], ...] = (("ann", "bob", "cy"), ("dee", "eve"))


class ScriptedModel(ScriptedChatModel):
    """Turn n (the n-th model call of the conversation, counted from its AI messages) asks for the calls of
    ``turns[n]`` of ``tool`` at once, ids ``call_<arg>``; after the last turn it answers. Deterministic on
    every replay."""

    turns: tuple[tuple[str, ...], ...] = TURNS
    tool: str = "send_note"
    arg: str = "to"

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        if turn < len(self.turns):
            calls = [{"name": self.tool, "args": {self.arg: a}, "id": f"call_{a}"} for a in self.turns[turn]]
            message = AIMessage(content="", tool_calls=calls)
        else:
            message = AIMessage(content="all notes sent")
        return message


_gate = threading.Condition()
_reached: set[str] = set()


def reset_gate() -> None:
    """Forget which calls reached their effect (a replay in the same process)."""
    with _gate:
        _reached.clear()


def _wait_turn(to: str, turns: tuple[tuple[str, ...], ...] = TURNS) -> None:
    """Wait (at most 20 s) until the calls before ``to`` in this attempt's order have posted."""
    (turn,) = [t for t in turns if to in t]
    order: Sequence[str] = (
        turn if os.environ.get("AGENTRUN_TEST_ORDER", "forward") == "forward" else turn[::-1]
    )
    before = set(order[: order.index(to)])
    with _gate:
        _gate.wait_for(lambda: before <= _reached, timeout=20)


def _reached_effect(to: str) -> None:
    with _gate:
        _reached.add(to)
        _gate.notify_all()


@effects.tool(name="post_note", dedupes_by_key=True, lookup=effect_graph.find_charge)
def post_note(call: effects.Call, *, to: str, text: str) -> Any:
    return effect_graph._http(
        "POST",
        f"{os.environ['AGENTRUN_TEST_HTTP_URL']}/effects",
        {"to": to, "text": text},
        {"Idempotency-Key": call.idempotency_key},
    )


@tool
def send_note(to: str) -> str:
    """Send a short note to someone."""
    _wait_turn(to)
    effect_graph._jitter()  # the model drafting the note
    try:
        sent = post_note(to=to, text=f"a note for {to}")
    finally:
        _reached_effect(to)
    return f"sent to {sent['request']['to']}"


def agent(state: MessagesState) -> dict[str, Any]:
    return {"messages": [ScriptedModel().invoke(state["messages"])]}


def build_react() -> StateGraph[MessagesState]:
    return react_loop(agent, [send_note])


react = build_react()


HELP_TURNS: tuple[tuple[str, ...], ...] = (("pricing", "refunds", "shipping"),)


class Report(MessagesState, total=False):
    topic: str
    filed: Any


def file_report(state: Report) -> dict[str, Any]:
    topic = state["topic"]
    _wait_turn(topic, HELP_TURNS)
    effect_graph._jitter()
    try:
        filed = post_note(to=topic, text=f"a report on {topic}")
    finally:
        _reached_effect(topic)
    return {"filed": filed["request"]}


def _helper() -> Any:
    return chain(Report, file_report=file_report).compile()


helper = _helper()


@tool
def ask_helper(topic: str) -> str:
    """Ask the helper agent to file a report on a topic (a subagent called as a tool)."""
    out = helper.invoke({"topic": topic, "messages": []})
    return f"filed {out['filed']['to']}"


def helpers_agent(state: MessagesState) -> dict[str, Any]:
    model = ScriptedModel(turns=HELP_TURNS, tool="ask_helper", arg="topic")
    return {"messages": [model.invoke(state["messages"])]}


def build_react_helpers() -> StateGraph[MessagesState]:
    return react_loop(helpers_agent, [ask_helper])


react_helpers = build_react_helpers()


@effects.tool(name="notify", dedupes_by_key=True, lookup=effect_graph.find_charge)
def notify(call: effects.Call, *, what: str) -> Any:
    return effect_graph._http(
        "POST",
        f"{os.environ['AGENTRUN_TEST_HTTP_URL']}/effects",
        {"notify": what},
        {"Idempotency-Key": call.idempotency_key},
    )


@effects.tool(name="refund", dedupes_by_key=True, lookup=effect_graph.find_charge)
def refund(call: effects.Call, *, cents: int) -> Any:
    notify(what="refund issued")  # an effect inside an effect
    return effect_graph._http(
        "POST",
        f"{os.environ['AGENTRUN_TEST_HTTP_URL']}/effects",
        {"refund": cents},
        {"Idempotency-Key": call.idempotency_key},
    )


class Log(MessagesState, total=False):
    log: list[Any]


def settle(state: Log) -> dict[str, Any]:
    done = refund(cents=500)
    told = notify(what="customer: your refund is on its way")  # numbered after refund's nested notify
    return {"log": [done["request"], told["request"]]}


def build_nested() -> StateGraph[Log]:
    return chain(Log, settle=settle)


nested = build_nested()


# --- the chaos agents (tests/chaos/test_real_agent_faults.py) --------------------------------------------
# Turn 0 asks for 3 calls at once: a note, a refund settled by a tool whose effect calls another effect, and
# a report filed by a subagent; turn 1 for 2 notes. Every effect posts {"run", "to"}: the provider counts
# deliveries per run and per recipient, each of which must be exactly 1.
CHAOS_SCRIPT: tuple[tuple[tuple[str, str, str], ...], ...] = (
    (("note", "to", "ann"), ("settle_refund", "order", "o1"), ("ask_reporter", "topic", "pricing")),
    (("note", "to", "bob"), ("note", "to", "cy")),
)
CHAOS_DELIVERIES = ("ann", "o1-notice", "o1-refund", "o1-receipt", "pricing", "bob", "cy")


class ChaosModel(ScriptedChatModel):
    """Turn n asks for the calls of ``CHAOS_SCRIPT[n]`` at once (fresh random ids), then answers."""

    @property
    def _llm_type(self) -> str:
        return "scripted-chaos"

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        if turn < len(CHAOS_SCRIPT):
            # Fresh ids on every generation, as a real model's: a model step re-run after a lost checkpoint
            # (``exit``/``async`` durability) asks for the same calls under new ids.
            calls = [
                {"name": n, "args": {a: v}, "id": f"call_{uuid.uuid4().hex[:12]}"}
                for n, a, v in CHAOS_SCRIPT[turn]
            ]
            message = AIMessage(content="", tool_calls=calls)
        else:
            message = AIMessage(content="all done")
        return message


@effects.tool(name="deliver", dedupes_by_key=True, lookup=effect_graph.find_charge)
def deliver(call: effects.Call, *, to: str) -> Any:
    return effect_graph._http(
        "POST",
        f"{effect_graph.provider_url()}/effects",
        {"run": call.run_id, "to": to},
        {"Idempotency-Key": call.idempotency_key},
    )


@effects.tool(name="refund_order", dedupes_by_key=True, lookup=effect_graph.find_charge)
def refund_order(call: effects.Call, *, order: str) -> Any:
    deliver(to=f"{order}-notice")  # an effect inside an effect
    return effect_graph._http(
        "POST",
        f"{effect_graph.provider_url()}/effects",
        {"run": call.run_id, "to": f"{order}-refund"},
        {"Idempotency-Key": call.idempotency_key},
    )


@tool
def note(to: str) -> str:
    """Send a note."""
    effect_graph._jitter()  # drafting
    return f"sent to {deliver(to=to)['request']['to']}"


@tool
def settle_refund(order: str) -> str:
    """Refund an order and send the receipt."""
    effect_graph._jitter()
    refunded = refund_order(order=order)["request"]["to"]
    receipt = deliver(to=f"{order}-receipt")["request"]["to"]  # numbered after the refund's nested notice
    return f"{refunded}, {receipt}"


def _report(state: Report) -> dict[str, Any]:
    effect_graph._jitter()
    return {"filed": deliver(to=state["topic"])["request"]}


def _reporter() -> Any:
    return chain(Report, report=_report).compile()


reporter = _reporter()


@tool
def ask_reporter(topic: str) -> str:
    """Ask the reporter agent to file a report (a subagent called as a tool)."""
    return f"filed {reporter.invoke({'topic': topic, 'messages': []})['filed']['to']}"


CHAOS_TOOLS = [note, settle_refund, ask_reporter]


def _chaos_model_node(state: MessagesState) -> dict[str, Any]:
    return {"messages": [ChaosModel().invoke(state["messages"])]}


def build_chaos_react() -> StateGraph[MessagesState]:
    """The tutorial's ReAct shape: one ToolNode task runs a turn's calls in parallel threads."""
    return react_loop(_chaos_model_node, CHAOS_TOOLS)


chaos_react = build_chaos_react()


def chaos_agent() -> Any:
    """LangChain 1.x ``create_agent``: each tool call of a turn is its own ``Send`` task."""
    from langchain.agents import create_agent

    return create_agent(model=ChaosModel(), tools=CHAOS_TOOLS)
