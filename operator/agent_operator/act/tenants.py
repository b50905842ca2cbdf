"""Per-namespace worker identities in Postgres: a role whose row-level security reaches only that
namespace's runs (migration 0005), and the Secret through which its DSN reaches the namespace's worker Pods.

Rule: a worker Pod never gets the operator's DSN. Either an admin provisions the namespace
(``SELECT agentrun_provision_tenant('team-a', 'PASSWORD')`` and a Secret named by
``AGENTRUN_WORKER_DSN_SECRET``), or — the default — the operator does it here before the namespace's first
Pod: a random password, the role (needs CREATEROLE), then the Secret ``agentrun-worker-db`` (key ``dsn``).
Done once per namespace and process, and again when the role has gone missing (checked before each Pod:
roles are global to the Postgres cluster and not in a database's dump, so a database restored into another
cluster, or a role dropped by hand, leaves the namespace's row without its role and every worker failing
to log in) or the Secret has (checked at the first Pod of the process).

When a namespace is gone from Kubernetes and retention has purged its last run, the leader drops its role
(``drop_gone``, migration 0014): a deleted namespace leaves no login behind. Roles an admin provisioned
(``AGENTRUN_WORKER_DSN_SECRET``) are the admin's and never dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from agent_operator import kube
from agent_operator import settings as settings_
from agent_operator.decide import pods
from agentrun_core import store
from agentrun_core.store import connect


def worker_dsn(base_dsn: str, role: str, password: str) -> str:
    """The base DSN (host, port, database, TLS options) with the tenant's user and password. Pure."""
    return connect.with_credentials(base_dsn, user=role, password=password)


def secret_body(namespace: str, dsn: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": pods.TENANT_SECRET,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "agentrun", "app.kubernetes.io/component": "worker-db"},
        },
        "stringData": {pods.TENANT_SECRET_KEY: dsn},
    }


def gone(namespaces: Iterable[str], exists: Callable[[str], bool]) -> list[str]:
    """The namespaces Kubernetes no longer has, in order (``exists`` raises when it cannot tell). Pure apart
    from ``exists``."""
    return [ns for ns in namespaces if not exists(ns)]


class TenantError(RuntimeError):
    """The namespace's worker role or Secret could not be provisioned (the message says what to do)."""


class Tenants:
    """Makes sure a namespace has its worker role and DSN Secret before a worker Pod is created there."""

    def __init__(self, settings: settings_.Settings, api: kube.ApiClient, db: store.Conn) -> None:
        self.settings = settings
        self.api = api
        self.db = db
        self._ready: set[str] = set()
        self._lock = threading.Lock()

    def ensure(self, namespace: str) -> None:
        if self.settings.worker.dsn_secret:
            return  # an admin-managed Secret
        # One indexed SELECT per Pod: the role is looked for each time (it can go missing under a running
        # operator), the Secret once per process (an API call).
        if namespace in self._ready and store.tenant_role(self.db, namespace) is not None:
            return
        with self._lock:
            role = store.tenant_role(self.db, namespace)
            if role is not None and namespace in self._ready:
                return
            if role is None or not kube.secret_exists(self.api, namespace, pods.TENANT_SECRET):
                try:
                    role, password = store.provision_random_tenant(self.db, namespace)
                except connect.InsufficientPrivilege as exc:
                    raise TenantError(
                        f"cannot create the Postgres role of namespace {namespace}: the operator's database "
                        f"role needs CREATEROLE ({exc.diag.message_primary}); or provision it yourself "
                        "(docs/operator.md, Tenant isolation) and set AGENTRUN_WORKER_DSN_SECRET"
                    ) from exc
                dsn = worker_dsn(self.settings.worker_dsn, role, password)
                kube.put_secret(self.api, namespace, secret_body(namespace, dsn))
            self._ready.add(namespace)

    def forget(self, namespace: str) -> None:
        """Check the namespace again next time (a Pod could not start: its Secret may be gone)."""
        with self._lock:
            self._ready.discard(namespace)

    def drop_gone(self) -> list[str]:
        """Drop the worker roles of namespaces that are gone and have no run left here; those namespaces."""
        if self.settings.worker.dsn_secret:
            return []  # the admin's roles
        idle = store.list_idle_tenants(self.db)
        dropped = [ns for ns in gone(idle, lambda ns: kube.namespace_exists(self.api, ns))
                   if store.drop_tenant(self.db, ns)]
        for ns in dropped:
            self.forget(ns)  # a namespace recreated under that name is provisioned afresh
        return dropped
