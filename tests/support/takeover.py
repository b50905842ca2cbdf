"""A run's next attempt, waited for: its worker Pod listed, the run's Lease held by one attempt.

The operator names attempt ``n`` of run ``r`` Pod ``r-n``, and that Pod holds the Lease ``agentrun-r`` as
``r-n``. Takeover tests measure how soon the next attempt appears, so its Pod is polled every 0.05 s.
"""

from __future__ import annotations

from typing import Any

import kubernetes

from tests.integration.lease_holder import holder_spec, lease_spec
from tests.support.kube import create_run, pods
from tests.support.operator_proc import OperatorHandle
from tests.support.waiting import wait_for, wait_phase


def wait_pod(
    api: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    run: str,
    attempt: int,
    timeout: float,
    what: str,
) -> Any:
    """Attempt ``attempt``'s worker Pod once the API server lists it."""
    name = f"{run}-{attempt}"

    def listed() -> Any:
        return next((p for p in pods(api, operator.namespace, run) if p.metadata.name == name), None)

    return wait_for(listed, timeout, what, interval=0.05, on_timeout=operator.logs)


def wait_held(
    api: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    run: str,
    attempt: int,
    timeout: float,
    what: str,
    interval: float = 0.2,
) -> Any:
    """The spec of the run's Lease once attempt ``attempt`` holds it."""
    holder = f"{run}-{attempt}"

    def held() -> Any:
        spec = lease_spec(api, operator.namespace, run)
        return spec if spec is not None and spec.holder_identity == holder else None

    return wait_for(held, timeout, what, interval=interval, on_timeout=operator.logs)


def start_holder(
    api: kubernetes.client.ApiClient, operator: OperatorHandle, run: str, lease_seconds: int, timeout: float
) -> Any:
    """A run of Lease holders (``lease_holder``), once Running with attempt 1 holding the Lease: its spec."""
    create_run(api, operator.namespace, run, holder_spec(lease_seconds))
    wait_phase(api, operator.namespace, run, "Running", timeout, operator)
    return wait_held(api, operator, run, 1, 30, "attempt 1 to hold the Lease")
