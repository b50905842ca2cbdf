"""Kubeconfigs for identities of the dev cluster: the admin, the controller-manager, any test user.

``kubeconfig_for("alice", ["devs"])`` mints a client certificate (CN=alice, O=devs) from the dev CA and writes
a self-contained kubeconfig (certificates embedded) — usable at once, no apiserver restart, so RBAC tests act
as real users. The admin is in group ``system:masters`` (bypasses RBAC, as in kubeadm's admin.conf).
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path
from typing import Any

import yaml

from agentrun_dev import pki, state
from agentrun_dev import settings as settings_mod

ADMIN_USER = "agentrun-admin"
ADMIN_GROUPS = ("system:masters",)
CLUSTER_NAME = "agentrun-dev"


def server_url(s: settings_mod.Settings) -> str:
    return f"https://127.0.0.1:{state.port(s, 'apiserver')}"


def kubeconfig_dict(
    server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str, namespace: str = "default"
) -> dict[str, Any]:
    """Pure: a one-context kubeconfig with embedded credentials."""

    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
            }
        ],
        "contexts": [
            {
                "name": f"{user}@{CLUSTER_NAME}",
                "context": {"cluster": CLUSTER_NAME, "user": user, "namespace": namespace},
            }
        ],
        "current-context": f"{user}@{CLUSTER_NAME}",
        "preferences": {},
    }


def safe_name(user: str, groups: list[str] | tuple[str, ...]) -> str:
    """Pure: a file name for an identity (``system:kube-scheduler`` → ``system-kube-scheduler``)."""
    raw = "_".join([user, *groups])
    return re.sub(r"[^A-Za-z0-9._-]+", "-", raw)[:200]


def write_kubeconfig(
    s: settings_mod.Settings, path: Path, user: str, groups: list[str] | tuple[str, ...]
) -> Path:
    cert_pem, key_pem = pki.issue_client(s, user, groups)
    doc = kubeconfig_dict(server_url(s), s.pki_dir.joinpath("ca.crt").read_bytes(), cert_pem, key_pem, user)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Unique temp name: concurrent test sessions may mint the same identity at once; the rename is atomic.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(yaml.safe_dump(doc, sort_keys=False))
    tmp.replace(path)
    return path


def kubeconfig_for(
    user: str, groups: list[str] | tuple[str, ...] = (), s: settings_mod.Settings | None = None
) -> Path:
    """Kubeconfig path for ``user`` in ``groups``, minted now (a fresh certificate each call)."""
    s = s or settings_mod.from_env()
    return write_kubeconfig(s, s.identities_dir / f"{safe_name(user, groups)}.kubeconfig", user, groups)


def ensure_admin(s: settings_mod.Settings) -> Path:
    """The admin kubeconfig at ``<state>/kubeconfig``; kept if present, so exported KUBECONFIGs stay valid."""
    if s.kubeconfig.exists():
        return s.kubeconfig
    return write_kubeconfig(s, s.kubeconfig, ADMIN_USER, ADMIN_GROUPS)
