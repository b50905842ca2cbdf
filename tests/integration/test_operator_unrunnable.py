"""Unrunnable specs end ``Failed`` with a specific reason within a bounded time (here a 10 s start timeout),
each with a Warning Event naming the cause, instead of staying Pending/Running for ever."""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from tests.support.kube import condition, create_run, events
from tests.support.operator_proc import OperatorHandle
from tests.support.waiting import wait_phase

START_TIMEOUT = 10
SLEEPER = {"command": ["sleep", "600"]}

CASES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "env-name": ({"worker": {**SLEEPER, "env": [{"name": "A=B", "value": "x"}]}}, ("PodRejected",)),
    "env-both": (
        {
            "worker": {
                **SLEEPER,
                "env": [
                    {"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                ],
            }
        },
        ("PodRejected",),
    ),
    "no-sa": ({"worker": {**SLEEPER, "serviceAccountName": "nobody"}}, ("PodRejected",)),
    "no-prio": ({"worker": {**SLEEPER, "priorityClassName": "no-such-class"}}, ("PodRejected",)),
    "bad-qty": ({"worker": {**SLEEPER, "resources": {"limits": {"memory": "lots"}}}}, ("PodRejected",)),
    "req-gt-lim": (
        {"worker": {**SLEEPER, "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}},
        ("PodRejected",),
    ),
    "no-secret": (
        {
            "worker": {
                **SLEEPER,
                "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "missing", "key": "k"}}}],
            }
        },
        ("CreateContainerConfigError",),
    ),
    "no-cm": (
        {
            "worker": {
                **SLEEPER,
                "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "missing", "key": "k"}}}],
            }
        },
        ("CreateContainerConfigError",),
    ),
    "no-node": ({"worker": {**SLEEPER, "nodeSelector": {"disk": "none-like-this"}}}, ("Unschedulable",)),
    "no-lease": ({"worker": SLEEPER}, ("LeaseNeverTaken",)),
}


@pytest.fixture
def quick_operator(kube: kubernetes.client.ApiClient, operator: OperatorHandle) -> OperatorHandle:
    operator.stop()
    operator.env["AGENTRUN_START_TIMEOUT_SECONDS"] = str(START_TIMEOUT)
    operator.start()
    operator.wait_leader(kube, timeout=60)
    return operator


def test_unrunnable_specs_fail_with_a_specific_reason(
    kube: kubernetes.client.ApiClient, quick_operator: OperatorHandle
) -> None:
    ns = quick_operator.namespace
    for name, (extra, _) in CASES.items():
        create_run(kube, ns, name, {"graph": "pkg.mod:graph", "retry": {"maxAttempts": 3}, **extra})
    create_run(kube, ns, "exits", {"graph": "tests.graphs.exits:graph"})
    for name, (_, reasons) in CASES.items():
        status = wait_phase(kube, ns, name, "Failed", START_TIMEOUT + 60, quick_operator)
        failed = condition(status, "Failed")
        assert failed["reason"] in reasons, (name, failed)
        assert status["attempts"] <= 1, (name, status)  # no attempt churn while waiting
        warnings = [e for e in events(kube, ns, name) if e.type == "Warning"]
        assert any(e.reason == failed["reason"] for e in warnings), (name, [e.reason for e in warnings])
    status = wait_phase(kube, ns, "exits", "Failed", 120, quick_operator)
    assert condition(status, "Failed")["reason"] == "InvalidSpec", status
    assert status["attempts"] == 1 and status["restarts"] == 0, status
