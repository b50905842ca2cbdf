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

from tests.support.kube import create_run, pods, run_status, sampling_live_pods
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import STEPS
from tests.support.waiting import wait_for, wait_phase

LIMIT = 3
RUNS = 8
RETENTION = 5


def test_more_runs_than_the_limit_never_exceed_it_and_all_finish(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path
) -> None:
    ns = operator.namespace
    operator.restart(
        hard=False,
        extra_env={
            "AGENTRUN_MAX_WORKERS_PER_NAMESPACE": str(LIMIT),
            "AGENTRUN_FINISHED_POD_RETENTION_SECONDS": str(RETENTION),
            # Queued runs look again only at the idle poll unless a freed slot wakes them: this long a poll
            # makes the test fail if the wake-up does not work.
            "AGENTRUN_IDLE_POLL_SECONDS": "600",
        },
    )
    operator.wait_leader(kube, timeout=30)
    peak: list[list[str]] = [[]]

    def observe(live: list[Any]) -> None:
        if len(live) > len(peak[0]):
            peak[0] = [p.metadata.name for p in live]

    with sampling_live_pods(kube, ns, observe):
        for i in range(RUNS):
            spec = {
                "graph": STEPS,
                "input": {"path": str(tmp_path / f"out-{i}"), "pause": {"prepare": 1.0}},
                "retry": {"backoffSeconds": 0},
            }
            create_run(kube, ns, f"many-{i}", spec)
        queued = wait_for(
            lambda: any(
                "queued" in (run_status(kube, ns, f"many-{i}").get("message") or "") for i in range(RUNS)
            ),
            60,
            "a run waiting in the queue",
            on_timeout=operator.logs,
        )
        assert queued
        for i in range(RUNS):
            wait_phase(kube, ns, f"many-{i}", "Succeeded", 300, operator)
    assert 0 < len(peak[0]) <= LIMIT, peak[0]
    for i in range(RUNS):  # every effect performed once: nothing ran twice for the queue
        assert len((tmp_path / f"out-{i}").read_text().splitlines()) == 1
    # Finished Pods are cleaned up after the retention (the operator looks again when it is due).
    wait_for(
        lambda: all(not pods(kube, ns, f"many-{i}") for i in range(RUNS)),
        RETENTION + 60,
        "finished worker Pods deleted after the retention",
        on_timeout=operator.logs,
    )
