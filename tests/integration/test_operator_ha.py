"""HA: one leader per Lease; standby takes over when the leader dies; the operator survives restarts."""

from __future__ import annotations

import time

import kubernetes

from tests.support.kube import create_run, pods
from tests.support.operator_proc import OperatorHandle, Replica
from tests.support.waiting import wait_for

DURATION = 4  # seconds: leader Lease of these tests (short, to measure failover quickly)


def pair(kube: kubernetes.client.ApiClient, operator: OperatorHandle) -> tuple[Replica, Replica]:
    """Replace the fixture's replica by a leader and a standby using a short leader Lease."""
    operator.stop()  # SIGTERM: releases the Lease at once
    operator.env["AGENTRUN_LEADER_DURATION_SECONDS"] = str(DURATION)
    first = operator.start()
    operator.wait_leader(kube, timeout=30)
    assert operator.leader(kube) == first.identity
    return first, operator.start()


def test_leader_killed_standby_takes_over(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle
) -> None:
    first, standby = pair(kube, operator)
    wait_for(lambda: "standby:" in standby.logs(), 30, "the standby to wait", on_timeout=operator.logs)
    time.sleep(1)
    assert operator.leader(kube) == first.identity
    assert "holds Lease" not in standby.logs()

    operator.kill(first)  # SIGKILL: no release, the standby must wait for the Lease to expire
    killed_at = time.monotonic()
    holder = operator.wait_leader(kube, timeout=30, not_=first.identity)
    failover = time.monotonic() - killed_at
    assert holder == standby.identity
    duration = float(operator.env["AGENTRUN_LEADER_DURATION_SECONDS"])
    # expiry is judged by the standby's own clock: one duration without change, plus its poll interval
    assert failover < duration + 3.0, f"failover took {failover:.1f}s (lease {duration}s)"
    print(f"leader failover after SIGKILL: {failover:.2f}s (lease duration {duration}s)")

    # the new leader reconciles: a run created now gets its admission row and Pod
    create_run(
        kube,
        operator.namespace,
        "after-failover",
        {"graph": "pkg.mod:graph", "worker": {"command": ["sleep", "30"]}},
    )
    wait_for(
        lambda: pods(kube, operator.namespace, "after-failover"),
        30,
        "a Pod from the new leader",
        on_timeout=operator.logs,
    )


def test_graceful_stop_releases_leadership_at_once(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle
) -> None:
    first, standby = pair(kube, operator)
    wait_for(lambda: "standby:" in standby.logs(), 30, "the standby to wait", on_timeout=operator.logs)
    operator.stop(first)  # SIGTERM: kopf cleanup releases the Lease
    stopped_at = time.monotonic()
    assert operator.wait_leader(kube, timeout=15, not_=first.identity) == standby.identity
    assert time.monotonic() - stopped_at < 3.0
    assert first.proc.returncode == 0, first.logs()


def test_deposed_leader_exits(kube: kubernetes.client.ApiClient, operator: OperatorHandle) -> None:
    """Someone else takes the Lease (e.g. after a network partition): the old leader must stop at once."""
    leader = operator.current
    coord = kubernetes.client.CoordinationV1Api(kube)
    lease = coord.read_namespaced_lease(operator.lease_name, operator.namespace)
    lease.spec.holder_identity = "usurper"
    coord.replace_namespaced_lease(operator.lease_name, operator.namespace, lease)
    wait_for(lambda: not leader.alive(), 15, "the deposed leader to exit", on_timeout=operator.logs)
    assert leader.proc.returncode == 3
    assert "leadership lost" in leader.logs()
