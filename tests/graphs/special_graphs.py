"""Graphs for worker edge cases: an unknown-outcome effect without lookup, parallel branches, a factory, a
provider that commits late, control signals swallowed by graph code."""

from __future__ import annotations

import json
import operator
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from agent_worker import effects
from tests.graphs import effect_graph
from tests.support.graphs import chain


class State(TypedDict, total=False):
    log: Annotated[list[Any], operator.add]


@effects.tool(name="post_note")  # neither dedupes by key nor has a lookup: an unknown outcome is unknowable
def post_note(call: effects.Call, *, text: str) -> Any:
    effect_graph._log(f"post_note:{call.idempotency_key}")
    return {"posted": text}


def note(state: State) -> State:
    return {"log": [post_note(text="hello")]}


def _unknown() -> StateGraph[State]:
    return chain(State, note=note)


unknown_outcome = _unknown()


# --- parallel branches in one superstep: "fast" finishes, then "slow" dies (langgraph issue 8039) --------


def fast(state: State) -> State:
    effect_graph._log("fast")
    return {"log": ["fast"]}


def slow(state: State) -> State:
    effect_graph._log("slow")
    path = os.environ.get("AGENTRUN_TEST_NODE_LOG", "")
    if os.environ.get("AGENTRUN_TEST_KILL_IN_SLOW") == "1":
        # Wait until "fast" has returned (its name is logged before returning; give the runtime time to hand
        # its writes to the checkpointer), then die like an OOM kill in the middle of the superstep.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "fast" not in Path(path).read_text().split():
            time.sleep(0.01)
        time.sleep(float(os.environ.get("AGENTRUN_TEST_KILL_DELAY", "0.5")))
        os.kill(os.getpid(), signal.SIGKILL)
    return {"log": ["slow"]}


def after(state: State) -> State:
    effect_graph._log("after")
    return {"log": ["after"]}


def parallel() -> StateGraph[State]:
    """A factory (also exercises factory loading)."""
    g: StateGraph[State] = StateGraph(State)
    g.add_node("fast", fast)
    g.add_node("slow", slow)
    g.add_node("after", after)
    g.add_edge(START, "fast")
    g.add_edge(START, "slow")
    g.add_edge(["fast", "slow"], "after")
    g.add_edge("after", END)
    return g


not_a_graph = 42


# --- a node that keeps the main thread busy (CPU) for longer than the Lease's renew deadline -------------


def busy(state: State) -> State:
    seconds = float(os.environ.get("AGENTRUN_TEST_BUSY_SECONDS", "4"))
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:  # pure-Python spin: holds the GIL except at the interpreter's switch points
        n += 1
    return {"log": [post_note(text=f"spun {n > 0}")]}  # an effect after the spin: refused if renewals starved


def _busy() -> StateGraph[State]:
    return chain(State, busy=busy)


busy_graph = _busy()


# --- a lookup-only tool whose provider may commit long after the client gave up ---------------------------


def find_late(key: str, args: dict[str, Any]) -> Any:
    try:
        with urllib.request.urlopen(f"{os.environ['AGENTRUN_TEST_HTTP_URL']}/effects/{key}", timeout=5) as r:
            return json.loads(r.read())["response"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


# timeout=6: the provider's own bound on a request taking effect (longer than the client's timeout below).
@effects.tool(name="post_late", lookup=find_late, timeout=6.0)
def post_late(call: effects.Call, *, text: str) -> Any:
    req = urllib.request.Request(
        f"{os.environ['AGENTRUN_TEST_HTTP_URL']}/effects",
        data=json.dumps({"text": text}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": call.idempotency_key},
    )
    client_timeout = float(os.environ.get("AGENTRUN_TEST_CLIENT_TIMEOUT", "5"))
    with urllib.request.urlopen(req, timeout=client_timeout) as resp:
        return json.loads(resp.read())


def post(state: State) -> State:
    return {"log": [post_late(text=f"note {time.time_ns()}")]}  # nondeterministic too


def _late() -> StateGraph[State]:
    return chain(State, post=post)


late_graph = _late()


# --- graph code that swallows everything (`except Exception`) around an effect ----------------------------


def careless(state: State) -> State:
    try:
        return {"log": [post_note(text="careless")]}
    except Exception:  # must not swallow Fenced / NeedsHuman
        return {"log": ["swallowed"]}


def _careless() -> StateGraph[State]:
    return chain(State, careless=careless)


careless_graph = _careless()
