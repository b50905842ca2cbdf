"""Async effects (``async def`` under ``@effects.tool``) keyed and guarded as sync ones: ``asyncio.gather`` of
two effects in one task without a stable identity is refused, with ``effects.position`` each is performed once
and a replay finds them. Real LangGraph in process (``ainvoke``), the real dev Postgres and the real HTTP
provider, where every delivery is counted.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Any, TypedDict

import psycopg_pool
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from agent_worker import context, effects
from agentrun_core import store
from agentrun_dev import http_provider
from tests.support import pg

pytestmark = pytest.mark.postgres


class State(TypedDict, total=False):
    out: list[Any]


def _deliveries(provider_url: str) -> collections.Counter[Any]:
    found: collections.Counter[Any] = collections.Counter()
    for key, performed in http_provider.stats(provider_url)["effects_performed"].items():
        status, entry, _ = http_provider.request(f"{provider_url}/effects/{key}")
        assert status == 200, (status, entry)
        found[entry["request"].get("who")] += performed
    return found


def _ctx(pool: psycopg_pool.ConnectionPool[Any]) -> context.RunContext:
    run = pg.admit(pool, run_id="t", graph="x:y")
    store.claim_run(pool, run_id="t", epoch=1, holder="p")
    return context.RunContext(conn=pool, run_id="t", attempt=1, epoch=1, key_version=run.key_version)


def _gathering_graph(provider_url: str, *, named: bool) -> Any:
    """An async node gathering ``ping`` for x and y; each call's body waits (bounded) until both calls are
    inside a body or the other one is over, so the two calls overlap in the ledger."""
    entered: asyncio.Event | None = None  # made in the node: an Event belongs to one event loop
    inside = 0

    @effects.tool(name="ping", dedupes_by_key=True)
    async def ping(call: effects.Call, *, who: str) -> Any:
        nonlocal inside
        assert entered is not None
        inside += 1
        if inside >= 2:
            entered.set()
        with contextlib.suppress(TimeoutError):  # the other call never got in (refused): go on alone
            await asyncio.wait_for(entered.wait(), timeout=2)
        status, body, _ = await asyncio.to_thread(
            http_provider.request, f"{provider_url}/effects", "POST", {"who": who}, {"Idempotency-Key": call}
        )
        assert status == 201, (status, body)
        return body

    async def one(who: str) -> Any:
        if named:
            with effects.position(f"ping-{who}"):
                return await ping(who=who)
        return await ping(who=who)

    async def fan(state: State) -> State:
        nonlocal entered, inside
        entered, inside = asyncio.Event(), 0
        done = await asyncio.gather(one("x"), one("y"), return_exceptions=True)
        for result in done:
            if isinstance(result, BaseException):
                raise result
        return {"out": [r["request"]["who"] for r in done]}

    g: StateGraph[State] = StateGraph(State)
    g.add_node("fan", fan)
    g.add_edge(START, "fan")
    g.add_edge("fan", END)
    return g.compile(checkpointer=InMemorySaver())


def _invoke(ctx: context.RunContext, graph: Any, thread: str) -> Any:
    with context.activate(ctx):
        return asyncio.run(graph.ainvoke({"out": []}, {"configurable": {"thread_id": thread}}))


def test_async_effects_gathered_in_one_task_without_a_position_are_refused(
    pool: psycopg_pool.ConnectionPool[Any], provider_url: str
) -> None:
    graph = _gathering_graph(provider_url, named=False)
    with pytest.raises(effects.UnstablePosition, match=r"threads or asyncio tasks"):
        _invoke(_ctx(pool), graph, "a")
    assert sum(_deliveries(provider_url).values()) == 1  # the first call went through; the racing one did not


def test_async_effects_gathered_with_positions_are_each_performed_once(
    pool: psycopg_pool.ConnectionPool[Any], provider_url: str
) -> None:
    graph = _gathering_graph(provider_url, named=True)
    ctx = _ctx(pool)
    first = _invoke(ctx, graph, "a")
    again = _invoke(ctx, graph, "b")  # a replay: the same positions, answered from the ledger
    assert first["out"] == again["out"] == ["x", "y"]
    assert _deliveries(provider_url) == {"x": 1, "y": 1}
    rows = store.list_effects(pool, "t")
    assert sorted(r.step for r in rows) == ["fan:1/pos:ping-x", "fan:1/pos:ping-y"]
    assert all(r.status == "sent" for r in rows)
