"""A run's next attempt, waited for: its worker Pod listed, the run's Lease held by one attempt.

The operator names attempt ``n`` of run ``r`` Pod ``r-n``, and that Pod holds the Lease ``agentrun-r`` as
``r-n``. Takeover tests measure how soon the next attempt appears, so its Pod is polled every 0.05 s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import kubernetes

from tests.support.kube import create_run, pods
from tests.support.lease_holder import holder_spec, lease_spec
from tests.support.operator_proc import OperatorHandle
from tests.support.waiting import wait_for, wait_phase


@dataclasses.dataclass(frozen=True)
class Attempts:
    """The attempts of run ``run`` in the namespace of ``operator``, which makes them."""

    api: kubernetes.client.ApiClient
    operator: OperatorHandle
    run: str

    def pod(self, attempt: int, timeout: float, what: str) -> Any:
        """Attempt ``attempt``'s worker Pod once the API server lists it."""
        name = f"{self.run}-{attempt}"

        def listed() -> Any:
            return next(
                (p for p in pods(self.api, self.operator.namespace, self.run) if p.metadata.name == name),
                None,
            )

        return wait_for(listed, timeout, what, interval=0.05, on_timeout=self.operator.logs)

    def held(self, attempt: int, timeout: float, what: str, interval: float = 0.2) -> Any:
        """The spec of the run's Lease once attempt ``attempt`` holds it."""
        holder = f"{self.run}-{attempt}"

        def holding() -> Any:
            spec = lease_spec(self.api, self.operator.namespace, self.run)
            return spec if spec is not None and spec.holder_identity == holder else None

        return wait_for(holding, timeout, what, interval=interval, on_timeout=self.operator.logs)


def start_holder(
    api: kubernetes.client.ApiClient, operator: OperatorHandle, run: str, lease_seconds: int, timeout: float
) -> tuple[Attempts, Any]:
    """A run of Lease holders (``lease_holder``), once Running with attempt 1 holding the Lease: its attempts
    and the Lease's spec."""
    create_run(api, operator.namespace, run, holder_spec(lease_seconds))
    wait_phase(api, operator.namespace, run, "Running", timeout, operator)
    attempts = Attempts(api, operator, run)
    return attempts, attempts.held(1, 30, "attempt 1 to hold the Lease")
