"""Small graphs the operator's integration tests run in real worker Pods (no tests in this module).

Graph references: ``tests.integration.test_operator_graphs:steps`` and ``…:approval``. The worker imports
this module from the repository (the pod runtime puts it on ``PYTHONPATH``; ``tests`` is a namespace
package). Input keys:

* ``path`` — file the ``append_line`` effect appends to (one line per performed call: counts effects);
* ``pause`` — ``{step: seconds}`` sleeps inside a step (heartbeating), so a test can act mid-step;
* ``oom_attempt`` — in this attempt the ``act`` step, right after its effect, allocates far past any small
  memory limit (the Pod is OOM-killed mid-step: the next attempt re-runs ``act`` from the checkpoint and the
  ledger returns the recorded effect instead of performing it again).
"""

from __future__ import annotations

import os
import time
from typing import Any, TypedDict

from langgraph.graph import StateGraph
from langgraph.types import interrupt

from agent_worker import effects
from tests.support.graphs import chain, pause


class State(TypedDict, total=False):
    path: str
    line: str
    pause: dict[str, float]
    oom_attempt: int
    written: dict[str, Any]
    decision: dict[str, Any]
    outcome: str


@effects.tool(name="append_line")
def append_line(call: effects.Call, *, path: str, line: str) -> dict[str, Any]:
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{call.idempotency_key} {line}\n")
    return {"path": path, "line": line}


def prepare(state: State) -> State:
    pause(state, "prepare")
    return {}


def act(state: State) -> State:
    pause(state, "act")
    written = append_line(path=state["path"], line=state.get("line", "hello"))
    if state.get("oom_attempt") == int(os.environ.get("AGENTRUN_ATTEMPT", "0")):
        hog = [b"x" * (64 << 20) for _ in range(16)]  # 1 GiB, touched
        time.sleep(30)
        del hog
    return {"written": written}


def finish(state: State) -> State:
    pause(state, "finish")
    return {"outcome": "done"}


def _steps() -> StateGraph[State]:
    return chain(State, prepare=prepare, act=act, finish=finish)


def ask(state: State) -> State:
    decision = interrupt({"question": "append the line?", "line": state.get("line", "hello")})
    return {"decision": decision if isinstance(decision, dict) else {"approved": bool(decision)}}


def act_if_approved(state: State) -> State:
    decision = state.get("decision") or {}
    if decision.get("approved") is True:
        return {
            "written": append_line(path=state["path"], line=state.get("line", "hello")),
            "outcome": "done",
        }
    return {"outcome": "expired" if decision.get("expired") else "rejected"}


def _approval() -> StateGraph[State]:
    return chain(State, prepare=prepare, ask=ask, act=act_if_approved)


steps = _steps()
approval = _approval()
