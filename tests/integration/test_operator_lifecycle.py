"""Runs of real graphs in real worker Pods on the dev cluster: success, eviction, OOM kill, lost node, unknown
graph, operator killed mid-run. Effects are counted on the provider's side (lines in a file), not only in the
ledger."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import pytest

from agentrun_core import store
from agentrun_dev.podruntime import control
from tests.support.kube import condition, create_run, events, kubectl, pods, run_gone
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import lines, steps_spec
from tests.support.takeover import Attempts
from tests.support.waiting import wait_for, wait_phase


def spec(path: Path, lease: int = 8, **input_: Any) -> dict[str, Any]:
    return steps_spec(path, max_attempts=4, lease=lease, **input_)


def attempts(dsn: str, uid: str) -> list[store.Attempt]:
    with psycopg.connect(dsn) as conn:
        return store.list_attempts(conn, uid)


def db_run(dsn: str, uid: str) -> store.Run:
    with psycopg.connect(dsn) as conn:
        run = store.get_run(conn, uid)
    assert run is not None
    return run


def pod_named(kube: kubernetes.client.ApiClient, ns: str, run: str, name: str) -> Any:
    for pod in pods(kube, ns, run):
        if pod.metadata.name == name:
            return pod
    return None


def test_steps_with_effect_succeed(
    kube: kubernetes.client.ApiClient,
    operator: OperatorHandle,
    tmp_path: Path,
    admin_kubeconfig: Path,
    pg_dsn: str,
) -> None:
    ns, out = operator.namespace, tmp_path / "effects.txt"
    uid = create_run(kube, ns, "simple", spec(out))["metadata"]["uid"]
    waited = kubectl(
        admin_kubeconfig, "wait", "-n", ns, "--for=condition=Succeeded", "ar/simple", "--timeout=90s"
    )
    assert waited.returncode == 0, waited.stderr + operator.logs()
    status = wait_phase(kube, ns, "simple", "Succeeded", 10, operator)
    assert len(lines(out)) == 1
    assert status["attempts"] == 1 and status["restarts"] == 0
    assert status["effects"]["sent"] + status["effects"]["confirmed"] == 1
    assert status["completionTime"] and status["startTime"]
    assert condition(status, "Running")["status"] == "False"
    assert db_run(pg_dsn, uid).status == "succeeded"
    reasons = [e.reason for e in events(kube, ns, "simple")]
    for expected in ("Admitted", "AttemptStarted", "Succeeded"):
        assert expected in reasons, reasons


def test_eviction_mid_run_resumes_from_checkpoint(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path, pg_dsn: str
) -> None:
    ns, out = operator.namespace, tmp_path / "effects.txt"
    uid = create_run(kube, ns, "evictee", spec(out, pause={"prepare": 3, "act": 0}))["metadata"]["uid"]
    wait_for(
        lambda: (p := pod_named(kube, ns, "evictee", "evictee-1")) and p.status.phase == "Running",
        30,
        "attempt 1 running",
        on_timeout=operator.logs,
    )
    time.sleep(1.0)  # inside prepare's pause
    kubernetes.client.CoreV1Api(kube).create_namespaced_pod_eviction(
        "evictee-1", ns, {"metadata": {"name": "evictee-1", "namespace": ns}}
    )
    evicted_at = time.monotonic()
    loss_seen = _wait_gone_or_terminated(kube, ns, "evictee", "evictee-1")
    Attempts(kube, operator, "evictee").pod(2, 30, "attempt 2")
    resumed_after = time.monotonic() - loss_seen
    since_eviction = time.monotonic() - evicted_at
    status = wait_phase(kube, ns, "evictee", "Succeeded", 90, operator)
    assert len(lines(out)) == 1
    assert status["attempts"] == 2 and status["attemptReason"] == "evicted"
    assert [a.start_reason for a in attempts(pg_dsn, uid)] == ["first", "evicted"]
    print(
        f"eviction: pod loss observed -> next attempt's Pod created in {resumed_after:.2f}s "
        f"({since_eviction:.2f}s after the eviction, including the worker's drain)"
    )


def _wait_gone_or_terminated(kube: kubernetes.client.ApiClient, ns: str, run: str, name: str) -> float:
    def lost() -> bool:
        pod = pod_named(kube, ns, run, name)
        return pod is None or pod.status.phase in ("Succeeded", "Failed")

    wait_for(lost, 30, f"{name} to end", interval=0.05)
    return time.monotonic()


def test_oom_kill_resumes_and_effect_happens_once(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path, pg_dsn: str
) -> None:
    ns, out = operator.namespace, tmp_path / "effects.txt"
    body = spec(out, oom_attempt=1)
    body["worker"] = {"resources": {"limits": {"memory": "300Mi"}}}
    uid = create_run(kube, ns, "hog", body)["metadata"]["uid"]
    status = wait_phase(kube, ns, "hog", "Succeeded", 120, operator)
    assert status["attempts"] == 2 and status["attemptReason"] == "OOMKilled"
    first = pod_named(kube, ns, "hog", "hog-1")
    if first is not None:
        terminated = first.status.container_statuses[0].state.terminated
        assert terminated.reason == "OOMKilled" and terminated.exit_code == 137
    assert len(lines(out)) == 1, "the effect performed before the OOM kill must not be performed again"
    with psycopg.connect(pg_dsn) as conn:
        effects = store.list_effects(conn, uid)
    assert len(effects) == 1 and effects[0].status in ("sent", "confirmed")
    first_attempt = attempts(pg_dsn, uid)[0]
    assert first_attempt.outcome == "lost" and first_attempt.detail.startswith("OOMKilled")


@pytest.fixture
def unfreeze() -> Iterator[None]:
    yield
    with contextlib.suppress(Exception):
        control.thaw()


@pytest.mark.serial  # the whole node freezes: every other test's workers would stop with it
def test_lost_node_lease_expiry_takeover_fences_stale_worker(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path, pg_dsn: str, unfreeze: None
) -> None:
    ns, out = operator.namespace, tmp_path / "effects.txt"
    uid = create_run(kube, ns, "island", spec(out, lease=4, pause={"prepare": 6}))["metadata"]["uid"]
    island = Attempts(kube, operator, "island")
    island.held(1, 60, "attempt 1 holds the Lease")
    control.freeze()  # the node looks lost: processes stopped, no status or Lease writes
    frozen_at = time.monotonic()
    try:
        island.pod(2, 30, "attempt 2 Pod")
        replaced_after = time.monotonic() - frozen_at
    finally:
        control.thaw()
    status = wait_phase(kube, ns, "island", "Succeeded", 90, operator)
    assert status["attempts"] == 2 and status["attemptReason"] == "lease_expired"
    assert "LeaseExpired" in [e.reason for e in events(kube, ns, "island")]
    run = db_run(pg_dsn, uid)
    assert run.lease_epoch >= 2  # the new attempt's epoch fences the stale one
    assert len(lines(out)) == 1
    print(f"lost node: freeze -> next attempt's Pod created in {replaced_after:.2f}s (lease 4s)")


def test_unknown_graph_fails_invalid_spec_and_operator_unharmed(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path
) -> None:
    ns = operator.namespace
    create_run(kube, ns, "typo", {"graph": "tests.integration.no_such_module:graph", "input": {}})
    status = wait_phase(kube, ns, "typo", ("Failed", "Succeeded"), 60, operator)
    assert status["phase"] == "Failed"
    failed = condition(status, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "InvalidSpec", failed
    warnings = [e for e in events(kube, ns, "typo") if e.type == "Warning"]
    assert any(e.reason == "InvalidSpec" for e in warnings), [(e.reason, e.message) for e in warnings]
    assert status["attempts"] == 1  # not retried: the spec cannot run
    # the operator is unharmed: the next run in the namespace succeeds
    out = tmp_path / "effects.txt"
    create_run(kube, ns, "fine", spec(out))
    wait_phase(kube, ns, "fine", "Succeeded", 90, operator)
    assert operator.current.alive()


def test_operator_killed_mid_run_and_restarted(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path
) -> None:
    ns, out = operator.namespace, tmp_path / "effects.txt"
    create_run(kube, ns, "orphan", spec(out, pause={"prepare": 3}))
    wait_phase(kube, ns, "orphan", "Running", 30, operator)
    operator.kill()  # SIGKILL mid-run
    time.sleep(1)
    operator.start()
    operator.wait_leader(kube, timeout=30)
    status = wait_phase(kube, ns, "orphan", "Succeeded", 90, operator)
    assert len(lines(out)) == 1
    assert status["attempts"] == 1  # the worker kept running; no duplicate attempt


def test_delete_mid_run_stops_worker_at_step_boundary(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path, pg_dsn: str
) -> None:
    ns, out = operator.namespace, tmp_path / "effects.txt"
    uid = create_run(kube, ns, "gone", spec(out, pause={"prepare": 3}))["metadata"]["uid"]
    wait_for(
        lambda: (p := pod_named(kube, ns, "gone", "gone-1")) and p.status.phase == "Running",
        30,
        "attempt 1 running",
        on_timeout=operator.logs,
    )
    time.sleep(0.5)
    kubernetes.client.CustomObjectsApi(kube).delete_namespaced_custom_object(
        "agentrun.dev", "v1alpha1", ns, "agentruns", "gone"
    )

    wait_for(lambda: run_gone(kube, ns, "gone"), 60, "the AgentRun to be deleted", on_timeout=operator.logs)
    live = [
        p
        for p in pods(kube, ns, "gone")
        if p.status.phase in ("Pending", "Running") and p.metadata.deletion_timestamp is None
    ]
    assert live == []
    assert db_run(pg_dsn, uid).status == "cancelled"
    assert lines(out) == []  # stopped before the effect step


def test_ttl_after_finished_deletes_the_run(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path
) -> None:
    ns = operator.namespace
    create_run(kube, ns, "brief", {**spec(tmp_path / "effects.txt"), "ttlSecondsAfterFinished": 2})
    wait_phase(kube, ns, "brief", "Succeeded", 90, operator)
    finished = time.monotonic()

    wait_for(lambda: run_gone(kube, ns, "brief"), 30, "TTL deletion", on_timeout=operator.logs)
    assert time.monotonic() - finished >= 0.5
