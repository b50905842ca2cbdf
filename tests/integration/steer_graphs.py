"""Graphs for the steering tests (retry, resolve, cancel) run by real workers (no tests in this module).

``tests.integration.steer_graphs:flaky`` — prepare → act (effect ``append_line``: one line per performed call
in ``path``) → check → finish. ``check`` fails while the file ``flag`` does not exist, as the input's
``fail_with`` says: ``"bug"`` (the node raises: a bug in graph code, "fixed" by creating the flag), or
``"refused"`` (its effect ``notify`` is refused for good by the provider: recorded ``failed``). ``pause``:
``{step: seconds}`` sleeps inside a step (heartbeating), so a test can act mid-step.
"""

from __future__ import annotations

import os
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from agent_worker import effects
from tests.support.graphs import pause


class State(TypedDict, total=False):
    path: str
    flag: str
    fail_with: str
    pause: dict[str, float]
    written: dict[str, Any]
    notified: dict[str, Any]
    outcome: str


def _append(path: str, key: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{key} {line}\n")
        f.flush()
        os.fsync(f.fileno())


@effects.tool(name="append_line")
def append_line(call: effects.Call, *, path: str, line: str) -> dict[str, Any]:
    _append(path, call.idempotency_key, line)
    return {"path": path, "line": line}


@effects.tool(name="notify")
def notify(call: effects.Call, *, path: str, flag: str) -> dict[str, Any]:
    if not os.path.exists(flag):
        raise effects.Permanent("the provider refused the notification (no flag file)")
    _append(path, call.idempotency_key, "notified")
    return {"notified": True}


def prepare(state: State) -> State:
    pause(state, "prepare")
    return {}


def act(state: State) -> State:
    pause(state, "act")
    return {"written": append_line(path=state["path"], line="first")}


def check(state: State) -> State:
    if state.get("fail_with") == "refused":
        return {"notified": notify(path=state["path"], flag=state.get("flag", ""))}
    if state.get("fail_with") == "bug" and not os.path.exists(state.get("flag", "")):
        raise RuntimeError("bug in node check: the flag file is missing")
    return {}


def finish(state: State) -> State:
    return {"outcome": "done"}


def _flaky() -> StateGraph[State]:
    builder: StateGraph[State] = StateGraph(State)
    for name, fn in (("prepare", prepare), ("act", act), ("check", check), ("finish", finish)):
        builder.add_node(name, fn)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "act")
    builder.add_edge("act", "check")
    builder.add_edge("check", "finish")
    builder.add_edge("finish", END)
    return builder


flaky = _flaky()
