"""Tenants: the Postgres worker role of each namespace, whose row-level security reaches only its runs.

Rule: the operator's calls only (``agent_operator.act.tenants``; provisioning needs CREATEROLE). A role is
dropped
only when no run of its namespace is left; one still owning objects elsewhere is disabled, never dropped.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets

from agentrun_core.store import db

# SCRAM iterations for a role whose password is 256 random bits (``provision_random_tenant``'s).
# The count slows down guessing a weak password from a stolen verifier or an overheard login; 256 random
# bits cannot be guessed at any count, while every login pays the count in CPU on the connecting side (libpq
# derives the salted password): Postgres's default, 4096, cost 1.7 ms per worker connection here (a login
# 3.5 ms vs 1.8 ms at 64, 30 alternating logins), more where a worker's CPU is limited.
RANDOM_SECRET_ITERATIONS = 64


def scram_verifier(password: str, *, iterations: int, salt: bytes | None = None) -> str:
    """The SCRAM-SHA-256 verifier Postgres stores for ``password`` (RFC 5802 / 7677; Postgres's format,
    which ``CREATE ROLE ... PASSWORD`` stores as given). Pure but for the random salt."""
    salt = os.urandom(16) if salt is None else salt
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    stored_key = hashlib.sha256(hmac.new(salted, b"Client Key", "sha256").digest()).digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def provision_tenant(conn: db.Conn, namespace: str, password: str) -> str:
    """Create (or reset the password of) the worker role of ``namespace``; its name. Needs CREATEROLE.
    ``password`` may be a SCRAM verifier (stored as given), else Postgres hashes it with its own count."""
    row = db.fetch_one(conn, "provision_tenant", {"namespace": namespace, "password": password})
    assert row is not None
    return str(row["role_name"])


def provision_random_tenant(conn: db.Conn, namespace: str) -> tuple[str, str]:
    """``provision_tenant`` with a new password of 256 random bits, stored as its verifier of
    ``RANDOM_SECRET_ITERATIONS`` (only such a password may have so few); the role's name and the password."""
    password = secrets.token_urlsafe(32)
    verifier = scram_verifier(password, iterations=RANDOM_SECRET_ITERATIONS)
    return provision_tenant(conn, namespace, verifier), password


def tenant_role(conn: db.Conn, namespace: str) -> str | None:
    """The worker role provisioned for ``namespace`` in this database, if any and it still exists."""
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


def end_blocking_tenant_sessions(conn: db.Conn, *, min_wait_seconds: float) -> list[dict[str, object]]:
    """End every worker-role session that has kept another session waiting for a lock for at least
    ``min_wait_seconds``; one row per session found (pid, role_name, namespace, blocked_seconds, waiting,
    ended). Needs a role that may signal the tenant's backends (superuser or ``pg_signal_backend``); a session
    that could not be ended comes back with ``ended`` false."""
    return db.fetch_all(conn, "end_blocking_tenant_sessions", {"min_wait_seconds": min_wait_seconds})
