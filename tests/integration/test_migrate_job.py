"""The migrate Job of deploy/migrate, as `kubectl kustomize deploy/migrate` renders it, run by the dev
cluster's Job controller and local pod runtime against a fresh database: it completes, its log says what it
applied, and the schema is at the newest migration. (The local pod runtime runs the container's command,
`agentrun migrate`, from the checkout: the image is recorded, not pulled.)"""

from __future__ import annotations

from pathlib import Path

import kubernetes
import psycopg
import yaml

from agentrun_core import store
from tests.support.deploy import kubectl
from tests.support.waiting import wait_for


def test_the_migrate_job_migrates_a_fresh_database(
    kube: kubernetes.client.ApiClient, admin_kubeconfig: Path, namespace: str, empty_dsn: str
) -> None:
    rendered = kubectl(admin_kubeconfig, "kustomize", str(Path(__file__).parents[2] / "deploy" / "migrate"))
    [job] = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    assert job["kind"] == "Job" and job["metadata"]["namespace"] == "agentrun-system"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["agentrun", "migrate"]
    job["metadata"]["namespace"] = namespace
    core = kubernetes.client.CoreV1Api(kube)
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "agentrun-db"}, "stringData": {"dsn": empty_dsn}}
    )
    batch = kubernetes.client.BatchV1Api(kube)
    batch.create_namespaced_job(namespace, job)

    def complete() -> bool:
        status = batch.read_namespaced_job("agentrun-migrate", namespace).status
        conditions = {c.type: c.status for c in status.conditions or ()}
        assert conditions.get("Failed") != "True", status
        return conditions.get("Complete") == "True"

    wait_for(complete, 240, "the migrate Job to complete", interval=1.0)
    [pod] = core.list_namespaced_pod(namespace, label_selector="job-name=agentrun-migrate").items
    log = core.read_namespaced_pod_log(pod.metadata.name, namespace)
    newest = store.schema.load_migrations()[-1]
    assert "applied 0001 initial" in log and f"applied {newest.name[:4]} " in log, log
    with psycopg.connect(empty_dsn) as conn:
        assert store.schema_version(conn) == newest.version
        assert store.schema_compat_level(conn) == 1
