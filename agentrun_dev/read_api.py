"""The read API (``v1alpha1.read.agentrun.dev``, served by the operator) registered on the dev cluster.

The API server reaches an aggregated API through a Service. The dev operator is a local process on loopback,
and the dev cluster has no Service network (no kube-proxy); what works here is a Service of type
``ExternalName`` naming ``localhost``: the aggregator resolves it to ``https://localhost:<APIService port>``
(``--enable-aggregator-routing`` is off, so it never looks for endpoints, which would refuse 127.0.0.1) and
dials that through its ``cluster`` egress, the dev cluster's CONNECT proxy (``agentrun_dev.egress``), which
dials loopback. TLS is verified against the APIService's ``caBundle`` (the dev CA) with the server name
``agentrun-read.agentrun-system.svc``, which ``serving_pair`` puts in the operator's certificate.

    kubectl get apiservice v1alpha1.read.agentrun.dev     # AVAILABLE True once the operator answers
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from agentrun_dev import pki
from agentrun_dev import settings as settings_mod

NAMESPACE = "agentrun-system"
SERVICE = "agentrun-read"
GROUP, VERSION = "read.agentrun.dev", "v1alpha1"
APISERVICE = f"{VERSION}.{GROUP}"
SERVER_NAME = f"{SERVICE}.{NAMESPACE}.svc"  # what the aggregator checks the serving certificate for


def serving_pair(s: settings_mod.Settings, directory: Path) -> tuple[Path, Path]:
    """(cert, key) files of a serving certificate for the read API, from the dev CA, in ``directory``."""
    cert_pem, key_pem = pki.issue_server(s, SERVICE, [SERVER_NAME, "localhost"])
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "tls.crt", directory / "tls.key"
    key.touch(mode=0o600)
    key.write_bytes(key_pem)
    cert.write_bytes(cert_pem)
    return cert, key


def client_pair_of(kubeconfig: Path, directory: Path) -> tuple[Path, Path]:
    """The client certificate and key of a dev kubeconfig, as files (to talk TLS to a server directly)."""
    user = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]
    cert, key = directory / f"{kubeconfig.stem}.crt", directory / f"{kubeconfig.stem}.key"
    key.touch(mode=0o600)
    key.write_bytes(base64.b64decode(user["client-key-data"]))
    cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
    return cert, key


def manifests(s: settings_mod.Settings, port: int) -> list[dict[str, Any]]:
    """The Service and APIService that send the read API's requests to ``localhost:port``. Pure but for
    reading the dev CA."""
    ca = base64.b64encode((s.pki_dir / "ca.crt").read_bytes()).decode()
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "localhost"},
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": {
                "group": GROUP,
                "version": VERSION,
                "groupPriorityMinimum": 1000,
                "versionPriority": 15,
                "service": {"name": SERVICE, "namespace": NAMESPACE, "port": port},
                "caBundle": ca,
            },
        },
    ]


def _kubectl(s: settings_mod.Settings, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(s.kubeconfig), *args],
        input=stdin, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def register(s: settings_mod.Settings, port: int) -> None:
    """Point the APIService at an operator's read API on ``localhost:port`` (created, or changed)."""
    docs = "".join("---\n" + yaml.safe_dump(m, sort_keys=False) for m in manifests(s, port))
    _kubectl(s, "apply", "-f", "-", stdin=docs)


def unregister(s: settings_mod.Settings) -> None:
    """Remove the APIService (its Service stays: harmless alone)."""
    _kubectl(s, "delete", "apiservice", APISERVICE, "--ignore-not-found", "--wait=false")


def wait_available(s: settings_mod.Settings, port: int, timeout: float) -> None:
    """Until the APIService points at ``port`` and its Available condition is True; TimeoutError with the
    condition's message else."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        obj = json.loads(_kubectl(s, "get", "apiservice", APISERVICE, "-o", "json"))
        if obj["spec"]["service"].get("port") == port:
            for c in (obj.get("status") or {}).get("conditions") or []:
                if c.get("type") == "Available":
                    last = f"{c.get('status')} {c.get('reason')}: {c.get('message')}"
                    if c.get("status") == "True":
                        return
        time.sleep(0.5)
    raise TimeoutError(f"APIService {APISERVICE} not available after {timeout}s: {last}")
