"""A worker Pod may touch only its own run's Lease — refused by the API server (admission policy
agentrun-worker-leases), not by convention.

A real Pod of run X (``x-1``) runs with the worker ServiceAccount on the dev pod runtime, which mints its
token with TokenRequest bound to the Pod (boundObjectRef, as the kubelet does): the API server then knows the
Pod's name (``request.userInfo.extra``). From inside the Pod, with its own credentials, it tries Y's Lease.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from tests.support.waiting import wait_for

SCRIPT = textwrap.dedent(
    """
    import json, os, kubernetes
    api = kubernetes.config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
    coord = kubernetes.client.CoordinationV1Api(api)
    ns, out = os.environ["NS"], {}
    def attempt(what, fn):
        try:
            fn()
            out[what] = [200, ""]
        except kubernetes.client.ApiException as exc:
            out[what] = [exc.status, json.loads(exc.body or "{}").get("message", "")]
    def take(name):
        lease = coord.read_namespaced_lease(name, ns)
        lease.spec.holder_identity = os.environ["HOSTNAME"]
        coord.replace_namespaced_lease(name, ns, lease)
    attempt("update own", lambda: take("agentrun-x"))
    attempt("update other", lambda: take("agentrun-y"))
    attempt("create other", lambda: coord.create_namespaced_lease(
        ns, {"metadata": {"name": "agentrun-z"}, "spec": {"holderIdentity": "x-1"}}))
    attempt("delete other", lambda: coord.delete_namespaced_lease("agentrun-y", ns))
    tmp = os.environ["RESULT"] + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(out, fh)
    os.replace(tmp, os.environ["RESULT"])
    """
)


def _lease(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"holderIdentity": "", "leaseDurationSeconds": 15}}


def test_worker_pod_of_run_x_cannot_touch_run_ys_lease(
    kube: kubernetes.client.ApiClient, namespace: str, worker_account: str, tmp_path: Path
) -> None:
    coord = kubernetes.client.CoordinationV1Api(kube)
    for name in ("agentrun-x", "agentrun-y"):
        coord.create_namespaced_lease(namespace, _lease(name))  # the operator creates them ahead
    tmp_path.chmod(0o777)
    result = tmp_path / "result.json"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x-1"},
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": worker_account,
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "worker",
                    "image": "agentrun:dev",
                    "command": ["python", "-c", SCRIPT],
                    "env": [{"name": "NS", "value": namespace}, {"name": "RESULT", "value": str(result)}],
                }
            ],
        },
    }
    kubernetes.client.CoreV1Api(kube).create_namespaced_pod(namespace, pod)
    wait_for(result.exists, 120, "the worker Pod's lease attempts")
    out = json.loads(result.read_text())
    print(f"\nworker Pod x-1 against Leases: { {k: v[0] for k, v in out.items()} }")
    assert out["update own"][0] == 200, out
    for what in ("update other", "create other"):
        status, message = out[what]
        assert status in (403, 422), (what, out)
        assert "worker Pod x-1 may only touch its own run's Lease agentrun-x" in message, (what, message)
    assert out["delete other"][0] == 403  # RBAC already: workers have no delete
    assert coord.read_namespaced_lease("agentrun-y", namespace).spec.holder_identity in (None, "")


def test_worker_token_without_a_bound_pod_is_refused(
    kube: kubernetes.client.ApiClient, namespace: str, worker_account: str, dev_cluster: Any, tmp_path: Path
) -> None:
    """A token minted for the worker ServiceAccount without boundObjectRef names no Pod: refused outright."""
    coord = kubernetes.client.CoordinationV1Api(kube)
    coord.create_namespaced_lease(namespace, _lease("agentrun-x"))
    token = (
        kubernetes.client.CoreV1Api(kube)
        .create_namespaced_service_account_token(
            worker_account, namespace, {"spec": {"expirationSeconds": 600}}
        )
        .status.token
    )
    doc = yaml.safe_load(Path(dev_cluster.kubeconfig).read_text())
    doc["users"][0]["user"] = {"token": token}
    path = tmp_path / "unbound.kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    api = kubernetes.config.new_client_from_config(config_file=str(path))
    lease = kubernetes.client.CoordinationV1Api(api).read_namespaced_lease("agentrun-x", namespace)
    lease.spec.holder_identity = "intruder"
    with pytest.raises(kubernetes.client.ApiException) as caught:
        kubernetes.client.CoordinationV1Api(api).replace_namespaced_lease("agentrun-x", namespace, lease)
    assert caught.value.status in (403, 422)
    assert "may touch Leases only from a worker Pod" in str(caught.value.body)
