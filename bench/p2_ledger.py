"""P2: effects/s through the ledger vs raw single-row commits/s, and round trips per effect.

One step makes ``n`` no-op effects (``bench.graphs:burst_n``, in-memory checkpointer: only the ledger is
measured) under a claimed run, with the ledger's real pool, connected as the run's namespace role (row-level
security), as a worker is. Baselines on the same server, same pool size: single-row autocommit INSERTs
(one commit each: the 1-round-trip floor) and INSERT + UPDATE pairs (the 2-round-trip floor of
reserve-then-record), each over about as long a run as the ledger's (``throughput``). And whether an
effect's cost grows with the effects its run already holds: one step of ``4 n`` effects on a fresh database
(as a new install: the statements are prepared, and their plans cached, while the table is empty), its last
tenth against its second (the first holds the statements' preparation); 1.0x: it does not grow. A
statement that found its row through the run's index made it grow (tests/integration/test_statement_plans.py).
And how much of an effect is the worker's own Python: the same step with the ledger's two statements
answered in process (``statements_answered_in_process``: psycopg, the round trips and the server left out)
against the whole effect.

The dev cluster's server does not flush commits (``fsync=off``), so there a commit costs CPU alone; the
throughput figures are measured once more on the durable server ("durable server": every commit flushed, as
production runs), the ledger and both baselines on it.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any
from unittest import mock

from langgraph.checkpoint.memory import InMemorySaver

from agent_worker import context
from agentrun_core import store
from agentrun_core.store import db as store_db
from bench import db, graphs, stats


def ledger(dsn: str, n: int, counting: bool = False) -> float:
    """Seconds for one step making ``n`` new effects."""
    run_id = str(uuid.uuid4())
    tenant = db.tenant(dsn)
    with db.pool(dsn, size=1) as admin:  # the operator admits
        store.admit_run(
            admin,
            run_id=run_id,
            namespace=tenant.namespace,
            name=run_id[:8],
            graph="x:y",
            input={},
            spec_hash="h",
        )
    with db.pool(tenant.dsn, counting=counting, size=4, planned_once=True) as p:  # as the worker's pool
        store.claim_run(p, run_id=run_id, epoch=1, holder="bench")
        ctx = context.RunContext(conn=p, run_id=run_id, attempt=1, epoch=1)
        compiled = graphs.build(f"burst_{n}").compile(checkpointer=InMemorySaver())
        db.Counter.reset()
        with context.activate(ctx):
            t0 = time.perf_counter()
            compiled.invoke({}, {"configurable": {"thread_id": run_id}})
            return time.perf_counter() - t0


@contextlib.contextmanager
def statements_answered_in_process() -> Iterator[None]:
    """The ledger's two statements of a new effect (``reserve_new_effect``, ``record_effect``) answered
    here, as the server answers them for a new key of the current epoch, without sending them: what is
    left of an effect's time is the worker's own work around them (the tool's arguments, its key, the
    ledger's state machine, the statements' parameters; not psycopg's encoding of them, which happens on
    sending). Every other statement still goes to the server."""
    send = store_db.fetch_one

    def answer(conn: store_db.Conn, name: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        if name == "reserve_new_effect":
            return {"current_epoch": params["epoch"], "inserted": True, "read_only": False}
        if name == "record_effect":
            return {"current_epoch": params["epoch"], "updated_status": params["status"]}
        return send(conn, name, params)

    with mock.patch.object(store_db, "fetch_one", answer):
        yield


def client_work(dsn: str, n: int) -> float:
    """Seconds for one step making ``n`` new effects with their statements answered in process."""
    with statements_answered_in_process():
        return ledger(dsn, n)


def growth(n: int) -> tuple[float, float]:
    """Seconds per effect over the second and the last tenth of one step making ``n`` effects, on a fresh
    database."""
    with db.fresh_database("p2-growth") as dsn:
        ledger(dsn, n)
    marks, tenth = graphs.EFFECT_MARKS, n // 10
    return (marks[2 * tenth] - marks[tenth]) / tenth, (marks[n] - marks[n - tenth]) / tenth


def raw(dsn: str, n: int, pairs: bool) -> float:
    with db.pool(dsn, size=4) as p, p.connection() as conn:
        conn.execute(graphs.RAW_TABLE)
        tag = uuid.uuid4().hex
        t0 = time.perf_counter()
        for i in range(n):
            graphs.raw_commits(conn, f"{tag}-{i}", pair=pairs)
        return time.perf_counter() - t0


def throughput(report: stats.Report, section: str, dsn: str, n: int, reps: int, where: str = "") -> None:
    """Effects/s through the ledger vs raw single-row commits/s and INSERT+UPDATE pairs/s, alternated on the
    server of ``dsn``; ``where`` names that server in the figures.

    Each baseline runs about as long as the ledger's ``n`` effects (8 ``n`` commits, 4 ``n`` pairs): a
    loop of 500 raw commits lasts 20-80 ms, and its rate then jumped between ~9,000/s and ~30,000/s from
    one repetition to the next (the client and its server process woken on one core or on two), which
    made the median and the ratio jump with it; over 4,000 it keeps to one of them, as the ledger's own
    loop does."""
    counts = {"ledger": n, "raw": 8 * n, "pairs": 4 * n}
    ledger(dsn, 5)
    raw(dsn, 5, pairs=True)
    res = stats.alternate(
        {
            "ledger": lambda: ledger(dsn, n),
            "raw": lambda: raw(dsn, counts["raw"], pairs=False),
            "pairs": lambda: raw(dsn, counts["pairs"], pairs=True),
        },
        reps,
    )
    rate = {k: [counts[k] / t for t in v] for k, v in res.items()}
    for baseline, name in (("raw", "raw single-row commits/s"), ("pairs", "INSERT+UPDATE pairs/s")):
        report.add(
            section,
            stats.Row(f"{n} effects{where}: effects/s vs {name}", rate["ledger"], rate[baseline], unit="/s"),
        )


def run(report: stats.Report, *, quick: bool, reps: int) -> None:
    section = "P2 ledger throughput vs raw commits (one worker, one step)"
    report.section(section)
    n = 50 if quick else 500
    with db.fresh_database("p2") as dsn:
        throughput(report, section, dsn, n, reps)
        ends = [growth(4 * n) for _ in range(reps)]
        report.add(
            section,
            stats.Row(
                f"{4 * n} effects in one step: per effect, last tenth vs second tenth",
                [last * 1000 for _, last in ends],
                [first * 1000 for first, _ in ends],
            ),
        )
        # How much of an effect is the worker's own work: the same step with the two statements answered
        # in process, against the whole effect.
        work = stats.alternate(
            {"client": lambda: client_work(dsn, n), "ledger": lambda: ledger(dsn, n)}, reps
        )
        report.add(
            section,
            stats.Row(
                f"{n} effects: per effect, the worker's own work (statements answered in process) vs whole",
                [t / n * 1000 for t in work["client"]],
                [t / n * 1000 for t in work["ledger"]],
            ),
        )
        ledger(dsn, n, counting=True)
        trips = db.Counter.reset() / n
        report.add(
            section,
            stats.Row("round trips per new effect (floor 2: reserve, record)", [trips], [2.0], unit="trips"),
        )
    # The dev cluster's server does not flush commits: what a commit costs there is CPU. Once more where every
    # commit is flushed, as production runs (a raw commit then pays the flush, and an effect one: its
    # reserve's; the success record does not wait for it, store.record_effect).
    with db.fresh_database("p2durable", durable=True) as dsn:
        throughput(report, section, dsn, n, reps, where=", durable server")
