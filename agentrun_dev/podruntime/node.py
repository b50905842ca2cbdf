"""The Node object and its heartbeat Lease: bodies built purely, one thread that keeps them fresh.

The node lifecycle controller (kube-controller-manager) watches the Lease in ``kube-node-lease``: renewals
stop → after ``--node-monitor-grace-period`` it sets ``Ready=Unknown``, taints the node ``unreachable`` and
marks its pods not ready. A frozen runtime (``agentrun dev node freeze``) stops both writes to show that.
"""

from __future__ import annotations

import logging
import os
import platform
import threading
import time
from collections.abc import Callable
from typing import Any

from agentrun_dev.podruntime import kubeapi, model
from agentrun_dev.podruntime import settings as settings_mod

log = logging.getLogger(__name__)
LEASE_NAMESPACE = "kube-node-lease"
RUNTIME_VERSION = "agentrun-local://0.1.0"


def _conditions(now: float, since: float) -> list[dict[str, Any]]:
    def c(type_: str, status: str, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": model.rfc3339(now),
            "lastTransitionTime": model.rfc3339(since),
        }

    return [
        c("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        c("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        c("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        c("Ready", "True", "KubeletReady", "agentrun local pod runtime is posting ready status"),
    ]


def status_body(s: settings_mod.Settings, now: float, since: float) -> dict[str, Any]:
    resources = {"cpu": s.cpu, "memory": f"{s.memory_bytes // 1024}Ki", "pods": str(s.pods)}
    uname = os.uname()
    return {
        "capacity": resources,
        "allocatable": resources,
        "conditions": _conditions(now, since),
        "addresses": [
            {"type": "InternalIP", "address": s.host_ip},
            {"type": "Hostname", "address": s.node_name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": s.kubelet_port}},
        "nodeInfo": {
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
            "kernelVersion": uname.release,
            "osImage": "agentrun local pod runtime",
            "containerRuntimeVersion": RUNTIME_VERSION,
            "kubeletVersion": "v1.37.0-agentrun",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": _arch(),
        },
    }


def _arch() -> str:
    m = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(m, m)


def node_body(s: settings_mod.Settings, now: float) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": s.node_name,
            "labels": {
                "kubernetes.io/hostname": s.node_name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": _arch(),
                "agentrun.dev/local-pod-runtime": "true",
            },
        },
        "spec": {},
        "status": status_body(s, now, now),
    }


def lease_body(s: settings_mod.Settings, node_uid: str, now: float, rv: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": s.node_name,
        "namespace": LEASE_NAMESPACE,
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": s.node_name, "uid": node_uid}],
    }
    if rv:
        meta["resourceVersion"] = rv
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {
            "holderIdentity": s.node_name,
            "leaseDurationSeconds": s.lease_duration_s,
            "renewTime": model.rfc3339_micro(now),
        },
    }


class Heartbeat:
    """Registers the node, then renews its Lease and status until stopped; skips beats while frozen."""

    def __init__(self, kube: kubeapi.Kube, s: settings_mod.Settings, frozen: Callable[[], bool]) -> None:
        self.kube, self.s, self.frozen = kube, s, frozen
        self.stop = threading.Event()
        self.node_uid = ""
        self.ready_since = time.time()

    def register(self) -> None:
        now = time.time()
        existing = self.kube.get_node(self.s.node_name)
        if existing is None:
            try:
                existing = self.kube.create_node(node_body(self.s, now))
            except kubeapi.KubeError as e:
                if e.status != 409:
                    raise
                existing = self.kube.get_node(self.s.node_name) or {}
        self.node_uid = existing["metadata"]["uid"]
        self.beat_status(now)
        self.beat_lease(now)
        log.info("node %s registered (uid %s)", self.s.node_name, self.node_uid)

    def beat_status(self, now: float) -> None:
        self.kube.patch_node_status(self.s.node_name, {"status": status_body(self.s, now, self.ready_since)})

    def beat_lease(self, now: float) -> None:
        ns, name = LEASE_NAMESPACE, self.s.node_name
        current = self.kube.get_lease(ns, name)
        if current is None:
            self.kube.create_lease(ns, lease_body(self.s, self.node_uid, now))
        else:
            rv = current["metadata"]["resourceVersion"]
            self.kube.replace_lease(ns, name, lease_body(self.s, self.node_uid, now, rv))

    def run(self) -> None:
        last_status = last_lease = time.time()
        was_frozen = False
        while not self.stop.wait(0.5):
            if self.frozen():
                was_frozen = True
                continue
            now = time.time()
            try:
                # After a thaw beat at once, so the node controller sees it back without waiting a period.
                if was_frozen or now - last_lease >= self.s.lease_renew_s:
                    self.beat_lease(now)
                    last_lease = now
                if was_frozen or now - last_status >= self.s.node_status_s:
                    if self.kube.get_node(self.s.node_name) is None:
                        self.register()
                    else:
                        self.beat_status(now)
                    last_status = now
                was_frozen = False
            except Exception:
                log.exception("node heartbeat failed; retrying")
