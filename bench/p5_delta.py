"""P5 with LangGraph 1.2's ``DeltaChannel``: chat storage per turn and resume time, short and long chat.

``delta_<n>`` (bench/graphs.py: ``messages`` a ``DeltaChannel``, default snapshot frequency) runs ``n`` turns
through the worker path and parks on an approval; its checkpoint bytes (``pg_column_size`` of its rows, as
stored) divided by ``n`` are its bytes per turn. The target: flat within 1.2x from the short chat to the long
one. Beside it, in the same run, ``chat_<n>`` (``add_messages`` in a plain channel) on bare ``PostgresSaver``:
its whole message list is stored at every step, so its bytes per turn grow with the chat.

Resume: the approval decided, a new worker attempt resumes the parked run from its head at turn ``n`` (it
claims the run, rebuilds ``messages`` from the snapshot and the writes after it, runs the last step,
finishes): the seconds to that step's start, and to the attempt's end, once per chat length. The end includes
the run's result (``results.summarise`` of the final state: every message's repr, ~3.5 ms each, measured
at 500 turns), which grows with the chat whatever the channel. The state load alone (``get_state`` at the
head, what every resume does first), repeated: the worker's saver for the delta chat, bare ``PostgresSaver``
for the plain one.
Target: resume at the long chat ≤ 2x of the short one. Timing is printed, never asserted.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from langgraph.checkpoint.postgres import PostgresSaver

from agent_worker import checkpointer
from agentrun_core import store
from agentrun_core.api import protocol
from bench import db, graphs, stats


def _park(dsn: str, n: int) -> str:
    """A ``delta_<n>`` run through the worker path, parked after its ``n`` turns: its id."""
    run_id, tenant = db.admit(dsn, f"bench.graphs:delta_{n}")
    code, _, _ = graphs.timed_attempt(tenant.dsn, run_id)
    if code != protocol.EXIT_PARKED:
        raise RuntimeError(f"delta_{n}: the first attempt exited {code}, not parked")
    return run_id


def _resume_seconds(dsn: str, run_id: str) -> tuple[float, float]:
    """Decide the parked run's approval, then time the attempt that resumes it: (to its first step's start,
    to its end)."""
    with db.pool(dsn, size=1) as p:
        (pending,) = [a for a in store.list_approvals(p, run_id) if a.status == "pending"]
        store.decide_approval(
            p, approval_id=pending.approval_id, run_id=run_id, decision="approved", decided_by="bench"
        )
    code, t0, t1 = graphs.timed_attempt(db.tenant(dsn).dsn, run_id)
    if code != 0 or not graphs.MARKS:
        raise RuntimeError(
            f"the resumed attempt of {run_id} exited {code} (steps marked: {len(graphs.MARKS)})"
        )
    return graphs.MARKS[0] - t0, t1 - t0


def _load_seconds(saver: Any, graph: str, thread: str, reps: int) -> list[float]:
    """``get_state`` at the head, ``reps`` times: what each resume reads before its first step."""
    compiled = graphs.build(graph).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": thread}}
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        state = compiled.get_state(config)
        times.append(time.perf_counter() - t0)
    assert state.values.get("messages"), f"{graph}: no messages read back"
    return times


def _bare_chat(dsn: str, n: int) -> str:
    thread = str(uuid.uuid4())
    with db.pool(dsn) as p:
        compiled = graphs.build(f"chat_{n}").compile(checkpointer=PostgresSaver(p))
        compiled.invoke({}, {"configurable": {"thread_id": thread}}, durability="sync")
    return thread


def _checkpoint_bytes(dsn: str, thread: str) -> int:
    return db.total(db.run_bytes(dsn, thread), db.CHECKPOINT_TABLES)[1]


def run(report: stats.Report, dsn: str, *, quick: bool, reps: int) -> None:
    section = "P5 DeltaChannel: chat bytes per turn and resume time, short vs long chat"
    report.section(section)
    short, long = (10, 40) if quick else (50, 500)
    loads = max(3, reps)
    per_turn: dict[str, dict[int, float]] = {"delta": {}, "bare": {}}
    resume: dict[int, tuple[float, float]] = {}
    load: dict[str, dict[int, list[float]]] = {"delta": {}, "bare": {}}
    for n in (short, long):
        run_id = _park(dsn, n)
        per_turn["delta"][n] = _checkpoint_bytes(dsn, run_id) / n
        with db.pool(dsn) as p:
            saver = checkpointer.FencedSaver(p, run_id=run_id, epoch=0)  # reads only: never fenced
            load["delta"][n] = _load_seconds(saver, f"delta_{n}", run_id, loads)
        resume[n] = _resume_seconds(dsn, run_id)
        thread = _bare_chat(dsn, n)
        per_turn["bare"][n] = _checkpoint_bytes(dsn, thread) / n
        with db.pool(dsn) as p:
            load["bare"][n] = _load_seconds(PostgresSaver(p), f"chat_{n}", thread, loads)
    bytes_per_turn = {kind: {n: [b] for n, b in by_n.items()} for kind, by_n in per_turn.items()}
    load_ms = {kind: {n: [s * 1000 for s in ss] for n, ss in by_n.items()} for kind, by_n in load.items()}
    to_first, to_end = ({n: [times[i] * 1000] for n, times in resume.items()} for i in (0, 1))
    # (figure, {turns: values}, unit, note): each figure is its values at the long chat vs the short one.
    long_vs_short: list[tuple[str, dict[int, list[float]], str, str]] = [
        (
            f"DeltaChannel chat (worker): checkpoint bytes per turn at {long} turns vs {short} "
            "(target <= 1.2x)",
            bytes_per_turn["delta"],
            "B",
            "",
        ),
        (
            f"add_messages chat (bare PostgresSaver): checkpoint bytes per turn at {long} turns vs {short}",
            bytes_per_turn["bare"],
            "B",
            "",
        ),
        (
            f"DeltaChannel chat: resume to the first step at turn {long} vs turn {short} (target <= 2x)",
            to_first,
            "ms",
            "one attempt each: claim, the head read and its messages rebuilt, the step started",
        ),
        (
            f"DeltaChannel chat: resumed attempt to its end at turn {long} vs turn {short}",
            to_end,
            "ms",
            "with the run's result: the final state's JSON, every message's repr",
        ),
        (
            f"DeltaChannel chat: state load at the head at turn {long} vs turn {short} (worker's saver)",
            load_ms["delta"],
            "ms",
            "",
        ),
        (
            f"add_messages chat: state load at the head at turn {long} vs turn {short} (bare PostgresSaver)",
            load_ms["bare"],
            "ms",
            "",
        ),
    ]
    rows = [
        stats.Row(figure, by_n[long], by_n[short], unit=unit, note=note)
        for figure, by_n, unit, note in long_vs_short
    ]
    rows.insert(  # after the bytes per turn: the two stores side by side at the long chat
        2,
        stats.Row(
            f"{long}-turn chat: checkpoint bytes per turn, DeltaChannel (worker) vs add_messages (bare)",
            bytes_per_turn["delta"][long],
            bytes_per_turn["bare"][long],
            unit="B",
        ),
    )
    for row in rows:
        report.add(section, row)
