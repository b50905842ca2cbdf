"""``spec.concurrency`` on the dev cluster, with real workers: runs sharing a key (by default their graph)
never have more worker Pods alive than the key's limit, while a run without the field starts beside them
(the namespace's own limit is off here); the queued runs say which limit holds them and all finish, each
effect performed once. A sampler lists the namespace's worker Pods the whole time."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import kubernetes

from tests.support.kube import create_run, run_status, sampling_live_pods
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import STEPS
from tests.support.waiting import wait_for, wait_phase

LIMIT = 2
KEYED = 5


def test_runs_sharing_a_key_never_exceed_its_limit_and_others_are_not_held(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path
) -> None:
    ns = operator.namespace
    operator.restart(
        hard=False,
        extra_env={
            "AGENTRUN_MAX_WORKERS_PER_NAMESPACE": "0",  # only the key's limit applies
            # Queued runs look again only at the idle poll unless a freed slot wakes them.
            "AGENTRUN_IDLE_POLL_SECONDS": "600",
        },
    )
    operator.wait_leader(kube, timeout=30)
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
        for i in range(KEYED):
            spec = {
                "graph": STEPS,
                "input": {"path": str(tmp_path / f"keyed-{i}"), "pause": {"prepare": 1.5}},
                "concurrency": {"limit": LIMIT},  # key: the graph
            }
            create_run(kube, ns, f"keyed-{i}", spec)
        wait_for(
            lambda: any(
                "spec.concurrency key" in (run_status(kube, ns, f"keyed-{i}").get("message") or "")
                for i in range(KEYED)
            ),
            60,
            "a keyed run queued by its key, saying so",
            on_timeout=operator.logs,
        )
        # No spec.concurrency: starts while the keyed runs wait (nothing holds it).
        other = {"graph": STEPS, "input": {"path": str(tmp_path / "other-0"), "pause": {"prepare": 1.5}}}
        create_run(kube, ns, "other-0", other)
        wait_phase(kube, ns, "other-0", "Succeeded", 300, operator)
        for i in range(KEYED):
            wait_phase(kube, ns, f"keyed-{i}", "Succeeded", 300, operator)
    assert 0 < len(peak[0]) <= LIMIT, peak[0]
    assert other_overlapped.is_set()  # its worker ran while keyed ones did: the key's line held only them
    for name in [f"keyed-{i}" for i in range(KEYED)] + ["other-0"]:  # every effect performed once
        assert len((tmp_path / name).read_text().splitlines()) == 1, name
