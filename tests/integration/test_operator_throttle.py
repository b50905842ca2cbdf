"""Start throttling and Pod cleanup on the dev cluster, with real workers.

More runs than ``AGENTRUN_MAX_WORKERS_PER_NAMESPACE`` applied at once: a sampler lists the namespace's worker
Pods the whole time and never sees more than the limit alive (not Succeeded/Failed), while every run
finishes — queued runs start when a slot frees (woken, not polled: the idle poll is set far beyond the test's
timeouts). Then every finished Pod is deleted once ``AGENTRUN_FINISHED_POD_RETENTION_SECONDS`` has passed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes

from tests.support.kube import pods, sampling_live_pods
from tests.support.operator_proc import OperatorHandle
from tests.support.queueing import IDLE_POLL, all_succeed_once, start_steps, wait_queued
from tests.support.waiting import wait_for

LIMIT = 3
RUNS = 8
RETENTION = 5


def test_more_runs_than_the_limit_never_exceed_it_and_all_finish(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path
) -> None:
    ns, many = operator.namespace, [f"many-{i}" for i in range(RUNS)]
    retention = {"AGENTRUN_FINISHED_POD_RETENTION_SECONDS": str(RETENTION)}
    operator.reconfigure(kube, **IDLE_POLL, **retention, AGENTRUN_MAX_WORKERS_PER_NAMESPACE=str(LIMIT))
    peak: list[list[str]] = [[]]

    def observe(live: list[Any]) -> None:
        if len(live) > len(peak[0]):
            peak[0] = [p.metadata.name for p in live]

    with sampling_live_pods(kube, ns, observe):
        start_steps(kube, ns, tmp_path, many, 1.0, retry={"backoffSeconds": 0})
        wait_queued(kube, operator, many, "queued", "a run waiting in the queue")
        all_succeed_once(kube, operator, tmp_path, many)
    assert 0 < len(peak[0]) <= LIMIT, peak[0]
    # Finished Pods are cleaned up after the retention (the operator looks again when it is due).
    wait_for(
        lambda: all(not pods(kube, ns, name) for name in many),
        RETENTION + 60,
        "finished worker Pods deleted after the retention",
        on_timeout=operator.logs,
    )
