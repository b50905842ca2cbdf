"""Subgraphs that used to collide: ``Send`` fan-out into a subgraph and a subgraph node inside a loop.

``plan`` fans out ``n`` ``Send("branch", ...)`` with EQUAL arguments into the ``pay`` subgraph, then ``loop``
runs the same subgraph as the node ``again`` ``n`` times. Every execution of the subgraph's ``pay`` node
charges 1 cent (HTTP provider, same arguments every time) and sends an email with a random body (SMTP sink):
so a correct ledger holds 4·n effects with distinct keys, each performed exactly once at its provider.
Input: {"n": int}. Env as tests/graphs/effect_graph.py.
"""

from __future__ import annotations

import operator
import random
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from tests.graphs import effect_graph
from tests.support.graphs import chain


class Sub(TypedDict, total=False):
    receipts: Annotated[list[Any], operator.add]


class State(TypedDict, total=False):
    n: int
    i: int
    receipts: Annotated[list[Any], operator.add]


def pay(state: Sub) -> Sub:
    effect_graph._jitter()
    receipt = effect_graph.charge(customer="c-sub", cents=1)  # equal arguments in every branch/iteration
    body = f"draft {random.getrandbits(32):08x}"
    mail = effect_graph.send_email(to="sub@test.invalid", subject="subgraph", body=body)
    return {"receipts": [receipt["id"], mail["message_id"]]}


def _sub() -> Any:
    return chain(Sub, pay=pay).compile()


def plan(state: State) -> State:
    return {"i": 0}


def fan_out(state: State) -> list[Send]:
    return [Send("branch", {"receipts": []}) for _ in range(int(state.get("n", 3)))]


def loop(state: State) -> State:
    return {"i": int(state.get("i", 0)) + 1}


def route(state: State) -> str:
    return "again" if state["i"] <= int(state.get("n", 3)) else END


def build() -> StateGraph[State]:
    sub = _sub()
    g: StateGraph[State] = StateGraph(State)
    g.add_node("plan", plan)
    g.add_node("branch", sub)
    g.add_node("loop", loop)
    g.add_node("again", sub)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", fan_out, ["branch"])
    g.add_edge("branch", "loop")
    g.add_conditional_edges("loop", route, ["again", END])
    g.add_edge("again", "loop")
    return g


builder = build()
