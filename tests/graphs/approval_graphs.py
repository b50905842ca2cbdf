"""Graphs with several approval gates: two interrupt() calls in one node, and two parallel gates."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from tests.graphs import effect_graph
from tests.support.graphs import chain


class State(TypedDict, total=False):
    log: Annotated[list[Any], operator.add]


def two_gates(state: State) -> State:
    """Two gates in ONE node: each must get its own approval and its own decision."""
    first = interrupt({"gate": 1, "question": "refund the customer?"})
    second = interrupt({"gate": 2, "question": "and email them about it?"})
    log: list[Any] = [{"gate1": first.get("approved")}, {"gate2": second.get("approved")}]
    if first.get("approved") and second.get("approved"):
        log.append(effect_graph.send_email(to="user@test.invalid", subject="refunded")["message_id"])
    return {"log": log}


def _two_gates() -> StateGraph[State]:
    return chain(State, gates=two_gates)


def gate_a(state: State) -> State:
    return {"log": [interrupt({"gate": "a"})]}


def gate_b(state: State) -> State:
    return {"log": [interrupt({"gate": "b"})]}


def _parallel_gates() -> StateGraph[State]:
    """Two branches of one superstep, each interrupting: two approvals pending at once."""
    g: StateGraph[State] = StateGraph(State)
    g.add_node("gate_a", gate_a)
    g.add_node("gate_b", gate_b)
    g.add_edge(START, "gate_a")
    g.add_edge(START, "gate_b")
    g.add_edge("gate_a", END)
    g.add_edge("gate_b", END)
    return g


two_gates_graph = _two_gates()
parallel_gates_graph = _parallel_gates()


def two_gates_line(state: dict[str, Any]) -> dict[str, Any]:
    """Two gates in one node; the effect (a line appended to ``path``) only when both are approved."""
    first = interrupt({"gate": 1})
    second = interrupt({"gate": 2})
    if first.get("approved") and second.get("approved"):
        with open(state["path"], "a") as fh:
            fh.write("both approved\n")
    return {"decisions": [first.get("approved"), second.get("approved")]}


class LineState(TypedDict, total=False):
    path: str
    decisions: list[Any]


def _two_gates_line() -> StateGraph[LineState]:
    return chain(LineState, gates=two_gates_line)


two_gates_line_graph = _two_gates_line()
