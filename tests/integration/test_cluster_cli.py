"""`agentrun dev` CLI against the shared dev cluster: env exports, and a pod log via `agentrun dev logs`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kubernetes
import psycopg
from kubernetes.client import ApiClient

from agentrun_dev import cluster
from tests.support.waiting import wait_for

AGENTRUN = str(Path(sys.executable).parent / "agentrun")


def _cli(handle: cluster.Handle, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTRUN_DEV_HOME": str(handle.settings.state_dir)}
    return subprocess.run([AGENTRUN, "dev", *args], env=env, capture_output=True, text=True, timeout=60)


def test_env_exports_point_at_the_running_cluster(dev_cluster: cluster.Handle) -> None:
    out = _cli(dev_cluster, "env")
    assert out.returncode == 0, out.stderr
    exported = dict(line.removeprefix("export ").split("=", 1) for line in out.stdout.splitlines())
    assert exported["KUBECONFIG"] == str(dev_cluster.kubeconfig)
    kubectl = subprocess.run(
        [str(Path(sys.executable).parent / "kubectl"), "get", "--raw", "/readyz"],
        env={**os.environ, "KUBECONFIG": exported["KUBECONFIG"]}, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert kubectl.stdout.strip() == "ok", kubectl.stderr
    with psycopg.connect(exported["AGENTRUN_DSN"], connect_timeout=5) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("agentrun",)


def test_dev_logs_prints_a_pods_container_log(
    dev_cluster: cluster.Handle, kube: ApiClient, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(kube)
    word = f"hello-{namespace}"
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "say"},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "python", "command": ["python", "-c", f"print({word!r})"]}]},
    })  # fmt: skip
    wait_for(
        lambda: core.read_namespaced_pod("say", namespace).status.phase == "Succeeded", 60, "pod Succeeded"
    )
    out = _cli(dev_cluster, "logs", "say", "-n", namespace)
    assert out.returncode == 0, out.stderr
    assert word in out.stdout
    missing = _cli(dev_cluster, "logs", "nope", "-n", namespace)
    assert missing.returncode == 1 and "no logs" in missing.stderr
