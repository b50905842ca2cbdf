"""A long chat whose ``messages`` is a LangGraph 1.2 ``DeltaChannel``: only each turn's new messages stored.

Each turn: ``user`` appends a human message, ``model`` (a deterministic fake model) answers with the digest of
the WHOLE history it was handed, so a resume that rebuilt ``messages`` wrongly (a lost, doubled or reordered
message) answers differently from then on, and the final state differs from an unkilled run's. Every
``charge_every``-th turn the model charges a customer (an idempotent HTTP effect, counted at the provider);
turn ``approve_at`` (0: none) asks a human first (an interrupt: the run parks).

``snapshot_frequency`` is small (AGENTRUN_TEST_DELTA_SNAPSHOT, default 7 updates): a 50-turn chat then has
snapshots AND chains of plain writes between them, both of which a resume, a fork or a purge must keep.

Env: AGENTRUN_TEST_HTTP_URL (agentrun_dev.http_provider), AGENTRUN_TEST_JITTER_MS (random sleep up to N ms in
each node), AGENTRUN_TEST_FAIL_FILE (while this file exists, ``model`` raises at turn ``fail_at``: a run
that fails, then is retried). Input: {"turns": int, "charge_every": int, "approve_at": int, "fail_at": int}.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

import psycopg_pool
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

from agent_worker import checkpointer, effects
from tests.support.graphs import unless_404

SNAPSHOT_FREQUENCY = int(os.environ.get("AGENTRUN_TEST_DELTA_SNAPSHOT", "7") or 7)


def add_message_batches(current: list[AnyMessage], batches: Sequence[Any]) -> list[AnyMessage]:
    """DeltaChannel's reducer: ``add_messages`` folded over a batch of writes (batching-invariant)."""
    out = list(current or [])
    for batch in batches:
        out = add_messages(out, batch)
    return out


class State(TypedDict, total=False):
    turns: int
    charge_every: int
    approve_at: int
    fail_at: int
    turn: int
    messages: Annotated[
        list[AnyMessage], DeltaChannel(add_message_batches, snapshot_frequency=SNAPSHOT_FREQUENCY)
    ]


def digest(messages: Sequence[AnyMessage]) -> str:
    """What the fake model "read": every message's id and text, in order."""
    text = "\n".join(f"{m.id}:{m.content}" for m in messages)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _jitter() -> None:
    ms = int(os.environ.get("AGENTRUN_TEST_JITTER_MS", "0") or 0)
    if ms:
        time.sleep(random.random() * ms / 1000)


def find_charge(key: str, args: dict[str, Any]) -> Any:
    url = f"{os.environ['AGENTRUN_TEST_HTTP_URL']}/effects/{key}"

    def read() -> Any:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read())["response"]

    return unless_404(read)


@effects.tool(name="charge", dedupes_by_key=True, lookup=find_charge)
def charge(call: effects.Call, *, customer: str, cents: int) -> Any:
    body = json.dumps({"customer": customer, "cents": cents}).encode()
    req = urllib.request.Request(
        f"{os.environ['AGENTRUN_TEST_HTTP_URL']}/effects",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": call.idempotency_key},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def user(state: State) -> dict[str, Any]:
    _jitter()
    turn = int(state.get("turn", 0)) + 1
    return {"turn": turn, "messages": [HumanMessage(f"question {turn}", id=f"h{turn}")]}


def model(state: State) -> dict[str, Any]:
    _jitter()
    turn = int(state["turn"])
    seen = digest(state["messages"])
    note = ""
    flag = os.environ.get("AGENTRUN_TEST_FAIL_FILE")
    if state.get("fail_at") == turn and flag and os.path.exists(flag):
        raise RuntimeError(f"the model failed at turn {turn} on purpose")
    if state.get("approve_at") == turn:
        answer = interrupt({"question": f"answer turn {turn}?"})
        note = f" approved={bool(answer.get('approved'))}"
    every = int(state.get("charge_every", 0) or 0)
    extra: dict[str, Any] = {}
    if every and turn % every == 0:
        extra["receipt"] = charge(customer=f"turn-{turn}", cents=turn)["id"]
        note += " charged"
    text = f"answer {turn} to {len(state['messages'])} messages, read {seen}{note}"
    return {"messages": [AIMessage(text, id=f"a{turn}", additional_kwargs=extra)]}


def _next(state: State) -> str:
    return "user" if int(state["turn"]) < int(state.get("turns", 1)) else END


def build() -> StateGraph[State]:
    g: StateGraph[State] = StateGraph(State)
    g.add_node("user", user)
    g.add_node("model", model)
    g.add_edge(START, "user")
    g.add_edge("user", "model")
    g.add_conditional_edges("model", _next, ["user", END])
    return g


builder = build()


def expected_messages(turns: int, charge_every: int = 0, approve_at: int = 0) -> list[tuple[str, str]]:
    """(id, text) of each message of an unkilled run, computed without LangGraph (approved runs)."""
    messages: list[AnyMessage] = []
    for turn in range(1, turns + 1):
        messages.append(HumanMessage(f"question {turn}", id=f"h{turn}"))
        note = " approved=True" if approve_at == turn else ""
        if charge_every and turn % charge_every == 0:
            note += " charged"
        text = f"answer {turn} to {len(messages)} messages, read {digest(messages)}{note}"
        messages.append(AIMessage(text, id=f"a{turn}"))
    return texts(messages)


def texts(messages: Sequence[AnyMessage]) -> list[tuple[str, str]]:
    return [(str(m.id), str(m.content)) for m in messages]


def messages_at(dsn: str, run_id: str, checkpoint_id: str | None = None) -> list[tuple[str, str]]:
    """A run's messages as LangGraph rebuilds them at ``checkpoint_id`` (default: the run's head, with the
    writes of tasks done there applied, as LangGraph shows the latest state), through the worker's saver."""
    with psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=2, kwargs={"autocommit": True}) as pool:
        saver = checkpointer.FencedSaver(pool, run_id=run_id, epoch=0)
        graph = builder.compile(checkpointer=saver)
        conf: dict[str, Any] = {"thread_id": run_id}
        if checkpoint_id is not None:
            conf["checkpoint_id"] = checkpoint_id
        state = graph.get_state({"configurable": conf})
    return texts(state.values.get("messages", []))
