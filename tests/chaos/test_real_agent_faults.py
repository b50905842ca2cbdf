"""Real agents killed at the worker's fault points: exactly one delivery per effect of every tool call.

Two agents as LangChain 1.x users write them (tests/graphs/real_agents.py), each with a deterministic fake
chat model asking for 3 calls at once and then 2: the tutorial's ``ToolNode`` + ``tools_condition`` graph
(one task runs a turn's calls in parallel threads) and ``create_agent`` (one ``Send`` task per call). Among
the calls: a tool whose effect calls another effect before the tool's own later effect, and a subagent called
as a tool. Every tool drafts with a random latency before its effect, so a resumed attempt reaches the
effects in another order than the killed one. Each agent twice: with sync tools, and written with
``async def`` (tests/graphs/async_agents.py: async tools gathered in one ToolNode task or run as Send tasks,
awaited effects, an async effect inside one, an async subagent), which the worker drives with ``astream``.

Each repetition: a fresh run, killed once at a random hit of one point in a random durability mode, re-run
to completion. It must end ``succeeded`` with exactly one delivery per expected recipient at the HTTP
provider (counted there, per run), none lost, no divergence recorded, and the final messages of an unkilled
run. AGENTRUN_CHAOS_REPS_REAL repetitions per (agent, point), default 1 (28 killed runs and 4 references,
~40 s on an idle 2-core machine, ~160 s when it is shared): the module stays CI-sized.
Leases are off (``AGENTRUN_LEASE_MODE=none``): ``before_lease_renew`` is covered with real Leases by
tests/chaos/test_worker_faults.py, as are ``while_parking`` and ``after_resume_read`` (these agents never
interrupt).
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import random
import time
import uuid
from typing import Any

import psycopg
import pytest

from agentrun_core import faults, store
from agentrun_dev import http_provider
from tests.graphs import real_agents
from tests.support import kills, pg, worker_harness

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow]

REPS = int(os.environ.get("AGENTRUN_CHAOS_REPS_REAL", "1"))
AGENTS = {
    "react": "tests.graphs.real_agents:chaos_react",
    "create_agent": "tests.graphs.real_agents:chaos_agent",
    # The same agents with async tools, an async model node and async effects, driven with astream.
    "react_async": "tests.graphs.async_agents:react",
    "create_agent_async": "tests.graphs.async_agents:agent",
}
EFFECTS = len(real_agents.CHAOS_DELIVERIES)
# point -> possible hit numbers in the killed process (a number past the last hit: the run is not killed)
PLAN: dict[str, tuple[int, ...]] = {
    "after_admission_read": (1,),
    "after_lease_acquired": (1,),
    "after_reserve": tuple(range(1, EFFECTS + 1)),
    "after_call": tuple(range(1, EFFECTS + 1)),
    "after_record": tuple(range(1, EFFECTS + 1)),
    "after_checkpoint": (1, 2, 3, 4, 5),
    "after_task_writes": (1, 2, 3, 4, 5, 6),
}
NOT_HERE = {  # and where they are covered
    "before_lease_renew": "leases are off here: tests/chaos/test_worker_faults.py",
    "while_parking": "no interrupt in these agents: tests/chaos/test_worker_faults.py",
    "after_resume_read": "no interrupt in these agents: tests/chaos/test_worker_faults.py",
}
START: dict[str, Any] = {"messages": [{"role": "user", "content": "settle everything"}]}
KILLS = kills.Plan(PLAN, processes=3, reuse_pods=False, fenced_ok=False)


def test_plan_names_every_worker_point() -> None:
    assert set(PLAN) | set(NOT_HERE) == set(faults.WORKER_POINTS) and not set(PLAN) & set(NOT_HERE)


def _deliveries(url: str) -> dict[str, collections.Counter[str]]:
    """Effects performed at the provider: run id -> recipient -> count."""
    found: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for key, performed in http_provider.stats(url)["effects_performed"].items():
        status, entry, _ = http_provider.request(f"{url}/effects/{key}")
        assert status == 200, (status, entry)
        found[entry["request"]["run"]][entry["request"]["to"]] += performed
    return found


def _one_rep(worker: worker_harness.Worker, agent: str, point: str, rep: int) -> dict[str, Any]:
    started = time.monotonic()
    rng = random.Random(f"{agent}-{point}-{rep}-{uuid.uuid4()}")
    run_id = f"ra-{agent.replace('_', '-')}-{point.replace('_', '-')}-{rep}-{uuid.uuid4().hex[:6]}"

    def jitter() -> str:
        return str(rng.choice([5, 30]))

    done = KILLS.kill_once(worker, rng, run_id, point, AGENTS[agent], jitter, **START)
    return {**done, "point": point, "s": round(time.monotonic() - started, 1)}


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_every_tool_call_is_delivered_once_whatever_point_kills_the_worker(
    agent: str, pg_dsn: str, providers: worker_harness.Providers, zygotes: worker_harness.ZygotePool
) -> None:
    worker = worker_harness.Worker(pg_dsn, providers, zygotes=zygotes)
    reference = f"ra-ref-{agent.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    worker_harness.admit(pg_dsn, reference, graph=AGENTS[agent], **START)
    unkilled = worker.run(reference, pod=f"{reference}-p")
    assert unkilled.returncode == 0, unkilled.stderr[-3000:]
    expected_final = pg.final_messages(pg_dsn, AGENTS[agent], reference)

    jobs = [(point, rep) for point in sorted(PLAN) for rep in range(REPS)]
    with concurrent.futures.ThreadPoolExecutor(worker_harness.CONCURRENCY) as pool:
        reps = list(pool.map(lambda job: _one_rep(worker, agent, *job), jobs))

    delivered = _deliveries(providers.http_url)
    everyone = {to: 1 for to in real_agents.CHAOS_DELIVERIES}
    assert delivered[reference] == everyone
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for r in reps:
            assert delivered[r["run_id"]] == everyone, r  # one delivery per effect of each call, none lost
            run = store.get_run(conn, r["run_id"])
            assert run is not None and run.status == "succeeded", r
            rows = store.list_effects(conn, r["run_id"])
            assert len(rows) == len(everyone) and all(
                e.status == "sent" and e.divergences == 0 for e in rows
            ), r
            assert pg.final_messages(pg_dsn, AGENTS[agent], r["run_id"]) == expected_final, r
    killed_at = {r["point"] for r in reps if r["killed"]}
    assert killed_at >= {"after_admission_read", "after_lease_acquired"}, reps  # the kills did happen
    assert sum(r["killed"] for r in reps) >= len(jobs) // 2, reps
