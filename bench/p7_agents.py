"""P7: a turn of a real agent (``create_agent``, a model asking for 2 tool calls at once, each an effect)
through the worker vs the same agent on bare LangGraph + ``PostgresSaver`` with raw idempotency keys.

Variants, alternating (``bench/agents.py``): ``worker`` — ``agent_<n>`` run by ``agent_worker.runner.run`` in
this process as its namespace's role (as P1), each tool call an effect through the ledger; ``bare`` —
``agentbare_<n>`` compiled with ``PostgresSaver`` and invoked, each tool call handing a raw key (the thread
and the call's id) to the provider; ``floor`` — ``agentpair_<n>``: bare plus one raw INSERT and one raw
UPDATE per call, each its own commit (what a ledger that commits before and after a call costs at least).
``sync`` durability (issue 38's target is ``sync``). A turn is a model step and its tool tasks; "per turn" is
from the first model call to the final answer's, divided by the turns; "whole attempt / n" includes the
attempt's fixed cost. Each repetition is the mean of ``ATTEMPTS_PER_REP`` attempts (full mode), as P1's
effect rows: one attempt lasts well under a second.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from langgraph.checkpoint.postgres import PostgresSaver

from bench import agents, db, graphs, stats

ATTEMPTS_PER_REP = 5
INPUT: dict[str, Any] = {"messages": [{"role": "user", "content": "notify everyone"}]}


def _split(t0: float, t1: float, turns: int) -> dict[str, float]:
    marks = graphs.MARKS  # one per model call: turns + 1 (the final answer)
    return {"total": (t1 - t0) / turns, "turn": (marks[-1] - marks[0]) / turns}


def worker_attempt(dsn: str, turns: int) -> dict[str, float]:
    run_id, tenant = db.admit(dsn, f"bench.agents:agent_{turns}", input=INPUT)
    code, t0, t1 = graphs.timed_attempt(tenant.dsn, run_id)
    if code != 0:
        raise RuntimeError(f"worker attempt of agent_{turns} exited {code}")
    return _split(t0, t1, turns)


def bare_attempt(dsn: str, turns: int, *, pairs: bool = False) -> dict[str, float]:
    graphs.MARKS.clear()
    t0 = time.perf_counter()
    with db.pool(dsn, size=4) as p:
        graphs.PAIR_POOL = p
        try:
            agent = agents.build(f"{'agentpair' if pairs else 'agentbare'}_{turns}")
            bound = agent.copy(update={"checkpointer": PostgresSaver(p)})
            config: Any = {"configurable": {"thread_id": str(uuid.uuid4())}}
            bound.invoke(INPUT, config, durability="sync")
        finally:
            graphs.PAIR_POOL = None
    t1 = time.perf_counter()
    return _split(t0, t1, turns)


def _ms(timings: list[Mapping[str, float]], key: str) -> list[float]:
    return [1000 * t[key] for t in timings]


def run(report: stats.Report, *, quick: bool, reps: int) -> None:
    section = (
        f"P7 real agents: a create_agent turn ({agents.CALLS_PER_TURN} parallel tool calls, each an effect) "
        "vs bare LangGraph + PostgresSaver with raw idempotency keys, sync"
    )
    report.section(section)
    turns = 3 if quick else 10
    k = 1 if quick else ATTEMPTS_PER_REP
    with (
        db.fresh_database("p7") as dsn,
        db.fresh_database("p7bare", agentrun=False) as bare_dsn,
    ):
        with db.pool(bare_dsn, size=1) as p, p.connection() as conn:
            conn.execute(graphs.RAW_TABLE)
        worker_attempt(dsn, 1)  # warm imports and the server's caches
        bare_attempt(bare_dsn, 1)
        variants: dict[str, Callable[[], Mapping[str, float]]] = {
            "worker": functools.partial(worker_attempt, dsn, turns),
            "bare": functools.partial(bare_attempt, bare_dsn, turns),
            "floor": functools.partial(bare_attempt, bare_dsn, turns, pairs=True),
        }
        if k > 1:
            variants = {name: stats.averaged(v, k) for name, v in variants.items()}
        res = stats.alternate(variants, reps)
    w, b, f = res["worker"], res["bare"], res["floor"]
    label = f"{turns} turns"
    for row in (
        stats.Row(f"{label}: per turn", _ms(w, "turn"), _ms(b, "turn")),
        stats.Row(f"{label}: per turn (whole attempt / n)", _ms(w, "total"), _ms(b, "total")),
        stats.Row(f"{label}: per turn vs bare + raw pair per call", _ms(w, "turn"), _ms(f, "turn")),
        stats.Row(f"{label}: per turn, bare + raw pair per call vs bare", _ms(f, "turn"), _ms(b, "turn")),
    ):
        report.add(section, row)
