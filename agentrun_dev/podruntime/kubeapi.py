"""The only module of the pod runtime that talks to the Kubernetes API. Objects go in and out as plain dicts.

Every call returns raw JSON (``_preload_content=False``): the runtime works on dicts, and the generated
models reject some valid responses (``pods/binding`` answers with a Status the ``V1Binding`` model refuses).
Errors become :class:`ApiError` with the HTTP status.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from kubernetes import client, config

JSON = dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: str = "") -> None:
        super().__init__(f"{status} {reason}: {body[:300]}")
        self.status = status
        self.reason = reason
        self.body = body


def _call(fn: Any, *args: Any, **kwargs: Any) -> JSON:
    try:
        resp = fn(*args, _preload_content=False, **kwargs)
    except client.ApiException as e:
        raise ApiError(int(e.status or 0), str(e.reason), str(e.body or "")) from None
    data = resp.data
    return json.loads(data) if data else {}


class Kube:
    def __init__(self, kubeconfig: str) -> None:
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
        # One watch + one request per busy pod thread; the default pool (cpu*5) would serialise them.
        cfg.connection_pool_maxsize = 64
        self.configuration = cfg
        self.api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api)
        self.coord = client.CoordinationV1Api(self.api)

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
        return _call(self.core.list_pod_for_all_namespaces)

    def watch_pods(self, resource_version: str, timeout_s: int) -> Iterator[JSON]:
        """Yield watch events (``{"type", "object"}``) until the server closes the stream."""
        try:
            resp: Any = self.core.list_pod_for_all_namespaces(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_s,
                _preload_content=False,
                _request_timeout=timeout_s + 30,
            )
        except client.ApiException as e:
            raise ApiError(int(e.status or 0), str(e.reason), str(e.body or "")) from None
        try:
            buf = b""
            for chunk in resp.stream(amt=65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            resp.release_conn()

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        _call(self.core.create_namespaced_pod_binding, name, namespace, body)

    def patch_pod_status(
        self, namespace: str, name: str, uid: str, status: JSON, resource_version: str = ""
    ) -> JSON:
        # metadata.uid in the patch is a precondition: a recreated pod of the same name answers 409; so does
        # a resourceVersion, when given, for a pod changed since (e.g. bound by kube-scheduler meanwhile).
        meta: JSON = {"uid": uid}
        if resource_version:
            meta["resourceVersion"] = resource_version
        body = {"metadata": meta, "status": status}
        return _call(
            self.core.patch_namespaced_pod_status,
            name,
            namespace,
            body,
            _content_type="application/strategic-merge-patch+json",
        )

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> None:
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        _call(self.core.delete_namespaced_pod, name, namespace, body=body)

    # --- what a pod's env and token need ---------------------------------------------------------------
    def get_secret(self, namespace: str, name: str) -> JSON | None:
        return self._get_or_none(self.core.read_namespaced_secret, name, namespace)

    def get_config_map(self, namespace: str, name: str) -> JSON | None:
        return self._get_or_none(self.core.read_namespaced_config_map, name, namespace)

    def get_service_account(self, namespace: str, name: str) -> JSON | None:
        return self._get_or_none(self.core.read_namespaced_service_account, name, namespace)

    def request_token(self, namespace: str, sa: str, pod: str, uid: str, seconds: int) -> JSON:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid},
            },
        }
        return _call(self.core.create_namespaced_service_account_token, sa, namespace, body)

    def create_event(self, namespace: str, body: JSON) -> None:
        _call(self.core.create_namespaced_event, namespace, body)

    # --- the node and its lease ----------------------------------------------------------------------------
    def get_node(self, name: str) -> JSON | None:
        return self._get_or_none(self.core.read_node, name)

    def create_node(self, body: JSON) -> JSON:
        return _call(self.core.create_node, body)

    def patch_node(self, name: str, body: JSON) -> JSON:
        return _call(self.core.patch_node, name, body, _content_type="application/strategic-merge-patch+json")

    def patch_node_status(self, name: str, body: JSON) -> JSON:
        return _call(
            self.core.patch_node_status, name, body, _content_type="application/strategic-merge-patch+json"
        )

    def get_lease(self, namespace: str, name: str) -> JSON | None:
        return self._get_or_none(self.coord.read_namespaced_lease, name, namespace)

    def create_lease(self, namespace: str, body: JSON) -> JSON:
        return _call(self.coord.create_namespaced_lease, namespace, body)

    def replace_lease(self, namespace: str, name: str, body: JSON) -> JSON:
        return _call(self.coord.replace_namespaced_lease, name, namespace, body)

    @staticmethod
    def _get_or_none(fn: Any, *args: Any) -> JSON | None:
        try:
            return _call(fn, *args)
        except ApiError as e:
            if e.status == 404:
                return None
            raise
