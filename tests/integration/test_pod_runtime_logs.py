"""The local pod runtime's kubelet log endpoint: only the API server's kubelet client certificate reads a
log there; anyone else goes through ``pods/log`` (RBAC). ``kubectl logs`` itself is exercised by
tests/integration/test_cli_verbs.py (``agentrun logs -f`` through the API server)."""

from __future__ import annotations

import http.client
import ssl
from pathlib import Path

import kubernetes
import pytest

from agentrun_dev import pki
from agentrun_dev import settings as dev_settings
from agentrun_dev.podruntime import logserver


def _port(kube: kubernetes.client.ApiClient) -> int:
    (node,) = [
        n
        for n in kubernetes.client.CoreV1Api(kube).list_node().items
        if (n.metadata.labels or {}).get("agentrun.dev/local-pod-runtime") == "true"
    ]
    port = int(node.status.daemon_endpoints.kubelet_endpoint.port)
    assert port > 0
    return port


def _get(port: int, ctx: ssl.SSLContext, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _client(d: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    ctx.check_hostname = False
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def test_only_the_api_server_reads_logs_at_the_node(
    kube: kubernetes.client.ApiClient, dev_settings_: dev_settings.Settings, tmp_path: Path
) -> None:
    port, d = _port(kube), dev_settings_.pki_dir
    apiserver = pki.ensure(dev_settings_).kubelet_client
    assert apiserver is not None
    status, body = _get(port, _client(d, apiserver.cert, apiserver.key), "/containerLogs/x/y/worker")
    assert status == 404 and b"has no log on this node" in body  # authenticated: served (no such Pod)
    cert, key = pki.issue_client(dev_settings_, "mallory", ["system:masters"])
    (tmp_path / "m.crt").write_bytes(cert)
    (tmp_path / "m.key").write_bytes(key)
    for ctx in (_client(d), _client(d, tmp_path / "m.crt", tmp_path / "m.key")):
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException, OSError)):
            _get(port, ctx, "/containerLogs/x/y/worker")


def test_tail_and_previous(tmp_path: Path) -> None:
    assert logserver.tail(b"a\nb\nc\n", 2) == b"b\nc\n" and logserver.tail(b"a\n", 0) == b""
    pod = tmp_path / "ns" / "p"
    pod.mkdir(parents=True)
    (pod / "worker.log").write_text("now\n")
    (pod / "worker.log.0").write_text("first\n")
    (pod / "worker.log.1").write_text("second\n")
    assert logserver.log_file(tmp_path, "ns", "p", "worker", False) == pod / "worker.log"
    assert logserver.log_file(tmp_path, "ns", "p", "worker", True) == pod / "worker.log.1"
    assert logserver.log_file(tmp_path, "ns", "p", "other", False) is None
