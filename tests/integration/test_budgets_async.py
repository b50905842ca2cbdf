"""spec.budget counts async model calls (``await model.ainvoke``) exactly once, across kills: the same
worker, operator, API server and Postgres as tests/integration/test_budgets.py, with the graph's node a
coroutine (driven with astream) and the fake model a native async provider that bills each call on disk
before its answer leaves (tests/graphs/budget_graphs.py ``async_graph``).
"""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes
from test_budgets import PER_CALL, agentrun, billed, counted, manager, spec

from tests.support.kube import create_run, run_status
from tests.support.operator_proc import OperatorHandle
from tests.support.waiting import wait_for

__all__ = ["manager"]  # the fixture, used by name below

# Around the limit of 400 tokens (150 per call: reached after call 3), as test_budgets.KILLS.
KILLS: dict[str, dict[str, str]] = {
    "async-usage-recorded-then-killed": {"AGENTRUN_FAULT_POINTS_ATTEMPT_1": "after_model_usage@2"},
    "async-at-the-check-that-parks": {"AGENTRUN_FAULT_POINTS_ATTEMPT_1": "before_model_check@4"},
    "async-raised-call-recorded-then-killed": {"AGENTRUN_FAULT_POINTS_ATTEMPT_2": "after_model_usage@1"},
}


def test_async_model_calls_are_counted_once_across_kills(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, manager: Path, pg_dsn: str, tmp_path: Path
) -> None:
    ns = operator.namespace
    runs: dict[str, tuple[str, Path]] = {}
    for name, faults in KILLS.items():
        log = tmp_path / f"{name}.log"
        body = spec(log, steps=6, limit=400, faults=faults)
        body["graph"] = "tests.graphs.budget_graphs:async_graph"
        runs[name] = (create_run(kube, ns, name, body)["metadata"]["uid"], log)
    limits = dict.fromkeys(runs, 400)
    decided: dict[str, set[str]] = {name: set() for name in runs}
    finished: set[str] = set()

    def step() -> bool:
        for name, (uid, log) in runs.items():
            if name in finished:
                continue
            status = run_status(kube, ns, name)
            phase = status.get("phase")
            assert phase not in ("Failed", "Cancelled"), (name, status)
            if phase == "Succeeded":
                finished.add(name)
                continue
            pending = status.get("pendingApproval")
            if phase != "WaitingApproval" or not pending or pending["id"] in decided[name]:
                continue
            calls, total = counted(pg_dsn, uid)
            assert (calls, total) == (billed(log), billed(log) * PER_CALL), (name, status)
            assert total >= limits[name] > total - PER_CALL, (name, total, limits[name])
            limits[name] = total + 3 * PER_CALL
            raise_ = f"totalTokens={limits[name]}"
            out = agentrun(manager, "approve", name, "-n", ns, "--id", pending["id"], "--set", raise_)
            assert out.returncode == 0, (name, out.stderr)
            decided[name].add(pending["id"])
        return len(finished) == len(runs)

    wait_for(step, 900, "every run finished", interval=1.0, on_timeout=operator.logs)
    for name, (uid, log) in runs.items():
        calls, total = counted(pg_dsn, uid)
        assert (calls, total) == (billed(log), billed(log) * PER_CALL), name
        assert total - PER_CALL < limits[name], (name, total, limits[name])
        assert decided[name], f"{name} never parked at its limit"
        status = run_status(kube, ns, name)
        assert status["usage"]["totalTokens"] == total, (name, status["usage"])
        assert status["attempts"] >= 3, (name, status["attempts"])  # the kill, the park, the resume
        # every call went through the async path (the provider saw _agenerate, not _generate in a thread)
        bills = [json.loads(line) for line in log.read_text().splitlines()]
        assert bills and all(b["async"] for b in bills), (name, bills)
