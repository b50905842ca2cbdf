"""The pod runtime's handle on the Kubernetes API: the core client (``agentrun_core.kube``) bound to the dev
node's kubeconfig, plus the connection details handed to pods. Objects go in and out as plain dicts.

Rule: no HTTP here; every request is the core client's and fails as its ``kube.KubeError`` classes. What is
the runtime's own: a read of an absent object is ``None`` (a pod's env names Secrets and ConfigMaps that may
not exist yet), and the pool is sized for one watch plus one request per busy pod thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from agentrun_core import kube

JSON = dict[str, Any]
KubeError = kube.KubeError  # what every call below raises; ``.status`` is the HTTP status

POOL_SIZE = 64  # the default pool (cpu*5) would serialise busy pod threads


class Kube:
    def __init__(self, kubeconfig: str) -> None:
        self.api = kube.api.pooled_client(kubeconfig, POOL_SIZE)
        self.configuration = self.api.configuration

    # --- connection details handed to pods ---------------------------------------------------------------
    @property
    def server(self) -> str:
        return str(self.configuration.host)

    def ca_pem(self) -> bytes | None:
        path = self.configuration.ssl_ca_cert
        if not path:
            return None
        with open(path, "rb") as f:
            return f.read()

    @property
    def verify_tls(self) -> bool:
        return bool(self.configuration.verify_ssl)

    # --- pods -------------------------------------------------------------------------------------------
    def list_pods(self) -> JSON:
        return kube.pods.list_(self.api, None)

    def watch_pods(self, resource_version: str, timeout_s: int) -> Iterator[JSON]:
        """Yield watch events (``{"type", "object"}``) until the server closes the stream; an ERROR event
        is raised (``kube.Gone``: list again)."""
        return kube.pods.watch_all(self.api, resource_version, timeout_s)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        kube.pods.bind(self.api, namespace, name, uid, node)

    def patch_pod_status(
        self, namespace: str, name: str, uid: str, status: JSON, resource_version: str = ""
    ) -> JSON:
        # metadata.uid in the patch is a precondition: a recreated pod of the same name answers 409; so does
        # a resourceVersion, when given, for a pod changed since (e.g. bound by kube-scheduler meanwhile).
        meta: JSON = {"uid": uid}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return kube.pods.patch_status(self.api, namespace, name, {"metadata": meta, "status": status})

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> None:
        kube.pods.delete(self.api, namespace, name, grace_seconds=0, uid=uid, background=False)

    # --- what a pod's env and token need ---------------------------------------------------------------
    def get_secret(self, namespace: str, name: str) -> JSON | None:
        return _or_none(lambda: kube.objects.get_secret(self.api, namespace, name))

    def get_config_map(self, namespace: str, name: str) -> JSON | None:
        return _or_none(lambda: kube.objects.get_config_map(self.api, namespace, name))

    def get_service_account(self, namespace: str, name: str) -> JSON | None:
        return _or_none(lambda: kube.objects.get_service_account(self.api, namespace, name))

    def request_token(self, namespace: str, sa: str, pod: str, uid: str, seconds: int) -> JSON:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid},
            },
        }
        return kube.objects.request_token(self.api, namespace, sa, body)

    def create_event(self, namespace: str, body: JSON) -> None:
        kube.objects.create_event(self.api, namespace, body)

    # --- the node and its lease ----------------------------------------------------------------------------
    def get_node(self, name: str) -> JSON | None:
        return _or_none(lambda: kube.objects.get_node(self.api, name))

    def create_node(self, body: JSON) -> JSON:
        return kube.objects.create_node(self.api, body)

    def patch_node(self, name: str, body: JSON) -> JSON:
        return kube.objects.patch_node(self.api, name, body)

    def patch_node_status(self, name: str, body: JSON) -> JSON:
        return kube.objects.patch_node(self.api, name, body, status=True)

    def get_lease(self, namespace: str, name: str) -> JSON | None:
        return _or_none(lambda: kube.get_lease(self.api, namespace, name))

    def create_lease(self, namespace: str, body: JSON) -> JSON:
        return kube.create_lease(self.api, namespace, body)

    def replace_lease(self, namespace: str, name: str, body: JSON) -> JSON:
        return kube.replace_lease(self.api, namespace, name, body)


def _or_none(read: Callable[[], JSON]) -> JSON | None:
    """``read()``, or None when the object does not exist."""
    try:
        result: JSON = read()
    except kube.NotFound:
        return None
    return result
