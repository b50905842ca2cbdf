"""Graphs that never finish by themselves, for the run-deadline tests (tests/integration/test_deadlines.py).

* ``loop`` — one node that loops through the graph with no end: each pass performs one ``append_line``
  effect (a line in ``path``: the provider's own count) and sleeps ``tick`` seconds heartbeating. It makes
  progress (a step finishes every pass) forever.
* ``stuck`` — one node that sleeps inside its step forever, heartbeating every half second: alive, and no
  progress.
"""

from __future__ import annotations

import time
from typing import TypedDict

from langgraph.graph import START, StateGraph

from agent_worker import effects
from tests.integration.test_operator_graphs import append_line


class State(TypedDict, total=False):
    path: str
    tick: float
    n: int


def tick(state: State) -> State:
    n = int(state.get("n") or 0) + 1
    append_line(path=state["path"], line=f"tick {n}")
    deadline = time.monotonic() + float(state.get("tick") or 0.2)
    while (left := deadline - time.monotonic()) > 0:
        effects.heartbeat({"tick": n})
        time.sleep(min(0.1, left))
    return {"n": n}


def _loop() -> StateGraph[State]:
    builder: StateGraph[State] = StateGraph(State)
    builder.add_node("tick", tick)
    builder.add_edge(START, "tick")
    builder.add_edge("tick", "tick")  # no way out: only a deadline (or a human) ends the run
    return builder


def work(state: State) -> State:
    while True:  # a step that never finishes; the heartbeat raises the attempt's stop once it is fenced
        effects.heartbeat({"working": True})
        time.sleep(0.5)


def _stuck() -> StateGraph[State]:
    builder: StateGraph[State] = StateGraph(State)
    builder.add_node("work", work)
    builder.add_edge(START, "work")
    return builder


loop = _loop()
stuck = _stuck()
