"""The shape most test graphs have: START -> one step after another -> END."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.typing import StateT


def chain(schema: type[StateT], **steps: Callable[..., Any]) -> StateGraph[StateT]:
    """An uncompiled graph of ``schema`` running ``steps`` (node name = keyword) in their order."""
    graph: StateGraph[StateT] = StateGraph(schema)
    for name, step in steps.items():
        graph.add_node(name, step)
    names = [START, *steps, END]
    for a, b in itertools.pairwise(names):
        graph.add_edge(a, b)
    return graph
