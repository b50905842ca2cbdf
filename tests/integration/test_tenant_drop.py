"""Worker roles of gone namespaces are dropped (migration 0014), against the dev cluster and its Postgres:
a namespace that exists keeps its role; one deleted from Kubernetes keeps it while a run of it is left in
Postgres; once retention purged that run, the operator's sweep drops the role (it can log in no more) and
its agentrun_tenants row, and a namespace recreated under that name is provisioned afresh. And a role gone
from Postgres while its row stays (a database restored into another cluster: roles are not in its dump; a
role dropped by hand) is provisioned again before the namespace's next Pod, its Secret renewed."""

from __future__ import annotations

import base64
import os
import secrets
from typing import Any

import kubernetes
import psycopg
import pytest

from agent_operator import kube, settings
from agent_operator.act import tenants
from agent_operator.decide import pods
from agentrun_core import store
from tests.support.kube import gone
from tests.support.waiting import wait_for


@pytest.fixture
def kube_api(kube: kubernetes.client.ApiClient) -> kubernetes.client.ApiClient:
    return kube  # (the fixture's name is the operator's module's)



def _role_exists(conn: psycopg.Connection[Any], role: str) -> bool:
    return conn.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", (role,)).fetchone() == (1,)


def test_the_role_of_a_gone_namespace_is_dropped_after_its_runs_are_purged(
    kube_api: kubernetes.client.ApiClient, namespace: str, pg_dsn: str
) -> None:
    api = kube_api
    core = kubernetes.client.CoreV1Api(api)
    gone_ns = f"gone-{secrets.token_hex(4)}"
    labels = {"agentrun.dev/test": "true", "agentrun.dev/test-session": str(os.getpid())}
    core.create_namespace({"metadata": {"name": gone_ns, "labels": labels}})
    password = secrets.token_urlsafe(16)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        kept = store.provision_tenant(conn, namespace, secrets.token_urlsafe(16))
        role = store.provision_tenant(conn, gone_ns, password)
        store.admit_run(conn, run_id=f"r-{gone_ns}", namespace=gone_ns, name="r", graph="p.m:g", input={},
                        spec_hash="h")
        cfg = settings.from_env({"AGENTRUN_DSN": pg_dsn})
        sweeper = tenants.Tenants(cfg, api, conn)
        assert cfg.worker.dsn_secret == ""  # the operator manages the roles
        core.delete_namespace(gone_ns)
        wait_for(lambda: gone(lambda: core.read_namespace(gone_ns)), 90, f"namespace {gone_ns} gone")
        assert not kube.namespace_exists(api, gone_ns) and kube.namespace_exists(api, namespace)

        assert sweeper.drop_gone() == []  # a run of it is left: nothing dropped yet
        assert _role_exists(conn, role)

        store.mark_for_purge(conn, f"r-{gone_ns}", after_seconds=0, reason="ttl")
        assert store.purge_due(conn) == [f"r-{gone_ns}"]
        assert sweeper.drop_gone() == [gone_ns]
        assert not _role_exists(conn, role) and _role_exists(conn, kept)
        assert store.tenant_role(conn, gone_ns) is None and store.tenant_role(conn, namespace) == kept
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(tenants.worker_dsn(pg_dsn, role, password), connect_timeout=5).close()
        assert sweeper.drop_gone() == []  # idempotent

        # The namespace comes back: provisioning makes a new role of the same name, which logs in.
        again = store.provision_tenant(conn, gone_ns, password)
        assert again == role
        psycopg.connect(tenants.worker_dsn(pg_dsn, role, password), connect_timeout=5).close()
        assert store.drop_tenant(conn, gone_ns)  # cleanup (the store does not ask Kubernetes)


def _secret_dsn(core: kubernetes.client.CoreV1Api, namespace: str) -> str:
    secret = core.read_namespaced_secret(pods.TENANT_SECRET, namespace)
    return base64.b64decode(secret.data[pods.TENANT_SECRET_KEY]).decode()


def test_a_role_gone_from_postgres_is_provisioned_again_before_the_next_pod(
    kube_api: kubernetes.client.ApiClient, namespace: str, pg_dsn: str
) -> None:
    core = kubernetes.client.CoreV1Api(kube_api)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        provisioner = tenants.Tenants(settings.from_env({"AGENTRUN_DSN": pg_dsn}), kube_api, conn)
        provisioner.ensure(namespace)  # before the namespace's first Pod
        role = store.tenant_role(conn, namespace)
        assert role is not None
        first = _secret_dsn(core, namespace)
        psycopg.connect(first, connect_timeout=5).close()

        conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))
        assert store.tenant_role(conn, namespace) is None  # its row is still there: the role is not
        with pytest.raises(psycopg.OperationalError, match="does not exist"):
            psycopg.connect(first, connect_timeout=5).close()

        provisioner.ensure(namespace)  # the next Pod, same operator process
        assert store.tenant_role(conn, namespace) == role
        renewed = _secret_dsn(core, namespace)
        assert renewed != first  # a new password
        psycopg.connect(renewed, connect_timeout=5).close()

