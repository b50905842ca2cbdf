"""Helpers of the real-node e2e (not a test module): kubectl as a user types it, phases with timings,
the deploy/ overlays pointed at the dev cluster's services through the node's forwarders, and the ballast
that puts a worker container over its memory limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from agentrun_dev import cluster, postgres, state
from agentrun_dev import settings as settings_mod
from agentrun_dev.node import config, host, lifecycle
from tests.support import kube

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_NS, RUNS_NS = "agentrun-system", "agentrun-runs"
APPROVER, APPROVER_GROUP = "manager", "support-managers"


class Phases:
    """Prints each phase's start and duration (the e2e's timing report)."""

    def __init__(self) -> None:
        self.t0 = self.mark = time.monotonic()
        self.name = ""
        self.done: list[tuple[str, float]] = []

    def __call__(self, name: str) -> None:
        self.end()
        self.name, self.mark = name, time.monotonic()
        print(f"\n[e2e] ==> {name}", flush=True)

    def end(self) -> None:
        if self.name:
            took = time.monotonic() - self.mark
            self.done.append((self.name, took))
            print(f"[e2e] phase {self.name:<48} {took:6.1f}s", flush=True)
            self.name = ""

    def report(self) -> None:
        self.end()
        print("\n[e2e] timings:", flush=True)
        for name, took in self.done:
            print(f"[e2e]   {name:<48} {took:6.1f}s", flush=True)
        print(f"[e2e]   {'total':<48} {time.monotonic() - self.t0:6.1f}s", flush=True)


def kubectl(
    s: settings_mod.Settings,
    *args: str,
    kubeconfig: Path | None = None,
    check: bool = True,
    show: bool = True,
) -> str:
    """kubectl's stdout, the command shown first (the e2e log reads as a transcript of the walk-through)."""
    if show:
        print("$ kubectl " + " ".join(args), flush=True)
    return kube.kubectl(kubeconfig or s.kubeconfig, *args, check=check).stdout


def pod_dsn(s: settings_mod.Settings) -> str:
    """The dev Postgres as Pods reach it: the node IP, where the forwarder listens on the same port."""
    return postgres.dsn(s).replace("127.0.0.1", config.NODE_IP).replace("localhost", config.NODE_IP)


def smtp_api(s: settings_mod.Settings) -> str:
    return f"http://127.0.0.1:{state.port(s, 'smtp-api')}"


def http_json(url: str, method: str = "GET") -> Any:
    req = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read() or b"null")


def write_overlays(s: settings_mod.Settings, root: Path) -> tuple[Path, Path]:
    """(system overlay, tenant overlay): deploy/base with the dev cluster's DSN, deploy/tenant with its SMTP.

    The tenant gets no database credentials from us: the operator provisions its role and Secret."""
    system, tenant = root / "system", root / "tenant"
    system.mkdir(parents=True, exist_ok=True)
    tenant.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(ROOT / "deploy", system)
    (system / "kustomization.yaml").write_text(
        f"""apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [{rel}/base]
secretGenerator:
  - name: agentrun-db
    namespace: {SYSTEM_NS}
    literals: [dsn={pod_dsn(s)}]
    options: {{disableNameSuffixHash: true}}
"""
    )
    rel = os.path.relpath(ROOT / "deploy", tenant)
    (tenant / "kustomization.yaml").write_text(
        f"""apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {RUNS_NS}
resources: [{rel}/tenant, approver.yaml]
configMapGenerator:
  - name: support-ticket-config
    behavior: replace
    literals:
      - smtp_host={config.NODE_IP}
      - smtp_port={state.port(s, "smtp")}
      - smtp_api=http://{config.NODE_IP}:{state.port(s, "smtp-api")}
    options: {{disableNameSuffixHash: true}}
"""
    )
    (tenant / "approver.yaml").write_text(
        f"""apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: support-managers-approve
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: agentrun-approver}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: Group, name: {APPROVER_GROUP}}}]
"""
    )
    return system, tenant


def pre_create_namespaces(s: settings_mod.Settings) -> None:
    """The namespaces, annotated so their Pods go to the real node (deploy/ itself stays unchanged)."""
    for ns in (SYSTEM_NS, RUNS_NS):
        kubectl(s, "create", "namespace", ns, check=False)
        kubectl(
            s, "annotate", "namespace", ns, "--overwrite",
            *(f"{k}={v}" for k, v in lifecycle.NAMESPACE_ANNOTATIONS.items()),
        )  # fmt: skip


def get_json(s: settings_mod.Settings, *args: str) -> dict[str, Any]:
    out = kubectl(s, "get", *args, "-o", "json", check=False, show=False)  # polled: not echoed
    return json.loads(out) if out.strip() else {}


def container_memory_cgroup(s: settings_mod.Settings, pod: dict[str, Any]) -> Path:
    """The memory cgroup kubelet made for the pod's first container (under the node's cgroup root)."""
    uid = pod["metadata"]["uid"]
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    base = host.hierarchies()["memory"] / lifecycle.cgroup_root(s).strip("/")
    for pod_dir in base.rglob(f"pod{uid}"):
        if (pod_dir / cid).is_dir():
            return pod_dir / cid
    raise AssertionError(f"no memory cgroup for container {cid} of pod {uid} under {base}")


def push_over_memory_limit(cgroup: Path, megabytes: int) -> subprocess.Popen[bytes]:
    """Ballast in the container's memory cgroup, so the cgroup exceeds its limit and the kernel's memcg OOM
    killer fires. It picks the worker: kubelet gives a Burstable container a high ``oom_score_adj``, the
    ballast keeps this process's 0. The ballast is killed too (alone it is still over the limit)."""
    # bytes * n writes every page (a bytearray's zeroed pages would not count until touched).
    script = f"echo $$ > {cgroup}/cgroup.procs && exec python3 -c 'b = b\"\\x01\" * ({megabytes} << 20)'"
    return subprocess.Popen(["sh", "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def node_ready(s: settings_mod.Settings) -> bool:
    return all(r.healthy for r in lifecycle.status(s)) and bool(cluster.status(s))
