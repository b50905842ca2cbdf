"""A namespace the dev tooling is done with goes away although no operator is left to release what it held
(agentrun_dev/finalizers.py, called by every test namespace's and benchmark's teardown)."""

from __future__ import annotations

import time
from typing import Any

import kubernetes
import pytest

from agentrun_core import protocol
from agentrun_dev import finalizers

pytestmark = pytest.mark.slow


def _gone(read: Any, deadline_s: float = 120.0) -> bool:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            read()
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return True
            raise
        time.sleep(0.2)
    return False


def test_a_namespace_with_a_held_pod_and_run_goes_once_released(kube: Any, namespace: str) -> None:
    core: Any = kubernetes.client.CoreV1Api(kube)  # dict bodies
    custom: Any = kubernetes.client.CustomObjectsApi(kube)
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "held-1", "finalizers": [protocol.POD_FINALIZER]},
            # Bound to no node of this cluster: no runtime runs it, only the API server holds it.
            "spec": {"nodeName": "agentrun-test-nowhere", "containers": [{"name": "c", "image": "x"}]},
        },
    )
    custom.create_namespaced_custom_object(
        "agentrun.dev",
        "v1alpha1",
        namespace,
        "agentruns",
        {
            "apiVersion": "agentrun.dev/v1alpha1",
            "kind": "AgentRun",
            "metadata": {"name": "held", "finalizers": [finalizers.RUN_FINALIZER]},
            "spec": {"graph": "m:g", "input": {}},
        },
    )
    core.delete_namespaced_pod("held-1", namespace, grace_period_seconds=0)
    held = core.read_namespaced_pod("held-1", namespace)
    assert held.metadata.deletion_timestamp is not None  # deleted, yet kept by the finalizer

    assert finalizers.release_namespace(kube, namespace) == 2
    assert _gone(lambda: core.read_namespaced_pod("held-1", namespace))
    run = custom.get_namespaced_custom_object("agentrun.dev", "v1alpha1", namespace, "agentruns", "held")
    assert not run["metadata"].get("finalizers")
    assert finalizers.release_namespace(kube, namespace) == 0  # nothing left to release

    core.delete_namespace(namespace, propagation_policy="Background")
    assert _gone(lambda: core.read_namespace(namespace)), "the namespace stayed Terminating"
