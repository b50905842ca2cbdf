"""Subgraph keys under kills: ``Send`` fan-out into a subgraph with equal arguments, and a subgraph node in a
loop (tests/graphs/subgraph_graph.py: N branches + N iterations, each one HTTP charge with EQUAL arguments
and one email with a random body).

For each fault point where an effect or a step boundary can be cut: AGENTRUN_CHAOS_REPS repetitions (default
20), each a fresh run killed once at a random hit, in a random durability mode, then re-run to completion.
Each must end ``succeeded`` with exactly 4·N ledger rows of distinct keys, each charge performed exactly once
at the HTTP provider and each email delivered exactly once at the SMTP sink — N branches → N effects,
N iterations → N effects, whatever was killed.
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import time
import uuid

import psycopg
import pytest

from agentrun_core import store
from tests.support import kills, worker_harness

pytestmark = [pytest.mark.chaos, pytest.mark.cluster, pytest.mark.postgres, pytest.mark.slow]

REPS = int(os.environ.get("AGENTRUN_CHAOS_REPS", "20"))
CONCURRENCY = worker_harness.CONCURRENCY
GRAPH = "tests.graphs.subgraph_graph:builder"
N = 3
# point -> possible hit numbers in the killed process (4·N effects; about 2·N + 4 checkpoints)
PLAN: dict[str, tuple[int, ...]] = {
    "after_reserve": tuple(range(1, 4 * N + 1)),
    "after_call": tuple(range(1, 4 * N + 1)),
    "after_record": tuple(range(1, 4 * N + 1)),
    "after_checkpoint": tuple(range(1, 2 * N + 4)),
    # task writes saved: 3·N + 3 root tasks (__start__, plan, N branches, N + 1 loops, N agains) and 2 in each
    # of the 2·N subgraph executions (__start__, pay); none mid-run under exit, so that mode is not drawn
    "after_task_writes": tuple(range(1, 7 * N + 4)),
}
KILLS = kills.Plan(PLAN, processes=5, reuse_pods=True)


def _one_rep(worker: worker_harness.Worker, point: str, rep: int) -> dict[str, object]:
    rng = random.Random(f"{point}-{rep}-{uuid.uuid4()}")
    run_id = f"sub-{point.replace('_', '-')}-{rep}-{uuid.uuid4().hex[:8]}"
    return KILLS.kill_once(worker, rng, run_id, point, GRAPH, lambda: str(rng.choice([0, 20])), n=N)


# after_checkpoint under async once finished runs with 8 (or 0) of their 12 effects: the kill left a head
# whose tasks had all saved their writes while the step's checkpoint had not been saved, and the worker took
# LangGraph's empty ``next`` for "finished" (issue 9). Nothing about subgraph namespaces: the root's loop
# lost its edge. ``after_task_writes`` kills in that gap on purpose, in root and subgraph namespaces.
@pytest.mark.parametrize("point", sorted(PLAN))
def test_subgraph_fan_out_and_loop_under_kills_perform_each_effect_once(
    point: str,
    pg_dsn: str,
    providers: worker_harness.Providers,
    leased_worker: worker_harness.Worker,
) -> None:
    worker = leased_worker
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
        reps = list(pool.map(lambda i: _one_rep(worker, point, i), range(REPS)))
    took = time.monotonic() - started
    counts = worker_harness.delivered(providers)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for rep, run_id in worker_harness.finished_runs(conn, reps):
            effects = store.list_effects(conn, run_id)
            assert len(effects) == 4 * N, (rep, [(e.step, e.tool) for e in effects])
            steps = {e.step for e in effects}
            assert {s.split("/")[0] for s in steps} == {
                *(f"branch:2:push{i}" for i in range(N)),
                *(f"again:{4 + 2 * i}" for i in range(N)),
            }, (rep, steps)
            for effect in effects:
                worker_harness.performed_once(effect, counts, rep)
    total = sum(int(r["processes"]) for r in reps)  # type: ignore[call-overload]
    print(f"\nsubgraphs {point}: {REPS} reps, {total} worker processes, {took:.1f}s")
