"""The benchmarks' handle on the dev cluster (P3 on the real node, P4, P6): its admin client, one namespace
with the worker ServiceAccount, an operator process scoped to it, AgentRuns created and watched there, and an
approver identity; the namespace (and its runs' finalizers) gone at the end.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes

from agentrun_dev import finalizers
from bench import db

GROUP, VERSION, PLURAL = "agentrun.dev", "v1alpha1", "agentruns"
REPO = Path(__file__).resolve().parents[1]
_PAGE = os.sysconf("SC_PAGE_SIZE")


def run_name(i: int) -> str:
    return f"r{i:04d}"


def rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE / 2**20


class Cluster:
    """The dev cluster's admin client, one namespace with the worker ServiceAccount, an operator."""

    def __init__(self, tag: str) -> None:
        from agentrun_dev import cluster as dev_cluster

        self.handle = dev_cluster.handle()
        self.api = db.kube_api(str(self.handle.kubeconfig))
        self.core: Any = kubernetes.client.CoreV1Api(self.api)  # dict bodies: untyped on purpose
        self.custom: Any = kubernetes.client.CustomObjectsApi(self.api)
        self.namespace = f"bench-{tag}-{os.getpid()}"
        self.operator: subprocess.Popen[bytes] | None = None
        self.log = Path(os.environ.get("TMPDIR", "/tmp")) / f"agentrun-bench-{self.namespace}.log"

    def __enter__(self) -> Cluster:
        self.core.create_namespace(
            {"metadata": {"name": self.namespace, "labels": {"agentrun.dev/bench": "true"}}}
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.core.read_namespaced_service_account("default", self.namespace)
                break
            except kubernetes.client.ApiException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self._worker_account()
        return self

    def _worker_account(self) -> None:
        rbac: Any = kubernetes.client.RbacAuthorizationV1Api(self.api)
        ns, name = self.namespace, "agentrun-worker"
        self.core.create_namespaced_service_account(ns, {"metadata": {"name": name}})
        rbac.create_namespaced_role(
            ns,
            {
                "metadata": {"name": name},
                "rules": [
                    {
                        "apiGroups": ["coordination.k8s.io"],
                        "resources": ["leases"],
                        "verbs": ["get", "create", "update"],
                    }
                ],
            },
        )
        rbac.create_namespaced_role_binding(
            ns,
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
            },
        )

    def start_operator(self, dsn: str, extra_env: dict[str, str] | None = None) -> int:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRUN_")}
        env.update(self.handle.env)
        env.update(
            {
                "AGENTRUN_DEV_HOME": os.environ.get("AGENTRUN_DEV_HOME", ""),
                "KUBECONFIG": str(self.handle.kubeconfig),
                "AGENTRUN_DSN": dsn,
                "AGENTRUN_WATCH_NAMESPACES": self.namespace,
                "AGENTRUN_LEADER_NAMESPACE": self.namespace,
                "AGENTRUN_LEADER_DURATION_SECONDS": "15",
                "AGENTRUN_WORKER_SERVICE_ACCOUNT": "agentrun-worker",
                "PYTHONUNBUFFERED": "1",
                **(extra_env or {}),
            }
        )
        with self.log.open("wb") as out:
            self.operator = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import sys; from agentrun import cli; sys.exit(cli.main(['operator']))",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                start_new_session=True,
            )
        deadline = time.monotonic() + 120
        coord: Any = kubernetes.client.CoordinationV1Api(self.api)
        while time.monotonic() < deadline:
            with contextlib.suppress(kubernetes.client.ApiException):
                lease = coord.read_namespaced_lease("agentrun-operator", self.namespace)
                if lease.spec.holder_identity:
                    return self.operator.pid
            if self.operator.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"the operator did not lead within 120 s; log: {self.log}")

    def approver(self) -> str:
        """A kubeconfig of user ``bench-approver`` bound to the ``agentrun-approver`` ClusterRole here: the
        bench's approvals go through the API server and its admission policies as a person's do."""
        from agentrun_dev import identities

        rbac: Any = kubernetes.client.RbacAuthorizationV1Api(self.api)
        user, role = "bench-approver", "agentrun-approver"
        rbac.create_namespaced_role_binding(
            self.namespace,
            {
                "metadata": {"name": user},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            },
        )
        return str(identities.kubeconfig_for(user, ["bench-approvers"], self.handle.settings))

    def create_run(self, name: str, spec: dict[str, Any]) -> str:
        """Create AgentRun ``name`` with ``spec``; its uid (the run's id in Postgres)."""
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentRun", "metadata": {"name": name}}
        body["spec"] = spec
        created = self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)
        return str(created["metadata"]["uid"])

    def run_object(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name))

    def delete_run(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def create_runs(self, n: int, graph: str) -> None:
        """Runs ``run_name(0)`` … ``run_name(n - 1)`` of ``graph``."""
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: self.create_run(run_name(i), {"graph": graph, "input": {}}), range(n)))

    def phases(self) -> dict[str, int]:
        runs = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)["items"]
        out: dict[str, int] = {}
        for r in runs:
            phase = (r.get("status") or {}).get("phase") or "New"
            out[phase] = out.get(phase, 0) + 1
        return out

    def pods(self) -> tuple[int, int]:
        """(Pods whose process may still run, all Pod objects)."""
        items = self.core.list_namespaced_pod(self.namespace).items
        live = sum(1 for p in items if (p.status.phase or "Pending") in ("Pending", "Running"))
        return live, len(items)

    def wait_all(self, phase: str, n: int, timeout: float) -> float:
        """Seconds until ``n`` runs show ``phase``. Listing every run is itself load on the API server: the
        look is spaced with ``n`` (20 s at 10,000), and each is printed with the operator's RSS."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            reached = self.phases().get(phase, 0)
            if self.operator is not None and n >= 1000:
                at, rss = time.monotonic() - t0, rss_mb(self.operator.pid)
                print(f"  ... {reached}/{n} {phase} at {at:.0f}s, operator RSS {rss:.0f} MB", file=sys.stderr)
            if reached >= n:
                return time.monotonic() - t0
            if self.operator is not None and self.operator.poll() is not None:
                raise RuntimeError(f"the operator exited {self.operator.returncode}; log: {self.log}")
            time.sleep(max(1.0, n / 500))
        raise TimeoutError(f"{n} runs not {phase} within {timeout:.0f}s: {self.phases()}; log: {self.log}")

    def __exit__(self, *exc: Any) -> None:
        if self.operator is not None and self.operator.poll() is None:
            os.killpg(self.operator.pid, signal.SIGTERM)
            try:
                self.operator.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.operator.pid, signal.SIGKILL)
        # No operator any more: drop its finalizers so the namespace can go (agentrun_dev/finalizers.py).
        finalizers.release_namespace(self.api, self.namespace)
        with contextlib.suppress(kubernetes.client.ApiException):
            self.core.delete_namespace(self.namespace, propagation_policy="Background")
        # Gone before the next case starts: its Pods' deletions would count in that case's load.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                self.core.read_namespace(self.namespace)
            except kubernetes.client.ApiException as exc:
                if exc.status == 404:
                    break
            time.sleep(0.5)
        self.api.close()
