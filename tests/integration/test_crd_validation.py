"""The AgentRun CRD on the real API server: schema + CEL refuse bad specs with clear messages."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from tests.support.kube import create_run, custom, get_run, kubectl

GOOD = {"graph": "agentrun_examples.support_ticket:graph", "input": {"ticket": {"id": 1}}}


def refused(kube: kubernetes.client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> str:
    with pytest.raises(kubernetes.client.ApiException) as info:
        create_run(kube, namespace, name, spec)
    assert info.value.status == 422, info.value.body
    return str(json.loads(info.value.body)["message"])


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"graph": "not a graph"}, "spec.graph must look like package.module:attribute"),
        ({"graph": "pkg.mod"}, "spec.graph must look like package.module:attribute"),
        ({"graph": "1pkg:graph"}, "spec.graph must look like package.module:attribute"),
        ({**GOOD, "durability": "sometimes"}, 'supported values: "sync", "async", "exit"'),
        ({**GOOD, "retry": {"backoffSeconds": 10, "maxBackoffSeconds": 5}}, "maxBackoffSeconds must be >="),
        ({**GOOD, "retry": {"maxAttempts": 0}}, "should be greater than or equal to 1"),
        ({**GOOD, "lease": {"durationSeconds": 1}}, "should be greater than or equal to 3"),
        ({**GOOD, "approval": {"onTimeout": "ignore"}}, 'supported values: "escalate", "cancel", "readOnly"'),
        ({**GOOD, "worker": {"env": [{"name": "AGENTRUN_RUN_ID", "value": "x"}]}}, "set by the operator"),
        ({"input": {}}, "spec.graph: Required value"),
    ],
)
def test_invalid_specs_are_refused(
    kube: kubernetes.client.ApiClient, namespace: str, spec: dict[str, Any], expected: str
) -> None:
    assert expected in refused(kube, namespace, "bad", spec)


def test_attempt_scoped_fault_points_allowed(kube: kubernetes.client.ApiClient, namespace: str) -> None:
    env = [
        {"name": "AGENTRUN_FAULT_POINTS_ATTEMPT_1", "value": "after_call"},
        {"name": "AGENTRUN_FAULT_POINTS", "value": "after_reserve@2"},
    ]
    create_run(kube, namespace, "faulty", {**GOOD, "suspend": True, "worker": {"env": env}})


def test_long_name_refused(kube: kubernetes.client.ApiClient, namespace: str) -> None:
    assert "at most 50 characters" in refused(kube, namespace, "x" * 51, GOOD)


def test_graph_and_input_are_immutable(kube: kubernetes.client.ApiClient, namespace: str) -> None:
    create_run(kube, namespace, "imm", {**GOOD, "suspend": True})
    api = custom(kube)
    args = ("agentrun.dev", "v1alpha1", namespace, "agentruns", "imm")
    for patch, message in [
        ({"spec": {"graph": "other.mod:graph"}}, "spec.graph is immutable"),
        ({"spec": {"input": {"ticket": {"id": 2}}}}, "spec.input is immutable"),
        ({"spec": {"durability": "exit"}}, "spec.durability is immutable"),
    ]:
        with pytest.raises(kubernetes.client.ApiException) as info:
            api.patch_namespaced_custom_object(*args, patch)
        assert message in json.loads(info.value.body)["message"]
    # mutable fields stay mutable
    api.patch_namespaced_custom_object(*args, {"spec": {"suspend": False, "cancel": True}})
    assert get_run(kube, namespace, "imm")["spec"]["cancel"] is True


def test_defaults_status_subresource_and_printer_columns(
    kube: kubernetes.client.ApiClient, namespace: str, admin_kubeconfig: Path
) -> None:
    body = create_run(kube, namespace, "cols", {**GOOD, "suspend": True})
    assert body["spec"]["durability"] == "sync" and body["spec"]["cancel"] is False
    # spec writes cannot set status (status subresource)
    api = custom(kube)
    api.patch_namespaced_custom_object(
        "agentrun.dev", "v1alpha1", namespace, "agentruns", "cols", {"status": {"phase": "Succeeded"}}
    )
    assert "status" not in get_run(kube, namespace, "cols") or not get_run(kube, namespace, "cols")["status"]
    api.patch_namespaced_custom_object_status(
        "agentrun.dev",
        "v1alpha1",
        namespace,
        "agentruns",
        "cols",
        {
            "status": {
                "phase": "Running",
                "currentStep": "draft",
                "attempts": 2,
                "pendingApproval": {"id": "a-123456789012"},
            }
        },
    )
    for resource in ("ar", "agentrun", "agentruns.agentrun.dev"):
        out = kubectl(admin_kubeconfig, "get", resource, "-n", namespace, check=True).stdout
        header, row = out.splitlines()[:2]
        assert header.split() == ["NAME", "PHASE", "STEP", "ATTEMPTS", "APPROVAL", "AGE"]
        assert row.split()[:5] == ["cols", "Running", "draft", "2", "a-123456789012"]


def test_created_by_is_stamped(kube: kubernetes.client.ApiClient, namespace: str) -> None:
    body = create_run(kube, namespace, "stamp", {**GOOD, "suspend": True})
    assert body["metadata"]["annotations"]["agentrun.dev/created-by"]


def test_kubectl_wait_for_condition(
    kube: kubernetes.client.ApiClient, namespace: str, admin_kubeconfig: Path
) -> None:
    """``kubectl wait --for=condition=Succeeded`` works on the status shape the operator writes."""
    create_run(kube, namespace, "waited", {**GOOD, "suspend": True})
    waiter = subprocess.Popen(
        [
            "kubectl",
            "--kubeconfig",
            str(admin_kubeconfig),
            "wait",
            "-n",
            namespace,
            "--for=condition=Succeeded",
            "ar/waited",
            "--timeout=20s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    custom(kube).patch_namespaced_custom_object_status(
        "agentrun.dev",
        "v1alpha1",
        namespace,
        "agentruns",
        "waited",
        {
            "status": {
                "phase": "Succeeded",
                "conditions": [
                    {
                        "type": "Succeeded",
                        "status": "True",
                        "reason": "Succeeded",
                        "message": "",
                        "observedGeneration": 1,
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
            }
        },
    )
    out, _ = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, out
    assert "condition met" in out
