"""Step identities and occurrences from real LangGraph runs (in memory; no ledger, no database)."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy, Send

from agent_worker import context, positions


class State(TypedDict, total=False):
    i: int
    seen: Annotated[list[Any], operator.add]


def _position() -> tuple[str, int]:
    ctx = context.current()
    step = ctx.tracker.identity(context.config_metadata())
    return step, ctx.tracker.next_occurrence(step, "act")


def _ctx() -> context.RunContext:
    return context.RunContext(conn=None, run_id="r", attempt=1, epoch=1)  # type: ignore[arg-type]


def _sub() -> Any:
    def leaf(state: State) -> State:
        return {"seen": [_position()]}

    g: StateGraph[State] = StateGraph(State)
    g.add_node("leaf", leaf)
    g.add_edge(START, "leaf")
    g.add_edge("leaf", END)
    return g.compile()


def _invoke(graph: Any, ctx: context.RunContext, thread: str = "t") -> list[Any]:
    with context.activate(ctx):
        out = graph.invoke({"seen": []}, {"configurable": {"thread_id": thread}})
    return [tuple(x) for x in out["seen"]]


def test_a_langgraph_node_retry_repeats_its_positions() -> None:
    tries: list[int] = []

    def flaky(state: State) -> State:
        first = _position()
        second = _position()
        tries.append(1)
        if len(tries) == 1:
            raise ValueError("transient")
        return {"seen": [first, second]}

    g: StateGraph[State] = StateGraph(State)
    g.add_node(
        "flaky", flaky, retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.01, retry_on=ValueError)
    )
    g.add_edge(START, "flaky")
    g.add_edge("flaky", END)
    assert _invoke(g.compile(checkpointer=InMemorySaver()), _ctx()) == [("flaky:1", 0), ("flaky:1", 1)]


def test_a_replay_of_a_top_level_step_in_the_same_process_repeats_its_positions() -> None:
    g: StateGraph[State] = StateGraph(State)
    g.add_node("n", lambda s: {"seen": [_position()]})
    g.add_edge(START, "n")
    g.add_edge("n", END)
    graph, ctx = g.compile(checkpointer=InMemorySaver()), _ctx()
    assert _invoke(graph, ctx, "a") == _invoke(graph, ctx, "b") == [("n:1", 0)]


def test_subgraph_identities_carry_the_parent_step_and_push_index() -> None:
    sub = _sub()

    def calls_twice(state: State) -> State:  # the same subgraph invoked twice inside one node
        return {"seen": sub.invoke({"seen": []})["seen"] + sub.invoke({"seen": []})["seen"]}

    g: StateGraph[State] = StateGraph(State)
    g.add_node("plan", lambda s: {"i": 0})
    g.add_node("branch", sub)
    g.add_node("twice", calls_twice)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", lambda s: [Send("branch", {"seen": []}) for _ in range(3)], ["branch"])
    g.add_edge("branch", "twice")
    g.add_edge("twice", END)
    seen = set(_invoke(g.compile(checkpointer=InMemorySaver()), _ctx()))
    assert {s for s in seen if s[0].startswith("branch")} == {
        ("branch:2:push0/leaf:1", 0),
        ("branch:2:push1/leaf:1", 0),
        ("branch:2:push2/leaf:1", 0),
    }
    assert {s for s in seen if s[0].startswith("twice")} == {("twice:3/leaf:1", 0), ("twice:3#1/leaf:1", 0)}


def test_a_subgraph_invoked_by_a_tool_does_not_restart_the_calling_nodes_counts() -> None:
    """Key format 3 sees the tool run between the node and the subgraph's root run: the root run is inside
    the node's task, not a new start of it (format 2, kept for its runs, restarted the node's counts)."""
    from langchain_core.tools import tool

    sub = _sub()

    @tool
    def consult(topic: str) -> str:
        """Ask a subgraph."""
        sub.invoke({"seen": []})
        return topic

    def node(state: State) -> State:
        first = _position()
        consult.invoke({"topic": "x"})  # plain arguments: no tool call id
        return {"seen": [first, _position()]}

    g: StateGraph[State] = StateGraph(State)
    g.add_node("node", node)
    g.add_edge(START, "node")
    g.add_edge("node", END)
    assert _invoke(g.compile(checkpointer=InMemorySaver()), _ctx()) == [("node:1", 0), ("node:1", 1)]


def test_call_indexes_name_each_call_by_its_place_in_the_message_that_asked_for_it() -> None:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    def ask(*ids: str) -> AIMessage:
        return AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": i} for i in ids])

    state = {
        "messages": [HumanMessage("hi"), ask("a", "b"), ToolMessage("ok", tool_call_id="a"), ask("c", "a")]
    }
    assert positions.call_indexes(state) == {"a": 1, "b": 1, "c": 0}  # the newest message wins for "a"
    handed = [{"name": "t", "args": {}, "id": "z", "type": "tool_call"}]  # create_agent's Send payload
    assert positions.call_indexes(handed) == {"z": 0}
    assert positions.call_indexes({"n": 1, "deep": [[[[[ask("x")]]]]]}) == {}  # bounded depth
