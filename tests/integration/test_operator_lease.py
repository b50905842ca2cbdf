"""The Lease backstop: a worker that looks alive but stopped renewing its Lease (hung process) is deleted and
replaced after the Lease expired by the operator's own observation; the next attempt takes the Lease with a
higher epoch (the fencing token), so the stale holder is fenced off."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import kubernetes
import pytest

from agentrun_dev.podruntime import control
from tests.support.kube import create_run, events, pods
from tests.support.lease_holder import holder_spec
from tests.support.operator_proc import OperatorHandle
from tests.support.takeover import Attempts, start_holder
from tests.support.waiting import wait_phase


@pytest.fixture
def unfreeze(operator: OperatorHandle) -> Iterator[None]:
    yield
    with contextlib.suppress(Exception):
        control.thaw_namespace(operator.namespace)


def test_hung_worker_lease_expiry_takeover(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, unfreeze: None
) -> None:
    ns, duration = operator.namespace, 3
    hung, first = start_holder(kube, operator, "hung", duration, 30)
    assert first.lease_transitions == 1

    control.freeze_pod(ns, "hung-1")  # SIGSTOP: still Running in the API, no more renewals
    frozen_at = time.monotonic()
    hung.pod(2, 30, "attempt 2")
    replaced_after = time.monotonic() - frozen_at
    second = hung.held(2, 30, "attempt 2 to take the Lease")
    assert second.lease_transitions == 2  # the new fencing epoch
    assert (
        "hung-1" not in [p.metadata.name for p in pods(kube, ns, "hung")]
        or pods(kube, ns, "hung")[0].metadata.deletion_timestamp is not None
    )
    reasons = [e.reason for e in events(kube, ns, "hung")]
    assert "LeaseExpired" in reasons
    status = wait_phase(kube, ns, "hung", "Running", 10, operator)
    assert status["attempts"] == 2 and status["attemptReason"] == "lease_expired"
    # expiry is judged by locally observed time: at least one duration after the last renewal was seen
    assert duration - 1.5 <= replaced_after <= duration + 4, replaced_after
    print(f"hung worker: freeze -> next attempt's Pod created in {replaced_after:.2f}s (lease {duration}s)")


def test_the_next_worker_takes_the_lapsed_lease_at_once(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, unfreeze: None
) -> None:
    """The operator watched the Lease unchanged for a full duration before replacing the Pod; it frees it (CAS
    on that version), so the next worker takes it on its first look instead of watching it for a full
    duration of its own: a lost node's run moves on after one Lease duration, not two."""
    ns, duration = operator.namespace, 8
    create_run(kube, ns, "lapse", holder_spec(duration))
    lapse = Attempts(kube, operator, "lapse")
    lapse.held(1, 60, "attempt 1 to hold the Lease")
    control.freeze_pod(ns, "lapse-1")
    lapse.pod(2, 60, "attempt 2's Pod")
    created = time.monotonic()
    second = lapse.held(2, 60, "attempt 2 to take the Lease", interval=0.05)
    taken_after = time.monotonic() - created
    assert second.lease_transitions == 2  # a higher epoch: the frozen holder is fenced
    # A worker that had to watch the Lease itself would take it a full duration after its first look at
    # the earliest; freed, the process start (loaded machine: seconds) is all it waits for.
    assert taken_after < duration, f"attempt 2 took the Lease {taken_after:.1f}s after its Pod appeared"
    print(f"lapsed Lease: attempt 2's Pod -> Lease taken in {taken_after:.2f}s (lease {duration}s)")
