"""What test graphs share: the shape most have (START -> one step after another -> END), and a pause."""

from __future__ import annotations

import itertools
import time
import urllib.error
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.typing import StateT

from agent_worker import effects

T = TypeVar("T")


def chain(schema: type[StateT], **steps: Callable[..., Any]) -> StateGraph[StateT]:
    """An uncompiled graph of ``schema`` running ``steps`` (node name = keyword) in their order."""
    graph: StateGraph[StateT] = StateGraph(schema)
    for name, step in steps.items():
        graph.add_node(name, step)
    names = [START, *steps, END]
    for a, b in itertools.pairwise(names):
        graph.add_edge(a, b)
    return graph


def react_loop(model: Callable[..., Any], tools: Sequence[Any]) -> StateGraph[MessagesState]:
    """The LangGraph tutorial's ReAct shape: ``agent`` (the model) -> ``tools`` (one ToolNode task runs a
    turn's calls) -> ``agent``, until the model asks for no tool."""
    graph: StateGraph[MessagesState] = StateGraph(MessagesState)
    graph.add_node("agent", model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph


def pause(state: Mapping[str, Any], step: str) -> None:
    """Wait ``state["pause"][step]`` seconds (none when not given), heartbeating as a long node would: the
    tests stop, kill or steer a run while it is inside ``step``."""
    deadline = time.monotonic() + float((state.get("pause") or {}).get(step, 0))
    while (left := deadline - time.monotonic()) > 0:
        effects.heartbeat({"step": step, "left": round(left, 1)})
        time.sleep(min(0.5, left))


def unless_404(read: Callable[[], T]) -> T | None:
    """``read()`` of a provider's record, or None when it answers 404 (no such effect: it never happened)."""
    try:
        return read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
