"""The local pod runtime on the real dev cluster: Pods run as processes and report real status.

Each test makes its Pods in a fresh namespace; the runtime is the one ``agentrun dev up`` started.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from agentrun_dev import cluster
from agentrun_dev.podruntime import control
from tests.support.waiting import wait_for

NODE = "agentrun-dev-node"


def py(code: str) -> list[str]:
    return ["python", "-c", code]


def pod_body(name: str, command: list[str], restart: str = "Never", **container: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "main", "image": "python:3.11", "command": command, **container}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": spec,
    }


class Pods:
    def __init__(self, api: kubernetes.client.ApiClient, namespace: str, handle: cluster.Handle) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.ns = namespace
        self.pods_dir = handle.settings.pods_dir / namespace
        self.state_dir = handle.settings.state_dir

    def create(self, body: dict[str, Any]) -> str:
        self.core.create_namespaced_pod(self.ns, body)
        return str(body["metadata"]["name"])

    def get(self, name: str) -> Any:
        try:
            return self.core.read_namespaced_pod(name, self.ns)
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return None
            raise

    def phase(self, name: str, *phases: str, timeout: float = 15.0) -> Any:
        return wait_for(
            lambda: (p := self.get(name)) and p.status.phase in phases and p, timeout, f"{name} in {phases}"
        )

    def log(self, name: str, container: str = "main") -> str:
        path = self.pods_dir / name / f"{container}.log"
        return path.read_text() if path.exists() else ""

    def dir(self, name: str) -> Path:
        return self.pods_dir / name


@pytest.fixture
def pods(kube: kubernetes.client.ApiClient, namespace: str, dev_cluster: cluster.Handle) -> Pods:
    return Pods(kube, namespace, dev_cluster)


def main_status(pod: Any) -> Any:
    return pod.status.container_statuses[0]


def test_pod_runs_to_succeeded_with_status_and_log(pods: Pods) -> None:
    name = pods.create(
        pod_body("ok", py("import os; print('hello from', os.getcwd(), os.environ['HOSTNAME'])"))
    )
    pod = pods.phase(name, "Succeeded")
    cs = main_status(pod)
    assert pod.spec.node_name == NODE  # bound by the runtime: no scheduler runs
    assert pod.status.pod_ip == pod.status.host_ip == "127.0.0.1" and pod.status.start_time is not None
    assert cs.state.terminated.exit_code == 0 and cs.state.terminated.reason == "Completed"
    assert cs.state.terminated.started_at is not None and cs.state.terminated.finished_at is not None
    assert cs.restart_count == 0 and cs.image == "python:3.11"
    conds = {c.type: c.status for c in pod.status.conditions}
    assert conds["PodScheduled"] == "True" and conds["Initialized"] == "True" and conds["Ready"] == "False"
    assert pods.log(name) == f"hello from {pods.dir(name)} ok\n"


def test_failing_pod_fails_with_its_exit_code(pods: Pods) -> None:
    name = pods.create(pod_body("fail", py("import sys; print('bad'); sys.exit(3)")))
    term = main_status(pods.phase(name, "Failed")).state.terminated
    assert (term.exit_code, term.reason) == (3, "Error")
    killed = pods.create(pod_body("sig", py("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")))
    term = main_status(pods.phase(killed, "Failed")).state.terminated
    assert (term.exit_code, term.signal) == (143, 15)
    missing = pods.create(pod_body("noexe", ["no-such-binary-here"]))
    term = main_status(pods.phase(missing, "Failed")).state.terminated
    assert (term.exit_code, term.reason) == (128, "StartError")


def test_memory_hog_is_oomkilled(pods: Pods) -> None:
    hog = "import time\nx = []\nwhile True:\n    x.append(b'x' * 8_000_000)\n    time.sleep(0.01)\n"
    name = pods.create(pod_body("hog", py(hog), resources={"limits": {"memory": "96Mi"}}))
    started = time.monotonic()
    term = main_status(pods.phase(name, "Failed")).state.terminated
    assert (term.exit_code, term.reason) == (137, "OOMKilled")
    assert time.monotonic() - started < 10
    events = pods.core.list_namespaced_event(pods.ns, field_selector=f"involvedObject.name={name}").items
    assert "OOMKilling" in {e.reason for e in events}
    # a pod under its limit is left alone
    calm = pods.create(
        pod_body("calm", py("x = b'x' * 20_000_000"), resources={"limits": {"memory": "96Mi"}})
    )
    assert main_status(pods.phase(calm, "Succeeded")).state.terminated.exit_code == 0


SIGTERM_TRAP = """
import pathlib, signal, sys, time
def stop(*_):
    print('got SIGTERM', flush=True)
    pathlib.Path('sigterm').write_text(str(time.time()))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print('ready', flush=True)
while True:
    time.sleep(0.05)
"""


def test_evicted_pod_gets_sigterm_and_is_removed(pods: Pods) -> None:
    name = pods.create(pod_body("evictme", py(SIGTERM_TRAP), restart="Always"))
    wait_for(lambda: "ready" in pods.log(name), 15.0, "ready")
    assert main_status(pods.phase(name, "Running")).ready
    uid = pods.get(name).metadata.uid
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": pods.ns},
    }
    pods.core.create_namespaced_pod_eviction(name, pods.ns, eviction)
    started = time.monotonic()
    wait_for(lambda: pods.get(name) is None, 10, "pod removed")
    assert time.monotonic() - started < 4  # exited on SIGTERM, well inside the 5 s grace
    assert "got SIGTERM" in pods.log(name) and (pods.dir(name) / "sigterm").exists()
    assert not list((pods.state_dir / "podruntime" / "procs").glob(f"{uid}/*"))  # no process left behind


def test_deletion_escalates_to_sigkill_after_grace(pods: Pods) -> None:
    stubborn = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\n"
    stubborn += "while True: time.sleep(0.05)"
    name = pods.create(pod_body("stubborn", py(stubborn)))
    wait_for(lambda: "up" in pods.log(name), 15.0, "up")
    pods.core.delete_namespaced_pod(name, pods.ns, grace_period_seconds=1)
    started = time.monotonic()
    wait_for(lambda: pods.get(name) is None, 10, "pod removed")
    assert 0.9 <= time.monotonic() - started < 5


def test_on_failure_pod_restarts_with_rising_restart_count(pods: Pods) -> None:
    name = pods.create(pod_body("flaky", ["sh", "-c", "echo attempt; exit 1"], restart="OnFailure"))
    seen_backoff = False

    def restarted_twice() -> Any:
        nonlocal seen_backoff
        pod = pods.get(name)
        cs = pod.status.container_statuses and main_status(pod)
        if cs and cs.state.waiting and cs.state.waiting.reason == "CrashLoopBackOff":
            seen_backoff = True
        return cs and cs.restart_count >= 2 and pod

    pod = wait_for(restarted_twice, 15, "two restarts")
    cs = main_status(pod)
    assert pod.status.phase == "Running"  # OnFailure: restarting, not failed
    assert cs.last_state.terminated.exit_code == 1 and cs.last_state.terminated.reason == "Error"
    assert seen_backoff
    assert (pods.dir(name) / "main.log.0").read_text() == "attempt\n"  # earlier runs' logs are kept


ENV_DUMP = "import json, os; print(json.dumps(dict(os.environ)))"


def test_env_from_secret_config_map_and_downward_api(pods: Pods) -> None:
    env = [
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
        {"name": "OPTIONAL", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": True}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {
            "name": "MEM_MI",
            "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
        },
        {"name": "COMPOSED", "value": "$(POD_NAME)@$(NODE)"},
    ]
    body = pod_body(
        "envy",
        py(ENV_DUMP),
        env=env,
        resources={"limits": {"memory": "256Mi"}},
        envFrom=[{"configMapRef": {"name": "settings"}, "prefix": "CM_"}],
    )
    name = pods.create(body)
    # the Secret does not exist yet: kubelet's CreateContainerConfigError, retried
    wait_for(
        lambda: (
            (p := pods.get(name)).status.container_statuses
            and (w := main_status(p).state.waiting)
            and w.reason == "CreateContainerConfigError"
        ),
        15.0,
        "config error",
    )
    pods.core.create_namespaced_config_map(
        pods.ns, {"metadata": {"name": "settings"}, "data": {"mode": "fast"}}
    )
    pods.core.create_namespaced_secret(
        pods.ns, {"metadata": {"name": "creds"}, "stringData": {"password": "pw"}}
    )
    pod = pods.phase(name, "Succeeded")
    got = json.loads(pods.log(name))
    assert {
        k: got.get(k)
        for k in (
            "FROM_SECRET",
            "FROM_CM",
            "CM_mode",
            "POD_NAME",
            "POD_NS",
            "APP",
            "NODE",
            "POD_IP",
            "MEM_MI",
            "COMPOSED",
        )
    } == {
        "FROM_SECRET": "pw",
        "FROM_CM": "fast",
        "CM_mode": "fast",
        "POD_NAME": "envy",
        "POD_NS": pods.ns,
        "APP": "envy",
        "NODE": NODE,
        "POD_IP": "127.0.0.1",
        "MEM_MI": "256",
        "COMPOSED": f"envy@{NODE}",
    }
    assert got["POD_UID"] == pod.metadata.uid and "OPTIONAL" not in got
    assert got["PATH"].split(":")[0] == f"{sys.prefix}/bin"  # the project's virtualenv first
    assert "AGENTRUN_DEV_HOME" not in got  # the runtime's own environment is not inherited


WHOAMI = "kubectl auth whoami -o json; echo ---; kubectl get secrets 2>&1; kubectl get configmaps -o name"


def test_pod_token_acts_as_its_service_account(kube: kubernetes.client.ApiClient, pods: Pods) -> None:
    rbac = kubernetes.client.RbacAuthorizationV1Api(kube)
    pods.core.create_namespaced_service_account(pods.ns, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(
        pods.ns,
        {
            "metadata": {"name": "cm-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        pods.ns,
        {
            "metadata": {"name": "cm-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": pods.ns}],
        },
    )
    body = pod_body("whoami", ["sh", "-c", WHOAMI])
    body["spec"]["serviceAccountName"] = "reader"
    name = pods.create(body)
    pod = pods.phase(name, "Succeeded", "Failed")
    who, _, rest = pods.log(name).partition("---")
    user = json.loads(who)["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{pods.ns}:reader"
    assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [pod.metadata.uid]  # a bound token
    assert "Forbidden" in rest and 'cannot list resource "secrets"' in rest
    assert "configmap/kube-root-ca.crt" in rest  # what the Role allows works

    anon = pod_body("anon", ["sh", "-c", "kubectl get configmaps 2>&1; true"])
    anon["spec"].update(serviceAccountName="reader", automountServiceAccountToken=False)
    pods.phase(pods.create(anon), "Succeeded")
    assert "configmap/" not in pods.log("anon") and pods.log("anon").strip()


TICKER = (
    "import itertools, time\nfor i in itertools.count():\n    print(i, flush=True)\n    time.sleep(0.05)\n"
)


def _lines(pods: Pods, name: str) -> int:
    return pods.log(name).count("\n")


@pytest.fixture
def frozen_node(dev_cluster: cluster.Handle) -> Iterator[Path]:
    state_dir = dev_cluster.settings.state_dir
    yield state_dir
    with contextlib.suppress(Exception):
        control.thaw(state_dir)


def _proc_state(pods: Pods, uid: str) -> str:
    record = json.loads((pods.state_dir / "podruntime" / "procs" / uid / "main.json").read_text())
    stat = Path(f"/proc/{record['pid']}/stat").read_text()
    return stat.rpartition(")")[2].split()[0]


@pytest.mark.serial  # the whole node freezes: every other test's pods would stop with it
def test_node_freeze_stops_pods_and_reporting_thaw_resumes(pods: Pods, frozen_node: Path) -> None:
    name = pods.create(pod_body("ticker", py(TICKER), restart="Always"))
    uid = pods.phase(name, "Running").metadata.uid
    wait_for(lambda: _lines(pods, name) > 3, 15.0, "ticking")
    control.freeze(frozen_node)
    before = _lines(pods, name)
    time.sleep(1.0)
    assert _lines(pods, name) == before and _proc_state(pods, uid) == "T"  # SIGSTOPped
    control.thaw(frozen_node)
    wait_for(lambda: _lines(pods, name) > before + 3, 15.0, "resumed")
    assert _proc_state(pods, uid) != "T"

    control.freeze(frozen_node)
    pods.core.delete_namespaced_pod(name, pods.ns, grace_period_seconds=1)  # a lost node does not act on it
    time.sleep(2.0)
    stuck = pods.get(name)
    assert stuck is not None and stuck.metadata.deletion_timestamp is not None
    assert stuck.status.phase == "Running"  # no status written while frozen
    control.thaw(frozen_node)
    wait_for(lambda: pods.get(name) is None, 10, "deleted after thaw")


def test_freeze_pod_hangs_one_pod_still_reported_running(pods: Pods, dev_cluster: cluster.Handle) -> None:
    state = dev_cluster.settings.state_dir
    hung = pods.create(pod_body("hung", py(TICKER), restart="Always"))
    other = pods.create(pod_body("other", py(TICKER), restart="Always"))
    wait_for(lambda: _lines(pods, hung) > 3 and _lines(pods, other) > 3, 15.0, "ticking")
    try:
        control.freeze_pod(pods.ns, hung, state)
        a, b = _lines(pods, hung), _lines(pods, other)
        time.sleep(1.0)
        assert _lines(pods, hung) == a and _lines(pods, other) > b
        pod = pods.get(hung)
        assert pod.status.phase == "Running" and main_status(pod).ready
    finally:
        control.thaw_pod(pods.ns, hung, state)
    a = _lines(pods, hung)
    wait_for(lambda: _lines(pods, hung) > a + 3, 15.0, "resumed")


def test_node_is_registered_ready_with_a_fresh_lease(kube: kubernetes.client.ApiClient, pods: Pods) -> None:
    node = pods.core.read_node(NODE)
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
    assert node.status.capacity["pods"] == "110" and node.status.allocatable["cpu"] == "2"
    assert [a.address for a in node.status.addresses if a.type == "InternalIP"] == ["127.0.0.1"]
    lease = kubernetes.client.CoordinationV1Api(kube).read_namespaced_lease(NODE, "kube-node-lease")
    assert lease.spec.holder_identity == NODE
    age = time.time() - lease.spec.renew_time.timestamp()
    assert age < lease.spec.lease_duration_seconds, age


def test_init_containers_run_first_in_order(pods: Pods) -> None:
    body = pod_body("inits", ["sh", "-c", "cat order"])
    body["spec"]["initContainers"] = [
        {"name": "one", "image": "busybox", "command": ["sh", "-c", "echo one >> order"]},
        {"name": "two", "image": "busybox", "command": ["sh", "-c", "echo two >> order"]},
    ]
    pod = pods.phase(pods.create(body), "Succeeded")
    assert pods.log("inits") == "one\ntwo\n"
    assert [s.state.terminated.exit_code for s in pod.status.init_container_statuses] == [0, 0]


def test_foreign_ready_false_is_corrected(pods: Pods) -> None:
    """After a lost node, the node controller marks pods not ready; a live node writes its truth back."""
    name = pods.create(pod_body("steady", py(TICKER), restart="Always"))
    pod = pods.phase(name, "Running")
    wait_for(lambda: main_status(pods.get(name)).ready, 15.0, "ready")
    conditions = [{"type": "Ready", "status": "False", "reason": "NodeControllerMarked"}]
    patched = pods.core.patch_namespaced_pod_status(name, pods.ns, {"status": {"conditions": conditions}})
    assert {c.type: c.status for c in patched.status.conditions}["Ready"] == "False"

    def ready_again() -> bool:
        conds = {c.type: c.status for c in pods.get(name).status.conditions}
        return conds["Ready"] == "True"

    wait_for(ready_again, 8, "Ready=True rewritten")
    assert pods.get(name).metadata.uid == pod.metadata.uid
