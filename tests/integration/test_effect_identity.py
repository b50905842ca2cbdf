"""What identifies an effect (key format v3): parallel tool calls in one ``ToolNode`` task, an effect inside
an effect, effects racing in a thread pool. Real worker processes (killed at a fault point) or real LangGraph
in process, the real dev Postgres and the real HTTP provider; every delivery is counted at the provider.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import psycopg
import psycopg_pool
import pytest
from langchain_core.runnables.config import ContextThreadPoolExecutor
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph

from agent_worker import context, effects
from agentrun_core import errors, keys, store
from agentrun_dev import http_provider
from tests.graphs import real_agents
from tests.support import pg, worker_harness

pytestmark = pytest.mark.postgres

REACT = "tests.graphs.real_agents:react"
NESTED = "tests.graphs.real_agents:nested"
START_CHAT = {"messages": [{"role": "user", "content": "send everyone a note"}]}


@pytest.fixture
def providers(tmp_path: Path) -> Iterator[tuple[str, str]]:
    with http_provider.HttpProvider(tmp_path / "a") as a, http_provider.HttpProvider(tmp_path / "b") as b:
        yield a.url, b.url


def _worker(dsn: str, url: str) -> worker_harness.Worker:
    return worker_harness.Worker(dsn, worker_harness.http_only(url))


def deliveries(url: str, field: str) -> collections.Counter[Any]:
    """Effects performed at the provider, by the value of ``field`` in the request body."""
    found: collections.Counter[Any] = collections.Counter()
    for key, performed in http_provider.stats(url)["effects_performed"].items():
        status, entry, _ = http_provider.request(f"{url}/effects/{key}")
        assert status == 200, (status, entry)
        found[entry["request"].get(field)] += performed
    return found


def _final(dsn: str, run_id: str, builder: Any) -> list[tuple[str, Any, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        state = builder.compile(checkpointer=PostgresSaver(conn)).get_state(
            {"configurable": {"thread_id": run_id}}
        )
    assert state.next == ()
    return [
        (
            m.type,
            m.content,
            getattr(m, "tool_call_id", None) or [c["id"] for c in getattr(m, "tool_calls", [])],
        )
        for m in state.values["messages"]
    ]


def test_parallel_tool_calls_of_a_tool_node_are_each_delivered_once_whatever_order_the_replay_takes(
    pg_dsn: str, providers: tuple[str, str]
) -> None:
    """ToolNode runs a turn's 3 calls in parallel threads of ONE task. The worker is killed after the first
    call's effect is recorded; the resumed attempt reaches the effects in the other order. Each tool call is
    delivered exactly once (counted at the provider), and the run ends as an unkilled run does."""
    reference_url, url = providers
    worker_harness.admit(pg_dsn, "ref", graph=REACT, **START_CHAT)
    ref = _worker(pg_dsn, reference_url).run("ref", pod="p", AGENTRUN_TEST_JITTER_MS="20")
    assert ref.returncode == 0, ref.stderr[-3000:]

    run = worker_harness.admit(pg_dsn, "r", graph=REACT, **START_CHAT)
    assert run.key_version == keys.KEY_VERSION == 3
    worker = _worker(pg_dsn, url)
    killed = worker.run("r", pod="p1", attempt=1, faults="after_record@1", AGENTRUN_TEST_JITTER_MS="20")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert deliveries(url, "to") == {"ann": 1}  # the first call in forward order landed, then the kill
    resumed = worker.run(
        "r", pod="p2", attempt=2, AGENTRUN_TEST_ORDER="reverse", AGENTRUN_TEST_JITTER_MS="20"
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    everyone = [to for turn in real_agents.TURNS for to in turn]
    assert deliveries(url, "to") == {to: 1 for to in everyone}
    assert deliveries(reference_url, "to") == {to: 1 for to in everyone}
    assert _final(pg_dsn, "r", real_agents.react) == _final(pg_dsn, "ref", real_agents.react)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = store.list_effects(conn, "r")
    assert sorted(r.step for r in rows) == sorted(
        f"tools:{2 * n + 2}/call#{i}" for n, turn in enumerate(real_agents.TURNS) for i in range(len(turn))
    )
    assert all(r.divergences == 0 and r.key_version == 3 for r in rows)


def test_an_effect_after_a_nested_effect_is_performed_once_when_the_outer_body_is_skipped(
    pg_dsn: str, providers: tuple[str, str]
) -> None:
    """``refund``'s body calls ``notify``; the node then calls ``notify`` again. Killed after ``refund`` is
    recorded: the replay answers ``refund`` from the ledger (its body, with the nested notify, does not run),
    and the later notify must still be delivered, once."""
    _, url = providers
    worker_harness.admit(pg_dsn, "n", graph=NESTED, messages=[])
    worker = _worker(pg_dsn, url)
    killed = worker.run("n", pod="p1", attempt=1, faults="after_record@2")  # 1: nested notify, 2: refund
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert deliveries(url, "notify") == {"refund issued": 1, None: 1}  # None: the refund itself
    resumed = worker.run("n", pod="p2", attempt=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert deliveries(url, "notify") == {
        "refund issued": 1,
        "customer: your refund is on its way": 1,
        None: 1,
    }
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = store.list_effects(conn, "n")
    assert len(rows) == 3 and all(r.divergences == 0 for r in rows)


class State(TypedDict, total=False):
    out: list[Any]


@pytest.fixture
def pool(pg_dsn: str) -> Iterator[psycopg_pool.ConnectionPool[Any]]:
    with psycopg_pool.ConnectionPool(pg_dsn, min_size=1, max_size=4, kwargs={"autocommit": True}) as p:
        yield p


def _racing_graph(url: str, *, named: bool) -> Any:
    """A node running ``ping`` for x and y in two threads; each call's body waits (bounded) until both calls
    are inside a body or the other one is over, so the two calls overlap in the ledger."""
    seen = {"entered": 0, "finished": 0}
    cond = threading.Condition()

    @effects.tool(name="ping", dedupes_by_key=True)
    def ping(call: effects.Call, *, who: str) -> Any:
        with cond:
            seen["entered"] += 1
            cond.notify_all()
            cond.wait_for(lambda: seen["entered"] >= 2 or seen["finished"] >= 1, timeout=10)
        status, body, _ = http_provider.request(
            f"{url}/effects", "POST", {"who": who}, {"Idempotency-Key": call}
        )
        assert status == 201, (status, body)
        return body

    def one(who: str) -> Any:
        try:
            if named:
                with effects.position(f"ping-{who}"):
                    return ping(who=who)
            return ping(who=who)
        finally:
            with cond:
                seen["finished"] += 1
                cond.notify_all()

    def node(state: State) -> State:
        seen.update(entered=0, finished=0)
        with ContextThreadPoolExecutor(max_workers=2) as ex:
            return {"out": [r["request"]["who"] for r in ex.map(one, ["x", "y"])]}

    g: StateGraph[State] = StateGraph(State)
    g.add_node("fan", node)
    g.add_edge(START, "fan")
    g.add_edge("fan", END)
    return g.compile(checkpointer=InMemorySaver())


def _ctx(pool: psycopg_pool.ConnectionPool[Any]) -> context.RunContext:
    run = pg.admit(pool, run_id="t", graph="x:y")
    store.claim_run(pool, run_id="t", epoch=1, holder="p")
    return context.RunContext(conn=pool, run_id="t", attempt=1, epoch=1, key_version=run.key_version)


def test_effects_racing_in_a_thread_pool_without_a_position_are_refused(
    pool: psycopg_pool.ConnectionPool[Any], providers: tuple[str, str]
) -> None:
    _, url = providers
    graph = _racing_graph(url, named=False)
    with context.activate(_ctx(pool)), pytest.raises(effects.UnstablePosition, match=r"effects\.position"):
        graph.invoke({"out": []}, {"configurable": {"thread_id": "a"}})
    assert sum(deliveries(url, "who").values()) == 1  # the first call went through; the racing one did not


def test_effects_racing_in_a_thread_pool_with_positions_are_each_performed_once(
    pool: psycopg_pool.ConnectionPool[Any], providers: tuple[str, str]
) -> None:
    _, url = providers
    graph = _racing_graph(url, named=True)
    ctx = _ctx(pool)
    with context.activate(ctx):
        first = graph.invoke({"out": []}, {"configurable": {"thread_id": "a"}})
        again = graph.invoke({"out": []}, {"configurable": {"thread_id": "b"}})  # a replay: same positions
    assert first["out"] == again["out"] == ["x", "y"]
    assert deliveries(url, "who") == {"x": 1, "y": 1}
    rows = store.list_effects(pool, "t")
    assert sorted(r.step for r in rows) == ["fan:1/pos:ping-x", "fan:1/pos:ping-y"]


def _in_process_agent(
    pool: psycopg_pool.ConnectionPool[Any], builder: Any, version: int, orders: list[str], monkeypatch: Any
) -> list[Any]:
    """Run ``builder`` once per order (a replay in the same process, each on a fresh LangGraph thread: as
    after a crash that lost the tools step's checkpoint); the final messages of each."""
    run = pg.admit(pool, run_id="t", graph="x:y")
    store.claim_run(pool, run_id="t", epoch=1, holder="p")
    assert run.key_version == 3
    ctx = context.RunContext(conn=pool, run_id="t", attempt=1, epoch=1, key_version=version)
    graph = builder.compile(checkpointer=InMemorySaver())
    finals = []
    for i, order in enumerate(orders):
        monkeypatch.setenv("AGENTRUN_TEST_ORDER", order)
        real_agents.reset_gate()
        with context.activate(ctx):
            out = graph.invoke(START_CHAT, {"configurable": {"thread_id": f"t{i}"}})
        finals.append([(m.type, m.content) for m in out["messages"]])
    return finals


def test_a_subagent_called_by_parallel_tool_calls_is_named_by_its_call_not_by_arrival(
    pool: psycopg_pool.ConnectionPool[Any], providers: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of 3 parallel calls invokes the helper subgraph: LangGraph numbers the invocations in arrival
    order (``tools:<id>|1|...``); the replay arrives in the other order and must still find each report."""
    _, url = providers
    monkeypatch.setenv("AGENTRUN_TEST_HTTP_URL", url)
    first, again = _in_process_agent(pool, real_agents.react_helpers, 3, ["forward", "reverse"], monkeypatch)
    assert again == first
    (topics,) = real_agents.HELP_TURNS
    assert deliveries(url, "to") == {t: 1 for t in topics}
    rows = store.list_effects(pool, "t")
    assert sorted(r.step for r in rows) == sorted(
        f"tools:2/call#{i}/file_report:1" for i in range(len(topics))
    )
    assert all(r.divergences == 0 for r in rows)


def test_a_run_admitted_under_key_format_v2_keeps_its_keys(
    pool: psycopg_pool.ConnectionPool[Any], providers: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A v2 run derives what it derived before (the tool call plays no part), whatever this worker knows."""
    _, url = providers
    monkeypatch.setenv("AGENTRUN_TEST_HTTP_URL", url)
    _in_process_agent(pool, real_agents.react, 2, ["forward"], monkeypatch)
    rows = store.list_effects(pool, "t")
    by_step = collections.Counter(r.step for r in rows)
    assert by_step == {"tools:2": 3, "tools:4": 2}
    for r in rows:
        assert r.key_version == 2
        assert r.idempotency_key == keys.derive("t", r.step, "post_note", r.occurrence, version=2)


def test_a_divergent_hit_in_a_space_seen_racing_goes_to_a_human(
    pool: psycopg_pool.ConnectionPool[Any], providers: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run sends x at `fan:1` occurrence 0. In the replay, a thread asks for y at that position and,
    while its reservation is on its way, the node's own thread calls the same effect: refused, and the space
    is marked racing. The thread's hit on x's row (other arguments) is then not answered with x's result:
    the run stops for a human. Only x was ever delivered."""
    _, url = providers

    @effects.tool(name="ping", dedupes_by_key=True)
    def ping(call: effects.Call, *, who: str) -> Any:
        status, body, _ = http_provider.request(
            f"{url}/effects", "POST", {"who": who}, {"Idempotency-Key": call}
        )
        assert status == 201, (status, body)
        return body

    reserving, refused = threading.Event(), threading.Event()
    real_reserve = store.reserve_effect

    def reserve_when_refused(*args: Any, **kwargs: Any) -> Any:  # the real statement, a little later
        if kwargs["args"] == {"who": "y"}:
            reserving.set()
            assert refused.wait(10)
        return real_reserve(*args, **kwargs)

    def first(state: State) -> State:
        return {"out": [ping(who="x")["request"]]}

    def replay(state: State) -> State:
        with ContextThreadPoolExecutor(max_workers=1) as ex:
            racing = ex.submit(ping, who="y")
            assert reserving.wait(10)
            with pytest.raises(effects.UnstablePosition):
                ping(who="z")
            refused.set()
            return {"out": [racing.result()]}

    ctx = _ctx(pool)
    for name, node in (("a", first), ("b", replay)):
        g: StateGraph[State] = StateGraph(State)
        g.add_node("fan", node)
        g.add_edge(START, "fan")
        g.add_edge("fan", END)
        if name == "b":
            monkeypatch.setattr(store, "reserve_effect", reserve_when_refused)
        with context.activate(ctx):
            if name == "a":
                g.compile(checkpointer=InMemorySaver()).invoke(
                    {"out": []}, {"configurable": {"thread_id": name}}
                )
            else:
                with pytest.raises(errors.NeedsHuman, match="raced this one") as stopped:
                    g.compile(checkpointer=InMemorySaver()).invoke(
                        {"out": []}, {"configurable": {"thread_id": name}}
                    )
    assert deliveries(url, "who") == {"x": 1}
    (row,) = store.list_effects(pool, "t")
    assert stopped.value.key == row.idempotency_key  # the run's error names the row a human looks at
    assert row.divergences == 1 and row.args == {"who": "x"} and row.diverged_args == {"who": "y"}
