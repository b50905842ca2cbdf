"""A pod runtime that dies and comes back: no orphaned processes, lost containers reported like kubelet does.

Restarting the shared runtime would disturb every other test, so this starts a second runtime process for
its own Node (``--no-bind``: it only runs pods whose ``nodeName`` names it) against the same API server.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from agentrun_dev import cluster
from tests.support.waiting import wait_for

# Generous: a runtime started on a loaded 2-core machine took 15-20 s to register its node.
# The deadline only bounds a hang; every wait returns as soon as its condition holds.
WAIT = 90.0
REPO = Path(__file__).resolve().parents[2]
TICKER = (
    "import itertools, time\nfor i in itertools.count():\n    print(i, flush=True)\n    time.sleep(0.05)\n"
)


class PrivateRuntime:
    def __init__(self, handle: cluster.Handle, state_dir: Path, node: str) -> None:
        self.handle, self.state_dir, self.node = handle, state_dir, node
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [
            sys.executable,
            "-m",
            "agentrun_dev.podruntime",
            "--kubeconfig",
            str(self.handle.kubeconfig),
            "--state-dir",
            str(self.state_dir),
            "--node-name",
            self.node,
            "--no-bind",
        ]
        with open(self.state_dir / "runtime.log", "ab") as log:
            self.proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(15)

    def container_pid(self, uid: str) -> int:
        record = self.state_dir / "podruntime" / "procs" / uid / "main.json"
        return int(json.loads(record.read_text())["pid"])


@pytest.fixture
def private_runtime(
    dev_cluster: cluster.Handle, kube: kubernetes.client.ApiClient, tmp_path: Path
) -> Iterator[PrivateRuntime]:
    rt = PrivateRuntime(dev_cluster, tmp_path, f"agentrun-test-node-{secrets.token_hex(3)}")
    yield rt
    if rt.proc is not None and rt.proc.poll() is None:
        rt.signal(signal.SIGTERM)
    with contextlib.suppress(kubernetes.client.ApiException):
        kubernetes.client.CoreV1Api(kube).delete_node(rt.node)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_restarted_runtime_kills_orphans_and_reports_container_status_unknown(
    kube: kubernetes.client.ApiClient, namespace: str, private_runtime: PrivateRuntime
) -> None:
    core = kubernetes.client.CoreV1Api(kube)
    private_runtime.start()
    wait_for(lambda: _node_ready(core, private_runtime.node), WAIT, "node registered")
    body = {
        "metadata": {"name": "survivor"},
        "spec": {
            "nodeName": private_runtime.node,
            "restartPolicy": "Always",
            "containers": [{"name": "main", "image": "python", "command": ["python", "-c", TICKER]}],
        },
    }
    uid = core.create_namespaced_pod(namespace, body).metadata.uid

    def running() -> Any:
        pod = core.read_namespaced_pod("survivor", namespace)
        cs = pod.status.container_statuses
        return cs and cs[0].state.running and pod

    wait_for(running, WAIT, "running")
    first = private_runtime.container_pid(uid)

    private_runtime.signal(signal.SIGKILL)  # the runtime dies; its container process lives on
    assert alive(first)
    private_runtime.start()
    wait_for(lambda: not alive(first), 60, "orphan killed")

    def restarted() -> Any:
        pod = running()
        return pod and pod.status.container_statuses[0].restart_count == 1 and pod

    cs = wait_for(restarted, WAIT, "restarted after recovery").status.container_statuses[0]
    lost = cs.last_state.terminated
    assert (lost.reason, lost.exit_code) == ("ContainerStatusUnknown", 137)
    second = private_runtime.container_pid(uid)
    assert second != first and alive(second)

    # SIGTERM to the runtime kills the pods' processes and writes nothing (the node just goes away)
    private_runtime.signal(signal.SIGTERM)
    assert private_runtime.proc is not None and private_runtime.proc.returncode == 0
    assert not alive(second)
    after = core.read_namespaced_pod("survivor", namespace).status
    assert after.phase == "Running" and after.container_statuses[0].state.running is not None
    assert os.path.exists(private_runtime.state_dir / "pods" / namespace / "survivor" / "main.log.0")


def _node_ready(core: kubernetes.client.CoreV1Api, name: str) -> bool:
    try:
        node = core.read_node(name)
    except kubernetes.client.ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
