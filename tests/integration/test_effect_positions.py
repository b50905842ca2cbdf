"""Effects keyed by position: divergent replays, subgraph loops, Send fan-out into subgraphs, late commits.

In-process graphs (real LangGraph) against the real dev Postgres and the real HTTP provider; every effect is
counted at the provider. A "replay" is a second invoke of the same run on another LangGraph thread: the same
steps at the same positions, as after a crash that lost the checkpoints (``exit`` durability).
"""

from __future__ import annotations

import operator
import random
import time
from typing import Annotated, Any, TypedDict

import psycopg
import psycopg_pool
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from agent_worker import context, effects
from agentrun_core import canonical, errors, keys, store
from agentrun_core.store import metrics_sql
from agentrun_dev import http_provider
from tests.support import pg
from tests.support.graphs import chain

pytestmark = pytest.mark.postgres


class State(TypedDict, total=False):
    i: int
    out: Annotated[list[Any], operator.add]


def _ctx(pool: psycopg_pool.ConnectionPool[Any], **kw: Any) -> context.RunContext:
    run = pg.admit(pool, run_id="r", graph="x:y")
    assert run.key_version == keys.KEY_VERSION == 3  # new runs get position keys (v3: agent_worker.identity)
    store.claim_run(pool, run_id="r", epoch=1, holder="p")
    return context.RunContext(conn=pool, run_id="r", attempt=1, epoch=1, **kw)


def _post(url: str, body: Any, key: str, timeout: float = 10) -> Any:
    status, payload, _ = http_provider.request(
        f"{url}/effects", "POST", body, {"Idempotency-Key": key}, timeout=timeout
    )
    assert status == 201, (status, payload)
    return payload


def _run(graph: Any, ctx: context.RunContext, thread: str, start: Any = None) -> Any:
    with context.activate(ctx):
        return graph.invoke(
            start if start is not None else {"out": []}, {"configurable": {"thread_id": thread}}
        )


def _single(node: Any) -> Any:
    return chain(State, draft_and_send=node).compile(checkpointer=InMemorySaver())


def _charge_tool(provider_url: str) -> Any:
    """A ``charge`` tool posting to the provider under its key (the provider dedupes by key)."""

    @effects.tool(name="charge", dedupes_by_key=True)
    def charge(call: effects.Call, *, cents: int) -> Any:
        return _post(provider_url, {"cents": cents}, call.idempotency_key)

    return charge


def _paying_subgraph(provider_url: str, cents: int) -> Any:
    """A subgraph of one node, ``pay``: one charge of ``cents``, with equal arguments every time it runs."""
    charge = _charge_tool(provider_url)

    def pay(state: State) -> State:
        return {"out": [charge(cents=cents)["id"]]}

    return chain(State, pay=pay).compile()


@pytest.mark.parametrize("policy", ["return_stored", "needs_human"])
def test_replay_with_other_arguments_does_not_repeat_the_effect(
    pool: psycopg_pool.ConnectionPool[Any], provider_url: str, policy: str, pg_dsn: str
) -> None:
    @effects.tool(name="notify", dedupes_by_key=False, on_divergence=policy)
    def notify(call: effects.Call, *, body: str) -> Any:
        return _post(provider_url, {"body": body}, call.idempotency_key)

    def node(state: State) -> State:  # a "model" drafts the body in the same node as the send
        return {"out": [notify(body=f"draft {random.random()}")]}

    graph = _single(node)
    ctx = _ctx(pool)
    first = _run(graph, ctx, "a")["out"][0]
    if policy == "return_stored":
        assert _run(graph, ctx, "b")["out"][0] == first  # the stored result, nothing performed
    else:
        with pytest.raises(errors.NeedsHuman, match="other arguments"):
            _run(graph, ctx, "b")
    assert http_provider.stats(provider_url)["effects_performed_total"] == 1
    (row,) = store.list_effects(pool, "r")
    assert row.status == "sent" and row.divergences == 1 and row.key_version == 3
    assert row.diverged_args_hash and row.diverged_args_hash != row.args_hash
    assert row.needs_human is (policy == "needs_human")
    with psycopg.connect(pg_dsn) as conn:  # the operator's collector counts divergent rows
        assert metrics_sql.read_snapshot(conn).effect_divergences == [("ns", "notify", 1, 1)]


def test_subgraph_node_in_a_loop_is_one_effect_per_iteration(
    pool: psycopg_pool.ConnectionPool[Any], provider_url: str
) -> None:
    def loop(state: State) -> State:
        return {"i": state.get("i", 0) + 1}

    g: StateGraph[State] = StateGraph(State)
    g.add_node("loop", loop)
    g.add_node("sub", _paying_subgraph(provider_url, 1))  # equal arguments in every iteration
    g.add_edge(START, "loop")
    g.add_conditional_edges("loop", lambda s: "sub" if s["i"] <= 3 else END, ["sub", END])
    g.add_edge("sub", "loop")
    graph = g.compile(checkpointer=InMemorySaver())
    ctx = _ctx(pool)
    first = _run(graph, ctx, "a", {"i": 0, "out": []})["out"]
    again = _run(graph, ctx, "b", {"i": 0, "out": []})["out"]  # a replay: same positions, same keys
    assert len(set(first)) == 3 and again == first
    rows = store.list_effects(pool, "r")
    assert len(rows) == 3 and {r.step for r in rows} == {"sub:2/pay:1", "sub:4/pay:1", "sub:6/pay:1"}
    assert http_provider.stats(provider_url)["effects_performed_total"] == 3


def test_send_fan_out_into_a_subgraph_with_equal_arguments_is_one_effect_per_branch(
    pool: psycopg_pool.ConnectionPool[Any], provider_url: str
) -> None:
    g: StateGraph[State] = StateGraph(State)
    g.add_node("plan", lambda s: {"out": []})
    g.add_node("branch", _paying_subgraph(provider_url, 5))
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", lambda s: [Send("branch", {"out": []}) for _ in range(4)], ["branch"])
    g.add_edge("branch", END)
    graph = g.compile(checkpointer=InMemorySaver())
    ctx = _ctx(pool)
    first = _run(graph, ctx, "a")["out"]
    again = _run(graph, ctx, "b")["out"]
    assert len(set(first)) == 4 and sorted(again) == sorted(first)
    rows = store.list_effects(pool, "r")
    assert len(rows) == 4 and all(r.status == "sent" for r in rows)
    assert {r.step for r in rows} == {f"branch:2:push{i}/pay:1" for i in range(4)}
    assert http_provider.stats(provider_url)["effects_performed_total"] == 4


def test_negative_lookup_is_not_trusted_while_the_call_may_still_land(
    pool: psycopg_pool.ConnectionPool[Any], provider_url: str
) -> None:
    """The provider commits 1 s after the client's 0.1 s timeout; a lookup at once would say "never
    happened" and the tool would be called again (two commits). The tool's deadline (2 s) is waited out."""
    http_provider.request(f"{provider_url}/control/config", "POST", {"honour_keys": False})
    http_provider.request(
        f"{provider_url}/control/faults", "POST", {"mode": "late", "count": 1, "delay": 1.1}
    )

    def find(key: str, args: dict[str, Any]) -> Any:
        status, body, _ = http_provider.request(f"{provider_url}/effects/{key}")
        return body["response"] if status == 200 else None

    @effects.tool(name="post", lookup=find, timeout=2.0, retry=effects.RetryPolicy(max_attempts=3))
    def post(call: effects.Call, *, text: str) -> Any:
        return _post(provider_url, {"text": text}, call.idempotency_key, timeout=0.1)

    ctx = _ctx(pool)
    started = time.monotonic()
    out = _run(_single(lambda s: {"out": [post(text="hi")]}), ctx, "a")["out"]
    assert http_provider.stats(provider_url)["effects_performed_total"] == 1
    assert out[0]["request"] == {"text": "hi"} and time.monotonic() - started >= 2.0
    (row,) = store.list_effects(pool, "r")
    assert row.status == "sent" and row.call_deadline is not None


def test_lookup_only_tool_must_declare_its_timeout() -> None:
    with pytest.raises(ValueError, match="timeout="):
        effects.tool(name="x", lookup=lambda k, a: None)(lambda call: None)
    with pytest.raises(ValueError, match="on_divergence"):
        effects.tool(name="x", on_divergence="ignore")(lambda call: None)


def test_a_v1_run_keeps_deriving_v1_keys(pool: psycopg_pool.ConnectionPool[Any], provider_url: str) -> None:
    charge = _charge_tool(provider_url)
    ctx = _ctx(pool, key_version=1)
    _run(_single(lambda s: {"out": [charge(cents=7)]}), ctx, "a")
    (row,) = store.list_effects(pool, "r")
    h = canonical.digest({"cents": 7})
    expected = keys.derive("r", "draft_and_send:1", "charge", 0, version=1, args_hash=h)
    assert row.idempotency_key == expected and row.key_version == 1
