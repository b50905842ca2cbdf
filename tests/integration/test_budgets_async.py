"""spec.budget counts async model calls (``await model.ainvoke``) exactly once, across kills: the same
worker, operator, API server and Postgres as tests/integration/test_budgets.py, with the graph's node a
coroutine (driven with astream) and the fake model a native async provider that bills each call on disk
before its answer leaves (tests/graphs/budget_graphs.py ``async_graph``).
"""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes
from test_budgets import drive_around_the_limit, manager

from tests.support.kube import run_status
from tests.support.operator_proc import OperatorHandle

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
    graph = "tests.graphs.budget_graphs:async_graph"
    runs = drive_around_the_limit(kube, operator, manager, pg_dsn, tmp_path, KILLS, graph)
    for name, (_, log) in runs.items():
        attempts = run_status(kube, operator.namespace, name)["attempts"]
        assert attempts >= 3, (name, attempts)  # the kill, the park, the resume
        # every call went through the async path (the provider saw _agenerate, not _generate in a thread)
        bills = [json.loads(line) for line in log.read_text().splitlines()]
        assert bills and all(b["async"] for b in bills), (name, bills)
