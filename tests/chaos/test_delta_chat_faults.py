"""A 50-turn DeltaChannel chat (tests/graphs/delta_chat.py) killed at every worker fault point and at random.

Each repetition is a fresh run in a random durability mode, killed once (SIGKILL at its fault point) at a
random hit, then re-run to completion (approving its one approval, at turn 25). Every repetition must end
``succeeded`` with the messages of an unkilled run, rebuilt by LangGraph from the stored writes (the fake
model answers with a digest of the whole history it was handed, so a wrong rebuild at any resume shows), and
each of its 5 charges performed exactly once at the HTTP provider. CI-sized: one repetition per point plus
AGENTRUN_DELTA_CHAOS_RANDOM random ones (default 2).
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import uuid

import psycopg
import pytest

from agentrun_core import faults, store
from agentrun_dev import http_provider
from tests.graphs import delta_chat
from tests.support import kills, worker_harness

pytestmark = [pytest.mark.chaos, pytest.mark.cluster, pytest.mark.postgres, pytest.mark.slow]

GRAPH = "tests.graphs.delta_chat:builder"
TURNS, CHARGE_EVERY, APPROVE_AT = 50, 10, 25
RANDOM_REPS = int(os.environ.get("AGENTRUN_DELTA_CHAOS_RANDOM", "2"))
# point -> hit numbers (counted per process; the fault stays armed until it fires, so a hit beyond the first
# process's count fires in the next one)
HITS: dict[str, tuple[int, ...]] = {
    "after_admission_read": (1,),
    "after_lease_acquired": (1,),
    "after_reserve": (1, 2, 3),
    "after_call": (1, 2, 3),
    "after_record": (1, 2, 3),
    "after_checkpoint": tuple(range(1, 50)),
    "after_task_writes": tuple(range(1, 50)),
    "while_parking": (1,),
    "after_resume_read": (1,),
    "before_lease_renew": (1,),
}
KILLS = kills.Plan(HITS, processes=9, reuse_pods=True, approve=True)


def test_plan_covers_every_fault_point() -> None:
    assert set(HITS) == set(faults.WORKER_POINTS)


def _one_rep(worker: worker_harness.Worker, point: str, seed: str) -> dict[str, object]:
    rng = random.Random(seed)
    run_id = f"delta-{point.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    # The keeper renews every second: a run of 100 nodes with up to 40 ms each outlives a renewal.
    jitter = "40" if point == "before_lease_renew" else str(rng.choice([0, 5]))
    # No exit mode for after_task_writes (kills.durability_for): a 25-turn stretch under exit snapshots
    # instead of saving writes.
    return KILLS.kill_once(
        worker, rng, run_id, point, GRAPH, lambda: jitter,
        turns=TURNS, charge_every=CHARGE_EVERY, approve_at=APPROVE_AT,
    )  # fmt: skip


def test_a_delta_chat_killed_anywhere_ends_as_an_unkilled_one(
    pg_dsn: str,
    providers: worker_harness.Providers,
    leased_worker: worker_harness.Worker,
) -> None:
    worker = leased_worker
    base = uuid.uuid4().hex
    plan = sorted(HITS) + [random.Random(f"{base}-{i}").choice(sorted(HITS)) for i in range(RANDOM_REPS)]
    with concurrent.futures.ThreadPoolExecutor(worker_harness.CONCURRENCY) as pool:
        reps = list(pool.map(lambda ip: _one_rep(worker, ip[1], f"{base}-{ip[0]}"), enumerate(plan)))
    performed = http_provider.stats(providers.http_url)["effects_performed"]
    expected = delta_chat.expected_messages(TURNS, charge_every=CHARGE_EVERY, approve_at=APPROVE_AT)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for rep, run_id in worker_harness.finished_runs(conn, reps):
            effects = store.list_effects(conn, run_id)
            assert len(effects) == TURNS // CHARGE_EVERY, (rep, effects)
            for effect in effects:
                assert performed.get(effect.idempotency_key) == 1, (rep, effect)
            assert delta_chat.messages_at(pg_dsn, run_id) == expected, rep
    print(f"\n{len(reps)} reps: " + ", ".join(f"{r['fault']}/{r['mode']}" for r in reps))
