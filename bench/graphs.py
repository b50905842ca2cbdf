"""The benchmark's graphs, named ``bench.graphs:<kind>_<n>`` so the worker loads them like any run's graph.

* ``noop_<n>``: one node looping ``n`` times — ``n`` steps, each one checkpoint, no work;
* ``effect_<n>``: the same loop with one no-op effect through the ledger per step (``effects.tool``);
* ``pair_<n>``: the same loop with one raw INSERT and one raw UPDATE per step, each its own commit, through
  ``PAIR_POOL`` (the floor of a ledger that commits before a call and after it, with none of its checks);
* ``burst_<n>``: one step making ``n`` effects (ledger throughput), marking after each (``EFFECT_MARKS``);
* ``chat_<n>``: ``n`` turns appending two messages each with ``add_messages`` (storage growth);
* ``delta_<n>``: the same chat with ``messages`` a LangGraph 1.2 ``DeltaChannel`` (default snapshot
  frequency), then a park (an approval: the run resumes from its head at turn ``n``);
* ``slow_<n>``: ``n`` steps of 0.2 s each (a run to evict mid-way);
* ``park``: interrupts at once (a run parked on approval).

Nodes append ``time.perf_counter()`` at their start and end to ``MARKS`` (same process only), so a benchmark
can split an attempt into before-the-first-step, steps and after-the-last-step (and, with ``trip_count`` set,
its round trips the same way, in ``TRIP_MARKS``).
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

from agent_worker import effects, runner
from agent_worker import settings as settings_mod

MARKS: list[float] = []  # perf_counter at each node's start and end, in order (timed_attempt clears it)
EFFECT_MARKS: list[float] = []  # burst_<n>: perf_counter before the first effect and after each
# While a benchmark counts round trips (bench/p1_steps.py), the count at each mark, beside MARKS.
TRIP_MARKS: list[int] = []
trip_count: Callable[[], int] | None = None
# pair_<n>: the pool its raw commits go through (set by the benchmark; its database has RAW_TABLE).
PAIR_POOL: Any = None
# Raw commits, the ledger's floor: P1's pair_<n> and P2's baselines (raw_commits).
RAW_TABLE = "CREATE TABLE IF NOT EXISTS bench_raw (id bigserial PRIMARY KEY, k text UNIQUE, v jsonb)"
_RAW_INSERT = "INSERT INTO bench_raw (k, v) VALUES (%s, %s::jsonb) RETURNING id"
_RAW_UPDATE = "UPDATE bench_raw SET v = %s::jsonb WHERE id = %s"
# Set in a worker subprocess's environment: nodes print "BENCH_MARK start|end <unix time>" to stderr.
_PRINT_MARKS = bool(os.environ.get("AGENTRUN_BENCH_MARKS"))


def _mark(label: str) -> None:
    MARKS.append(time.perf_counter())
    if trip_count is not None:
        TRIP_MARKS.append(trip_count())
    if _PRINT_MARKS:
        print(f"BENCH_MARK {label} {time.time():.6f}", file=sys.stderr, flush=True)


class Loop(TypedDict, total=False):
    i: int


class Chat(TypedDict, total=False):
    i: int
    messages: Annotated[list[Any], add_messages]


def add_message_batches(current: list[Any], batches: Any) -> list[Any]:
    """DeltaChannel's reducer: ``add_messages`` folded over a batch of writes."""
    out: Any = list(current or [])
    for batch in batches:
        out = add_messages(out, batch)
    return list(out)


class DeltaChat(TypedDict, total=False):
    i: int
    messages: Annotated[list[Any], DeltaChannel(add_message_batches)]


@effects.tool(name="bench_noop", dedupes_by_key=True)
def noop_effect(call: effects.Call, *, i: int) -> dict[str, int]:
    return {"i": i}


def raw_commits(conn: Any, key: str, *, pair: bool) -> None:
    """One raw INSERT of a row of ``RAW_TABLE`` and, with ``pair``, one UPDATE of it: on an autocommit
    connection each its own commit, as the ledger's reserve and record."""
    row = conn.execute(_RAW_INSERT, (key, '{"status": "pending"}')).fetchone()
    if pair and row is not None:
        conn.execute(_RAW_UPDATE, ('{"status": "sent"}', row[0]))


def _raw_pair(i: int) -> None:
    with PAIR_POOL.connection() as conn:
        raw_commits(conn, f"{uuid.uuid4().hex}-{i}", pair=True)


def _loop(n: int, with_effect: bool, sleep: float = 0.0, pair: bool = False) -> StateGraph[Loop]:
    def step(state: Loop) -> Loop:
        _mark("start")
        i = state.get("i", 0)
        if with_effect:
            noop_effect(i=i)
        if pair:
            _raw_pair(i)
        if sleep:
            time.sleep(sleep)
        _mark("end")
        return {"i": i + 1}

    g: StateGraph[Loop] = StateGraph(Loop)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.get("i", 0) < n else END, ["step", END])
    return g


def _burst(n: int) -> StateGraph[Loop]:
    def burst(state: Loop) -> Loop:
        _mark("start")
        EFFECT_MARKS[:] = [time.perf_counter()]
        for i in range(n):
            noop_effect(i=i)
            EFFECT_MARKS.append(time.perf_counter())
        _mark("end")
        return {"i": n}

    g: StateGraph[Loop] = StateGraph(Loop)
    g.add_node("burst", burst)
    g.add_edge(START, "burst")
    g.add_edge("burst", END)
    return g


def _chat(n: int, delta: bool = False) -> StateGraph[Any]:
    def turn(state: Any) -> dict[str, Any]:  # not Chat: the delta chat has its own schema
        _mark("start")
        i = state.get("i", 0)
        _mark("end")
        return {
            "i": i + 1,
            "messages": [
                {"role": "user", "content": f"question {i}: " + "lorem ipsum dolor sit amet " * 4},
                {"role": "assistant", "content": f"answer {i}: " + "consectetur adipiscing elit " * 8},
            ],
        }

    def park(state: Any) -> dict[str, Any]:
        _mark("start")  # resumed: the first step after the state was rebuilt (bench/p5_delta.py)
        interrupt({"question": "go on?"})
        return {}

    g: StateGraph[Any] = StateGraph(DeltaChat if delta else Chat)
    g.add_node("turn", turn)
    g.add_edge(START, "turn")
    last = "park" if delta else END
    if delta:
        g.add_node("park", park)
        g.add_edge("park", END)
    g.add_conditional_edges("turn", lambda s: "turn" if s.get("i", 0) < n else last, ["turn", last])
    return g


def _park() -> StateGraph[Loop]:
    def ask(state: Loop) -> Loop:
        answer = interrupt({"question": "go?"})
        return {"i": 1 if answer else 0}

    g: StateGraph[Loop] = StateGraph(Loop)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g


def build(name: str) -> StateGraph[Any]:
    """``noop_100`` → the builder; a clear error for anything else."""
    if name == "park":
        return _park()
    kind, _, count = name.rpartition("_")
    if not count.isdigit() or kind not in ("noop", "effect", "pair", "burst", "chat", "delta", "slow"):
        raise AttributeError(
            f"bench.graphs has no graph {name!r} "
            "(noop_N, effect_N, pair_N, burst_N, chat_N, delta_N, slow_N, park)"
        )
    n = int(count)
    if kind == "burst":
        return _burst(n)
    if kind in ("chat", "delta"):
        return _chat(n, delta=kind == "delta")
    return _loop(n, with_effect=kind == "effect", sleep=0.2 if kind == "slow" else 0.0, pair=kind == "pair")


def __getattr__(name: str) -> Any:
    # graphs.load() resolves ``bench.graphs:noop_100`` with getattr: each name is a factory.
    if name.startswith("__"):
        raise AttributeError(name)
    build(name)  # validate now: a bad name is an AttributeError, as for any missing attribute
    return lambda: build(name)


def timed_attempt(dsn: str, run_id: str) -> tuple[int, float, float]:
    """One attempt of the worker at run ``run_id`` in this process, as the operator's Pod would run it
    (``dsn``: its tenant's; no Lease): its exit code and ``perf_counter`` before and after, ``MARKS`` cleared
    first so they hold this attempt's steps only."""
    config = settings_mod.WorkerSettings(
        run_id=run_id, dsn=dsn, pod_name=f"bench-{uuid.uuid4().hex[:8]}", lease_mode="none"
    )
    MARKS.clear()
    t0 = time.perf_counter()
    code = runner.run(config)
    return code, t0, time.perf_counter()
