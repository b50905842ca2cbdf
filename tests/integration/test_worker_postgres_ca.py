"""AGENTRUN_WORKER_CA_SECRET on the real API server: the worker Pod the operator creates carries the external
Postgres's CA (a Secret volume of the run's namespace, mounted read-only) and PGSSLROOTCERT pointing at it,
and Pod Security "restricted" admits it; without the setting, the Pod has neither."""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from tests.support import pod_security
from tests.support.kube import create_run, pods
from tests.support.operator_proc import OperatorHandle
from tests.support.waiting import wait_for

pytestmark = pytest.mark.cluster

RESTRICTED = pod_security.tenant_labels()


def _worker_pod(kube: kubernetes.client.ApiClient, ns: str, run: str, operator: OperatorHandle) -> Any:
    create_run(kube, ns, run, {"graph": "pkg.mod:graph", "worker": {"command": ["sleep", "600"]}})
    found = wait_for(lambda: pods(kube, ns, run), 90, f"the worker Pod of {run}", on_timeout=operator.logs)
    return found[0]


def test_worker_pod_mounts_the_postgres_ca(
    kube: kubernetes.client.ApiClient, namespace: str, worker_account: str, operator: OperatorHandle
) -> None:
    core = kubernetes.client.CoreV1Api(kube)
    core.patch_namespace(namespace, {"metadata": {"labels": RESTRICTED}})
    plain = _worker_pod(kube, namespace, "plain", operator)
    assert not plain.spec.volumes or all(v.name != "postgres-ca" for v in plain.spec.volumes)
    assert all(e.name != "PGSSLROOTCERT" for e in plain.spec.containers[0].env)

    operator.restart(hard=False, extra_env={"AGENTRUN_WORKER_CA_SECRET": "agentrun-postgres-ca/ca.crt"})
    pod = _worker_pod(kube, namespace, "tls", operator)
    [volume] = [v for v in pod.spec.volumes if v.name == "postgres-ca"]
    assert volume.secret.secret_name == "agentrun-postgres-ca"
    assert [(i.key, i.path) for i in volume.secret.items] == [("ca.crt", "ca.crt")]
    [mount] = [m for m in pod.spec.containers[0].volume_mounts if m.name == "postgres-ca"]
    assert (mount.mount_path, mount.read_only) == ("/etc/agentrun/postgres-ca", True)
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["PGSSLROOTCERT"] == "/etc/agentrun/postgres-ca/ca.crt"
