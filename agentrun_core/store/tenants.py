"""Tenants: the Postgres worker role of each namespace, whose row-level security reaches only its runs.

Rule: the operator's calls only (``agent_operator.tenants``; provisioning needs CREATEROLE). A role is dropped
only when no run of its namespace is left; one still owning objects elsewhere is disabled, never dropped.
"""

from __future__ import annotations

from agentrun_core.store import db


def provision_tenant(conn: db.Conn, namespace: str, password: str) -> str:
    """Create (or reset the password of) the worker role of ``namespace``; its name. Needs CREATEROLE."""
    row = db.fetch_one(conn, "provision_tenant", {"namespace": namespace, "password": password})
    assert row is not None
    return str(row["role_name"])


def tenant_role(conn: db.Conn, namespace: str) -> str | None:
    """The worker role provisioned for ``namespace`` in this database, if any."""
    row = db.fetch_one(conn, "get_tenant", {"namespace": namespace})
    return str(row["role_name"]) if row else None


def list_idle_tenants(conn: db.Conn) -> list[str]:
    """Namespaces that have a worker role here and no run left."""
    return [str(r["namespace"]) for r in db.fetch_all(conn, "list_idle_tenants", {})]


def drop_tenant(conn: db.Conn, namespace: str) -> bool:
    """Drop the worker role of ``namespace`` (whose Kubernetes namespace is gone); False when a run of it is
    left, none was provisioned, or the role still has objects elsewhere (then it is disabled, not dropped)."""
    row = db.fetch_one(conn, "drop_tenant", {"namespace": namespace})
    return bool(row and row["dropped"])
