"""Pods, Leases and attempts belong to the run's uid, not its name: a run recreated under the same name gets
its own Lease and its own effects, and never counts the earlier run's Pods as its attempts (real worker,
real graph; effects counted in the file the effect appends to)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import kubernetes

from tests.support.kube import create_run, kubectl, pods, run_gone
from tests.support.operator_proc import OperatorHandle
from tests.support.specs import STEPS, lines, run_spec
from tests.support.waiting import wait_for, wait_phase


def spec(path: Path, **extra: Any) -> dict[str, Any]:
    input_ = {"path": str(path), **extra.pop("input", {})}
    return run_spec(STEPS, input_, retry={"backoffSeconds": 0, "maxAttempts": 1}, **extra)


def _lease(kube: kubernetes.client.ApiClient, ns: str, name: str) -> Any:
    try:
        return kubernetes.client.CoordinationV1Api(kube).read_namespaced_lease(f"agentrun-{name}", ns)
    except kubernetes.client.ApiException:
        return None


def _recreate(kube: kubernetes.client.ApiClient, ns: str, name: str, body: dict[str, Any]) -> str:
    """Create as soon as the API server accepts the name again (the old object may still be finalizing)."""

    def attempt() -> str | None:
        try:
            return str(create_run(kube, ns, name, body)["metadata"]["uid"])
        except kubernetes.client.ApiException as exc:
            if exc.status == 409:
                return None
            raise

    return str(wait_for(attempt, 60, f"{name} to be created again", interval=0.05))


def test_delete_and_recreate_at_once_gets_a_fresh_lease_and_its_own_effects(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path
) -> None:
    ns, first_out, second_out = operator.namespace, tmp_path / "first.txt", tmp_path / "second.txt"
    first = create_run(kube, ns, "same", spec(first_out, input={"pause": {"prepare": 5}}))
    old_uid = first["metadata"]["uid"]
    wait_for(
        lambda: (lease := _lease(kube, ns, "same")) and lease.spec.holder_identity == "same-1",
        60,
        "the first run's worker to hold the Lease",
        on_timeout=operator.logs,
    )
    kubernetes.client.CustomObjectsApi(kube).delete_namespaced_custom_object(
        "agentrun.dev", "v1alpha1", ns, "agentruns", "same"
    )
    new_uid = _recreate(kube, ns, "same", spec(second_out))
    assert new_uid != old_uid
    status = wait_phase(kube, ns, "same", "Succeeded", 120, operator)
    assert status["attempts"] == 1 and status["restarts"] == 0, status
    assert lines(first_out) == []  # the first run was stopped in its first step
    assert len(lines(second_out)) == 1  # one effect, the new run's own
    lease = _lease(kube, ns, "same")
    assert lease is not None
    assert (lease.metadata.labels or {}).get("agentrun.dev/run-uid") == new_uid
    assert [o.uid for o in lease.metadata.owner_references or ()] == [new_uid]
    time.sleep(3)  # garbage collection of the old run's dependents has had its chance; nothing of ours went
    lease = _lease(kube, ns, "same")
    assert lease is not None and (lease.metadata.labels or {}).get("agentrun.dev/run-uid") == new_uid


def test_recreate_after_orphan_delete_ignores_the_old_pods(
    kube: kubernetes.client.ApiClient, operator: OperatorHandle, tmp_path: Path, admin_kubeconfig: Path
) -> None:
    ns, first_out, second_out = operator.namespace, tmp_path / "first.txt", tmp_path / "second.txt"
    create_run(kube, ns, "orph", spec(first_out))
    wait_phase(kube, ns, "orph", "Succeeded", 120, operator)
    # The worker has exited (else the finalizer would stop, i.e. delete, its Pod): the Pod stays as history.
    wait_for(
        lambda: [p.status.phase for p in pods(kube, ns, "orph")] == ["Succeeded"],
        60,
        "the first run's Pod to be Succeeded",
        on_timeout=operator.logs,
    )
    deleted = kubectl(admin_kubeconfig, "delete", "-n", ns, "ar/orph", "--cascade=orphan", "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    wait_for(lambda: run_gone(kube, ns, "orph"), 60, "the first run to be deleted", on_timeout=operator.logs)
    assert [p.metadata.name for p in pods(kube, ns, "orph")] == ["orph-1"]  # orphaned, still there

    new_uid = _recreate(kube, ns, "orph", spec(second_out))  # maxAttempts 1: one wrong loss would fail it
    status = wait_phase(kube, ns, "orph", ("Succeeded", "Failed"), 120, operator)
    assert status["phase"] == "Succeeded", status
    assert status["attempts"] == 1 and status["restarts"] == 0, status
    assert len(lines(first_out)) == 1 and len(lines(second_out)) == 1
    mine = [p for p in pods(kube, ns, "orph") if p.metadata.deletion_timestamp is None]
    assert [(p.metadata.labels or {}).get("agentrun.dev/run-uid") for p in mine] == [new_uid]
