"""P1: per-step cost of the worker path vs bare LangGraph + PostgresSaver.

The worker path is ``agent_worker.runner.run`` in this process (admission read, claim, attempt rows, the
graph with PostgresSaver, step events, finish; ``AGENTRUN_LEASE_MODE=none``, so no API server and no process
start — P3 measures those), connected as its namespace's role under row-level security, as every worker is.
The baseline opens a pool, compiles the same graph with ``PostgresSaver`` and ``invoke``s it with the same
durability, as the admin (a bare user has no tenants). Both include opening and closing their pool.

Per attempt it splits the wall time into: before the first step (start → first node starts), the steps
(first node start → last node end, divided by n - 1 for the marginal cost), after the last step (last node
end → return). Statements per step are counted in a separate, untimed pass.

The marginal step is also split in two, against a third variant: the same worker path on a database with the
checkpoint fence and row-level security off (``db.unguard``). "vs fence+RLS off" is what those two safety
layers cost; "fence+RLS off, vs bare" is what the rest of the worker path costs.

The steps with an effect are measured once more against the floor of the ledger's order: the bare steps, each
making one raw INSERT and one raw UPDATE of a one-index table, each its own commit (``bench.graphs:pair_n``):
what any ledger that commits before a call and after it costs at least. "vs bare + raw pair" is what ours
costs beyond that floor; "bare + raw pair vs bare" is that floor itself, against the target's baseline.

A repetition of the steps with an effect is the mean of ``EFFECT_ATTEMPTS_PER_REP`` attempts of each variant
(full mode): one such attempt lasts 30-70 ms, and runs that short jumped between repetitions (spreads of
±20-110 %), as P2's short baselines did.

The dev cluster's Postgres does not flush commits (``fsync=off``): its figures are CPU and round trips. The
``sync`` attempts run once more on a durable server (every commit flushed, as production runs): "durable
server" rows, worker and bare each on it.
"""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from langgraph.checkpoint.postgres import PostgresSaver

from agentrun_core.store import connect
from bench import db, graphs, stats

Durability = Literal["sync", "async", "exit"]


class Timing(dict[str, float]):
    """total, before, steps (marginal per step), after — seconds."""


# Attempts of each variant averaged into one repetition of the steps with an effect (full mode; module doc).
EFFECT_ATTEMPTS_PER_REP = 5

LAST_RUN_ID: list[str] = []  # the run id of the latest worker_attempt (P5 reads its rows)


def _split(t0: float, t1: float, n: int) -> Timing:
    marks = graphs.MARKS
    first, last = marks[0], marks[-1]
    return Timing(
        total=t1 - t0,
        before=first - t0,
        marginal=(last - first) / max(1, n - 1),
        after=t1 - last,
    )


def worker_attempt(
    dsn: str, graph: str, durability: Durability, *, uncounted_admission: bool = False
) -> Timing:
    """One attempt through the worker path, the worker connected as its namespace's role (``db.tenant``),
    as the operator runs it; ``uncounted_admission``: the bench's own admission statement is taken off the
    statement / round-trip counters (what the operator does is not the worker's cost)."""
    run_id, tenant = db.admit(dsn, f"bench.graphs:{graph}", durability=durability)
    if uncounted_admission:
        db.Counter.reset()
        db.RoundTrips.reset()
    LAST_RUN_ID[:] = [run_id]
    code, t0, t1 = graphs.timed_attempt(tenant.dsn, run_id)
    if code != 0:
        raise RuntimeError(f"worker attempt of {graph} ({durability}) exited {code}")
    return _split(t0, t1, _steps(graph))


def bare_attempt(
    dsn: str, graph: str, durability: Durability, counting: bool = False, pairs: bool = False
) -> Timing:
    """The same steps with bare ``PostgresSaver``, without the effect (the ledger is what is measured against
    it); ``pairs``: each step makes a raw INSERT + UPDATE pair instead (``pair_n``: the ledger's floor)."""
    kind, _, n = graph.rpartition("_")
    name = f"pair_{n}" if pairs else f"{'noop' if kind == 'effect' else kind}_{n}"
    graphs.MARKS.clear()
    t0 = time.perf_counter()
    with db.pool(dsn, counting=counting, size=4) as p:
        graphs.PAIR_POOL = p
        try:
            compiled = graphs.build(name).compile(checkpointer=PostgresSaver(p))
            compiled.invoke({}, {"configurable": {"thread_id": str(uuid.uuid4())}}, durability=durability)
        finally:
            graphs.PAIR_POOL = None
    t1 = time.perf_counter()
    return _split(t0, t1, _steps(graph))


Variants = dict[str, Callable[[], Mapping[str, float]]]


def _averaged(variants: Variants, k: int) -> Variants:
    """Each variant's repetition made of ``k`` attempts (the steps with an effect: module doc)."""
    return {name: stats.averaged(attempt, k) for name, attempt in variants.items()} if k > 1 else variants


def _floor_table(bare_dsn: str) -> None:
    """The raw pairs' table, in the bare database (``bench.graphs.RAW_TABLE``)."""
    with db.pool(bare_dsn, size=1) as p, p.connection() as conn:
        conn.execute(graphs.RAW_TABLE)


def _floor_rows(label: str, w: list[Timing], b: list[Timing], f: list[Timing], n: int) -> list[stats.Row]:
    """The steps with an effect against the ledger's floor (``pairs``), and that floor against bare."""
    return [
        stats.Row(f"{label}: per step vs bare + raw pair", _ms(w, "total", n), _ms(f, "total", n)),
        stats.Row(f"{label}: marginal step vs bare + raw pair", _ms(w, "marginal"), _ms(f, "marginal")),
        stats.Row(f"{label}: marginal step, bare + raw pair vs bare", _ms(f, "marginal"), _ms(b, "marginal")),
    ]


def _steps(graph: str) -> int:
    return int(graph.rpartition("_")[2])


@contextlib.contextmanager
def counting_worker_pools() -> Iterator[None]:
    """Make the worker's own pool count statements (``runner.run`` builds it with ``connect.open_pool``)."""
    original = connect.RecentFirstPool

    class Counting(original):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["kwargs"] = {**(kwargs.get("kwargs") or {}), "cursor_factory": db.CountingCursor}
            super().__init__(*args, **kwargs)

    connect.RecentFirstPool = Counting  # type: ignore[misc]
    try:
        yield
    finally:
        connect.RecentFirstPool = original  # type: ignore[misc]


Pair = tuple[float, float]


class Counts(dict[str, float]):
    """statements, trips (per step); trips_before (start → first node), trips_after (last node → return)."""


def statements(dsn: str, bare_dsn: str, graph: str, durability: Durability) -> tuple[Counts, Counts]:
    """Statements and round trips of (worker, bare), counted client-side over one attempt each."""
    n = _steps(graph)
    db.Counter.reset()
    db.RoundTrips.reset()
    graphs.trip_count = lambda: db.RoundTrips.value
    try:
        with db.counting_round_trips():
            graphs.TRIP_MARKS.clear()
            with counting_worker_pools():
                worker_attempt(dsn, graph, durability, uncounted_admission=True)
            ours = _counts(n, db.Counter.reset(), db.RoundTrips.reset())
            graphs.TRIP_MARKS.clear()
            bare_attempt(bare_dsn, graph, durability, counting=True)
            base = _counts(n, db.Counter.reset(), db.RoundTrips.reset())
    finally:
        graphs.trip_count = None
    return ours, base


def _counts(n: int, statements_: int, trips: int) -> Counts:
    marks = graphs.TRIP_MARKS
    return Counts(
        statements=statements_ / n,
        trips=trips / n,
        trips_before=float(marks[0]) if marks else 0.0,
        trips_after=float(trips - marks[-1]) if marks else 0.0,
    )


def _ms(timings: list[Timing], key: str, per: int = 1) -> list[float]:
    """One figure of each attempt's ``Timing``, in milliseconds (``per``: divided by the steps)."""
    return [1000 * t[key] / per for t in timings]


def run(report: stats.Report, *, quick: bool, reps: int) -> None:
    section = "P1 per-step cost: worker path vs bare LangGraph + PostgresSaver"
    report.section(section)
    sizes = [("noop", 10 if quick else 100), ("effect", 5 if quick else 20)]
    k = 1 if quick else EFFECT_ATTEMPTS_PER_REP
    modes: list[Durability] = ["sync"] if quick else ["sync", "async", "exit"]
    # The baseline writes to a database of its own with PostgresSaver's tables alone: ours carry the
    # fencing triggers (migration 16), which a bare PostgresSaver user would not pay for.
    # And the worker path once more on a database of its own with the fence and row-level security off
    # (db.unguard): what those two safety layers cost per step, apart from the rest of the worker path.
    with (
        db.fresh_database("p1") as dsn,
        db.fresh_database("p1bare", agentrun=False) as bare_dsn,
        db.fresh_database("p1unguarded") as open_dsn,
    ):
        db.unguard(open_dsn)
        _floor_table(bare_dsn)
        worker_attempt(dsn, "noop_2", "sync")  # warm imports and the server's caches
        worker_attempt(open_dsn, "noop_2", "sync")
        for kind, n in sizes:
            graph = f"{kind}_{n}"
            for mode in modes:
                variants: Variants = {
                    "worker": functools.partial(worker_attempt, dsn, graph, mode),
                    "bare": functools.partial(bare_attempt, bare_dsn, graph, mode),
                    "unguarded": functools.partial(worker_attempt, open_dsn, graph, mode),
                }
                if kind == "effect":
                    variants["floor"] = functools.partial(bare_attempt, bare_dsn, graph, mode, pairs=True)
                    variants = _averaged(variants, k)
                res = stats.alternate(variants, reps)
                w, b, u = res["worker"], res["bare"], res["unguarded"]
                label = f"{_label(kind, n)}, {mode}"
                for figure, mine, theirs in (
                    ("per step (whole attempt / n)", _ms(w, "total", n), _ms(b, "total", n)),
                    ("marginal step", _ms(w, "marginal"), _ms(b, "marginal")),
                    ("marginal step vs fence+RLS off", _ms(w, "marginal"), _ms(u, "marginal")),
                    ("marginal step, fence+RLS off, vs bare", _ms(u, "marginal"), _ms(b, "marginal")),
                    ("before the first step", _ms(w, "before"), _ms(b, "before")),
                    ("after the last step", _ms(w, "after"), _ms(b, "after")),
                ):
                    report.add(section, stats.Row(f"{label}: {figure}", mine, theirs))
                for row in _floor_rows(label, w, b, res["floor"], n) if kind == "effect" else ():
                    report.add(section, row)
                ours, base = statements(dsn, bare_dsn, graph, mode)
                for key, figure, unit in (
                    ("statements", "statements per step", "stmts"),
                    ("trips", "round trips per step", "trips"),
                    ("trips_before", "round trips before the first step", "trips"),
                    ("trips_after", "round trips after the last step", "trips"),
                ):
                    report.add(section, stats.Row(f"{label}: {figure}", [ours[key]], [base[key]], unit=unit))
    durable(report, section, sizes, reps, k)


def _label(kind: str, n: int) -> str:
    return f"{n} {'no-op steps' if kind == 'noop' else 'steps, 1 effect each'}"


def durable(report: stats.Report, section: str, sizes: list[tuple[str, int]], reps: int, k: int) -> None:
    """The worker and bare attempts once more, ``sync``, on the durable server (``db.fresh_database(...,
    durable=True)``: every commit flushed, as production runs; the dev cluster's server skips the flush, so
    the figures above are CPU and round trips alone). ``sync`` only: the mode that commits at every step."""
    with (
        db.fresh_database("p1durable", durable=True) as dsn,
        db.fresh_database("p1durablebare", agentrun=False, durable=True) as bare_dsn,
    ):
        _floor_table(bare_dsn)
        worker_attempt(dsn, "noop_2", "sync")
        for kind, n in sizes:
            graph = f"{kind}_{n}"
            variants: Variants = {
                "worker": functools.partial(worker_attempt, dsn, graph, "sync"),
                "bare": functools.partial(bare_attempt, bare_dsn, graph, "sync"),
            }
            if kind == "effect":
                variants["floor"] = functools.partial(bare_attempt, bare_dsn, graph, "sync", pairs=True)
                variants = _averaged(variants, k)
            res = stats.alternate(variants, reps)
            w, b = res["worker"], res["bare"]
            label = f"{_label(kind, n)}, sync, durable server"
            for figure, mine, theirs in (
                ("per step (whole attempt / n)", _ms(w, "total", n), _ms(b, "total", n)),
                ("marginal step", _ms(w, "marginal"), _ms(b, "marginal")),
            ):
                report.add(section, stats.Row(f"{label}: {figure}", mine, theirs))
            for row in _floor_rows(label, w, b, res["floor"], n) if kind == "effect" else ():
                report.add(section, row)
