"""Postgres round trips per effect, the zombie write refusal, retries: the effect API in-process.

Round trips are counted client-side with a cursor class that counts ``execute`` calls on autocommit
connections (each is one Parse/Bind/Execute/Sync flight: one round trip).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import psycopg_pool
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from agent_worker import context, effects
from agentrun_core import errors, store
from agentrun_dev import http_provider
from tests.support import pg

pytestmark = pytest.mark.postgres

EXECUTES = 0


class CountingCursor(psycopg.Cursor[Any]):
    def execute(self, *args: Any, **kwargs: Any) -> Any:
        global EXECUTES
        EXECUTES += 1
        return super().execute(*args, **kwargs)


class State(TypedDict, total=False):
    out: Annotated[list[Any], operator.add]


@pytest.fixture
def pool(pg_dsn: str) -> Iterator[psycopg_pool.ConnectionPool[Any]]:
    with psycopg_pool.ConnectionPool(
        pg_dsn,
        min_size=1,
        max_size=2,
        kwargs={"autocommit": True, "cursor_factory": CountingCursor},
        open=True,
    ) as p:
        yield p


def charge_tool(url: str, calls: list[str]) -> effects.Tool[Any, Any]:
    @effects.tool(name="charge", dedupes_by_key=True, retry=effects.RetryPolicy(initial_backoff=0.01))
    def charge(call: effects.Call, *, cents: int) -> Any:
        calls.append(call.idempotency_key)
        status, body, headers = http_provider.request(
            f"{url}/effects", "POST", {"cents": cents}, {"Idempotency-Key": call.idempotency_key}
        )
        if status in (429, 503):
            raise effects.Retryable(f"HTTP {status}", retry_after=float(headers.get("Retry-After", "0")))
        return effects.Outcome(body, provider_ref=body["id"])

    return charge


def pay_graph(tool: effects.Tool[Any, Any], n: int = 1) -> Any:
    def node(state: State) -> State:
        return {"out": [tool(cents=i) for i in range(n)]}

    g: StateGraph[State] = StateGraph(State)
    g.add_node("pay", node)
    g.add_edge(START, "pay")
    g.add_edge("pay", END)
    return g.compile(checkpointer=InMemorySaver())


def _setup(pool: psycopg_pool.ConnectionPool[Any], epoch: int = 1) -> context.RunContext:
    pg.admit(pool, run_id="r", graph="x:y")
    store.claim_run(pool, run_id="r", epoch=epoch, holder="p")
    return context.RunContext(conn=pool, run_id="r", attempt=1, epoch=epoch, sleep=lambda s: None)


def test_happy_path_is_two_round_trips_and_replay_two(
    pool: psycopg_pool.ConnectionPool[Any], provider_url: str
) -> None:
    global EXECUTES
    ctx = _setup(pool)
    calls: list[str] = []
    graph = pay_graph(charge_tool(provider_url, calls), n=5)
    with context.activate(ctx):
        EXECUTES = 0
        graph.invoke({}, {"configurable": {"thread_id": "a"}})
        first = EXECUTES
        EXECUTES = 0
        graph.invoke({}, {"configurable": {"thread_id": "b"}})  # same run, same step: all replays
        replay = EXECUTES
    print(f"\nPostgres round trips: {first / 5:g} per new effect, {replay / 5:g} per replayed effect")
    assert first == 2 * 5  # reserve_new_effect, record_effect
    # A replay finds the key taken by the first statement, and reserve_effect returns the row: two, where one
    # statement doing both cost every new effect ~9 % of P2's throughput (docs/dev/performance.md, "Kept").
    assert replay == 2 * 5
    assert len(calls) == 5  # the replay called the provider zero times
    effects_ = store.list_effects(pool, "r")
    # Position keys: five charges in one step are occurrences 0..4 of the action, whatever their arguments.
    assert sorted(e.occurrence for e in effects_) == [0, 1, 2, 3, 4]
    assert all(e.status == "sent" for e in effects_)
    assert all(e.duplicates_prevented == 1 for e in effects_)


def test_two_identical_calls_in_one_step_are_two_effects(
    pool: psycopg_pool.ConnectionPool[Any], provider_url: str
) -> None:
    ctx = _setup(pool)
    calls: list[str] = []
    tool = charge_tool(provider_url, calls)

    def node(state: State) -> State:
        return {"out": [tool(cents=1), tool(cents=1)]}

    g: StateGraph[State] = StateGraph(State)
    g.add_node("pay", node)
    g.add_edge(START, "pay")
    g.add_edge("pay", END)
    with context.activate(ctx):
        g.compile(checkpointer=InMemorySaver()).invoke({}, {"configurable": {"thread_id": "a"}})
    assert len(set(calls)) == 2
    assert sorted(e.occurrence for e in store.list_effects(pool, "r")) == [0, 1]


def test_zombie_epoch_write_is_refused_before_any_provider_call(
    pool: psycopg_pool.ConnectionPool[Any], provider_url: str
) -> None:
    zombie = _setup(pool, epoch=1)
    store.claim_run(pool, run_id="r", epoch=2, holder="newer")  # a newer attempt took the run
    calls: list[str] = []
    graph = pay_graph(charge_tool(provider_url, calls))
    with context.activate(zombie), pytest.raises(errors.Fenced):
        graph.invoke({}, {"configurable": {"thread_id": "a"}})
    assert calls == []
    assert http_provider.stats(provider_url)["requests"] == 0
    assert store.list_effects(pool, "r") == []
    assert zombie.stop is not None  # sticky: every later effect refuses at once


def test_lease_past_renew_deadline_stops_effects(
    pool: psycopg_pool.ConnectionPool[Any], provider_url: str
) -> None:
    ctx = _setup(pool)
    ctx.may_act = lambda: False
    calls: list[str] = []
    with context.activate(ctx), pytest.raises(errors.Fenced, match="lease not held"):
        pay_graph(charge_tool(provider_url, calls)).invoke({}, {"configurable": {"thread_id": "a"}})
    assert calls == [] and store.list_effects(pool, "r") == []


def test_retry_after_429_is_honoured_and_attempts_are_in_the_ledger(
    pool: psycopg_pool.ConnectionPool[Any], provider_url: str
) -> None:
    ctx = _setup(pool)
    slept: list[float] = []
    ctx.sleep = slept.append
    http_provider.request(
        f"{provider_url}/control/faults", "POST", {"mode": "429", "count": 2, "retry_after": 1.5}
    )
    calls: list[str] = []
    with context.activate(ctx):
        pay_graph(charge_tool(provider_url, calls)).invoke({}, {"configurable": {"thread_id": "a"}})
    (effect,) = store.list_effects(pool, "r")
    assert effect.status == "sent" and effect.attempts == 3 and effect.provider_ref
    assert len(calls) == 3 and len(slept) == 2 and all(1.5 <= s <= 1.66 for s in slept)


def test_non_retryable_error_fails_fast(pool: psycopg_pool.ConnectionPool[Any]) -> None:
    ctx = _setup(pool)
    calls: list[int] = []

    @effects.tool(name="bad")
    def bad(call: effects.Call, *, cents: int) -> Any:
        calls.append(cents)
        raise effects.Permanent("HTTP 400 invalid")

    with context.activate(ctx), pytest.raises(errors.EffectFailed, match="non-retryable"):
        pay_graph(bad).invoke({}, {"configurable": {"thread_id": "a"}})  # type: ignore[arg-type]
    (effect,) = store.list_effects(pool, "r")
    assert calls == [0] and effect.status == "failed" and effect.attempts == 1


def test_read_only_run_refuses_new_effects(pool: psycopg_pool.ConnectionPool[Any], provider_url: str) -> None:
    ctx = _setup(pool)
    store.set_read_only(pool, "r", True)
    calls: list[str] = []
    with context.activate(ctx), pytest.raises(errors.ReadOnlyRun):
        pay_graph(charge_tool(provider_url, calls)).invoke({}, {"configurable": {"thread_id": "a"}})
    assert calls == []


def test_unserialisable_arguments_are_refused_with_the_path(pool: psycopg_pool.ConnectionPool[Any]) -> None:
    ctx = _setup(pool)

    @effects.tool(name="t")
    def t(call: effects.Call, *, when: Any) -> Any:
        return 1

    def node(state: State) -> State:
        return {"out": [t(when={"at": {1, 2}})]}

    g: StateGraph[State] = StateGraph(State)
    g.add_node("n", node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    with context.activate(ctx), pytest.raises(TypeError, match=r"^args\.when\.at: builtins\.set"):
        g.compile(checkpointer=InMemorySaver()).invoke({}, {"configurable": {"thread_id": "a"}})


def test_ambiguous_failure_is_reconciled_by_lookup_not_blind_retry(
    pool: psycopg_pool.ConnectionPool[Any],
) -> None:
    ctx = _setup(pool)
    performed: list[str] = []
    lookups: list[str] = []

    def lookup(key: str, args: dict[str, Any]) -> Any:
        lookups.append(key)
        return {"found": True} if performed else None

    @effects.tool(name="flaky", lookup=lookup, timeout=0.05, retry=effects.RetryPolicy(max_attempts=3))
    def flaky(call: effects.Call, *, cents: int) -> Any:
        if call.attempt == 1:
            raise TimeoutError("read timed out")  # did it happen? only the lookup can say
        performed.append(call)
        raise TimeoutError("read timed out after sending")

    with context.activate(ctx):
        out = pay_graph(flaky).invoke({}, {"configurable": {"thread_id": "a"}})  # type: ignore[arg-type]
    assert out["out"] == [{"found": True}]
    assert len(lookups) == 2 and len(performed) == 1  # never a third blind call
    (effect,) = store.list_effects(pool, "r")
    assert effect.status == "sent" and effect.attempts == 2


def test_ambiguous_failure_without_budget_fails_after_lookup(pool: psycopg_pool.ConnectionPool[Any]) -> None:
    ctx = _setup(pool)
    calls: list[int] = []

    @effects.tool(
        name="down", lookup=lambda key, args: None, timeout=0.05, retry=effects.RetryPolicy(max_attempts=2)
    )
    def down(call: effects.Call, *, cents: int) -> Any:
        calls.append(call.attempt)
        raise TimeoutError("timed out")

    with context.activate(ctx), pytest.raises(errors.EffectFailed, match="out of attempts"):
        pay_graph(down).invoke({}, {"configurable": {"thread_id": "a"}})  # type: ignore[arg-type]
    (effect,) = store.list_effects(pool, "r")
    assert calls == [1, 2] and effect.status == "failed" and effect.attempts == 2
