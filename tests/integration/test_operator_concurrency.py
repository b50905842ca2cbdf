"""``spec.concurrency`` on the dev cluster, with real workers: runs sharing a key (by default their graph)
never have more worker Pods alive than the key's limit, while a run without the field starts beside them
(the namespace's own limit is off here); the queued runs say which limit holds them and all finish, each
effect performed once. A sampler lists the namespace's worker Pods the whole time."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import kubernetes

from tests.support.kube import sampling_live_pods
from tests.support.operator_proc import OperatorHandle
from tests.support.queueing import IDLE_POLL, all_succeed_once, start_steps, wait_queued
from tests.support.waiting import wait_phase

LIMIT = 2
KEYED = 5


def test_runs_sharing_a_key_never_exceed_its_limit_and_others_are_not_held(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path
) -> None:
    ns, keyed = operator.namespace, [f"keyed-{i}" for i in range(KEYED)]
    operator.reconfigure(kube, **IDLE_POLL, AGENTRUN_MAX_WORKERS_PER_NAMESPACE="0")  # only the key's limit
    peak: list[list[str]] = [[]]
    other_overlapped = threading.Event()

    def observe(live: list[Any]) -> None:
        runs = [p.metadata.labels["agentrun.dev/run"] for p in live]
        keyed = [r for r in runs if r.startswith("keyed-")]
        if len(keyed) > len(peak[0]):
            peak[0] = keyed
        if keyed and any(r.startswith("other-") for r in runs):
            other_overlapped.set()

    with sampling_live_pods(kube, ns, observe):
        start_steps(kube, ns, tmp_path, keyed, 1.5, concurrency={"limit": LIMIT})  # key: the graph
        wait_queued(kube, operator, keyed, "spec.concurrency key", "a keyed run queued by its key, saying so")
        # No spec.concurrency: starts while the keyed runs wait (nothing holds it).
        start_steps(kube, ns, tmp_path, ["other-0"], 1.5)
        wait_phase(kube, ns, "other-0", "Succeeded", 300, operator)
        all_succeed_once(kube, operator, tmp_path, [*keyed, "other-0"])
    assert 0 < len(peak[0]) <= LIMIT, peak[0]
    assert other_overlapped.is_set()  # its worker ran while keyed ones did: the key's line held only them
