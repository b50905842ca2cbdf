"""Which graphs the worker drives with ``astream`` (``agent_worker.graphs.needs_async``), and why it must:
LangGraph 1.2's sync stream refuses an async node or an async tool (checked here, on the installed one)."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from agent_worker import graphs
from tests.graphs import async_agents, real_agents

START_CHAT = {"messages": [{"role": "user", "content": "settle everything"}]}


def _one_node(fn: Any) -> Any:
    g: StateGraph[MessagesState] = StateGraph(MessagesState)
    g.add_node("only", fn)
    g.add_edge(START, "only")
    g.add_edge("only", END)
    return g.compile()


async def _async_node(state: MessagesState) -> dict[str, Any]:
    return {}


def _sync_node(state: MessagesState) -> dict[str, Any]:
    return {}


def _sync_model_async_tools() -> Any:
    g: StateGraph[MessagesState] = StateGraph(MessagesState)
    g.add_node("agent", real_agents._chaos_model_node)
    g.add_node("tools", ToolNode(async_agents.TOOLS))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile()


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        (lambda: async_agents.react.compile(), True),  # async tools in a ToolNode, async model node
        (_sync_model_async_tools, True),
        (async_agents.agent, True),  # create_agent with async tools
        (lambda: _one_node(_async_node), True),
        (lambda: _one_node(_one_node(_async_node)), True),  # an async node in a subgraph
        (lambda: real_agents.chaos_react.compile(), False),
        (real_agents.chaos_agent, False),
        (lambda: _one_node(_sync_node), False),
    ],
)
def test_graphs_with_an_async_only_node_or_tool_are_driven_async(graph: Any, expected: bool) -> None:
    assert graphs.needs_async(graph()) is expected


def test_langgraph_sync_stream_refuses_async_tools_and_nodes() -> None:
    """Why the worker cannot drive such graphs with ``stream`` (what it did before: the run failed)."""
    with pytest.raises(NotImplementedError, match="does not support sync invocation"):
        list(_sync_model_async_tools().stream(START_CHAT))
    with pytest.raises(TypeError, match="No synchronous function provided"):
        list(_one_node(_async_node).stream(START_CHAT))
