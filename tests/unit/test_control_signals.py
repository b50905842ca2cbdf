"""Fenced / NeedsHuman cannot be swallowed by graph code's ``except Exception`` (real LangGraph)."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy, interrupt

from agentrun_core import errors


class State(TypedDict, total=False):
    log: Annotated[list[Any], operator.add]


def _graph(signal: BaseException, retry: RetryPolicy | None) -> Any:
    def swallowing(state: State) -> State:
        try:
            raise signal
        except Exception:  # what careless graph code does
            return {"log": ["swallowed"]}

    def other(state: State) -> State:
        return {"log": ["other"]}

    g: StateGraph[State] = StateGraph(State)
    g.add_node("swallowing", swallowing, retry_policy=retry)
    g.add_node("other", other)
    g.add_edge(START, "swallowing")
    g.add_edge(START, "other")
    g.add_edge("swallowing", END)
    g.add_edge("other", END)
    return g.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
@pytest.mark.parametrize("retry", [None, RetryPolicy(max_attempts=3)])
@pytest.mark.parametrize(
    "signal", [errors.Fenced("deposed"), errors.NeedsHuman("unknown outcome", key="ak-1")]
)
def test_signal_stops_the_run_and_the_node_is_not_done(
    signal: BaseException, retry: RetryPolicy | None, durability: str
) -> None:
    graph = _graph(signal, retry)
    config: Any = {"configurable": {"thread_id": "t"}}
    with pytest.raises(type(signal)):
        for _ in graph.stream({"log": []}, config, durability=durability):
            pass
    assert "swallowing" in graph.get_state(config).next  # re-runs on the next attempt


def test_signals_are_not_exceptions_but_worker_errors_are() -> None:
    assert not isinstance(errors.Fenced("x"), Exception)
    assert not isinstance(errors.NeedsHuman("x"), Exception)
    assert errors.Fenced("x").exit_code == 12 and errors.NeedsHuman("x").exit_code == 13
    assert isinstance(errors.EffectFailed("x"), Exception)


def test_graph_interrupt_still_works() -> None:
    def ask(state: State) -> State:
        return {"log": [interrupt("ok?")]}

    g: StateGraph[State] = StateGraph(State)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    graph = g.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({"log": []}, config)
    assert graph.get_state(config).interrupts
