"""A namespace the dev tooling is done with goes away although no operator is left to release what it held
(agentrun_dev/finalizers.py, called by every test namespace's and benchmark's teardown)."""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from agentrun_core.api import meta, protocol
from agentrun_core.kube import errors as kube_errors
from agentrun_core.kube import runs
from agentrun_dev import finalizers
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


def _answers(read: Any, unavailable: int) -> bool:
    """Whether ``read()`` succeeds; False while it fails with ``unavailable``; any other failure raised."""
    try:
        read()
    except (kubernetes.client.ApiException, kube_errors.KubeError) as exc:
        if exc.status == unavailable:
            return False
        raise
    return True


def test_a_namespace_with_a_held_pod_and_run_goes_once_released(kube: Any, namespace: str) -> None:
    core: Any = kubernetes.client.CoreV1Api(kube)  # dict bodies

    def pod() -> Any:
        return core.read_namespaced_pod("held-1", namespace)

    def create_run() -> Any:
        return runs.create(
            kube,
            namespace,
            {
                "apiVersion": runs.API_VERSION,
                "kind": "AgentRun",
                "metadata": {"name": "held", "finalizers": [meta.FINALIZER]},
                "spec": {"graph": "m:g", "input": {}},
            },
            timeout=30,
        )

    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "held-1", "finalizers": [protocol.POD_FINALIZER]},
            # Bound to no node of this cluster: no runtime runs it, only the API server holds it.
            "spec": {"nodeName": "agentrun-test-nowhere", "containers": [{"name": "c", "image": "x"}]},
        },
    )
    # Right after `agentrun dev up` the AgentRun kind may not be served yet (503: CRD not yet available).
    wait_for(lambda: _answers(create_run, 503), 60, "the AgentRun created")
    core.delete_namespaced_pod("held-1", namespace, grace_period_seconds=0)
    held = pod()
    assert held.metadata.deletion_timestamp is not None  # deleted, yet kept by the finalizer

    assert finalizers.release_namespace(kube, namespace) == 2
    wait_for(lambda: not _answers(pod, 404), 120, "the released Pod gone")
    run = runs.get(kube, namespace, "held", timeout=30)
    assert not run["metadata"].get("finalizers")
    assert finalizers.release_namespace(kube, namespace) == 0  # nothing left to release

    core.delete_namespace(namespace, propagation_policy="Background")
    wait_for(lambda: not _answers(lambda: core.read_namespace(namespace), 404), 120, "the namespace gone")
