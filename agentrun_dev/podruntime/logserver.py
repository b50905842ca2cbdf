"""The pod runtime's kubelet log endpoint: ``GET /containerLogs/{namespace}/{pod}/{container}``.

Rule: ``pods/log`` works on the dev cluster as on a real one — the client asks the API server (RBAC on
``pods/log`` decides), and the API server fetches the log from the node's kubelet endpoint
(``status.daemonEndpoints.kubeletEndpoint.Port`` at the node's InternalIP). This endpoint serves what the
runtime's container processes wrote (``pods/<ns>/<pod>/<container>.log``; ``previous=true`` the run before
the last restart) and accepts only the API server's kubelet client certificate from the dev CA: it is TLS on
loopback, and nobody else can read a Pod's log through it. ``follow=true`` streams until the Pod's worker
finished (its containers exited) and the file is drained; ``tailLines`` and ``limitBytes`` as kubelet.
"""

from __future__ import annotations

import http.server
import logging
import re
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrun_dev import pki
from agentrun_dev.podruntime import processes

log = logging.getLogger(__name__)

_PATH = re.compile(r"^/containerLogs/([a-z0-9-.]+)/([a-z0-9-.]+)/([a-z0-9-.]+)$")
FOLLOW_POLL_S = 0.2

# (namespace, pod) -> is that Pod still running on this node (its containers may still write)?
Running = Callable[[str, str], bool]


def tail(data: bytes, lines: int) -> bytes:
    """The last ``lines`` lines of ``data`` (kubelet's tailLines). Pure."""
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


def log_file(pods_dir: Path, namespace: str, pod: str, container: str, previous: bool) -> Path | None:
    """The log a request names; ``previous``: the run before the newest (``<c>.log.<n>``, highest n)."""
    pod_dir = pods_dir / namespace / pod
    current = processes.log_path(pod_dir, container)
    if not previous:
        return current if current.exists() else None
    older = sorted(pod_dir.glob(f"{container}.log.*"), key=lambda p: int(p.suffix[1:] or 0))
    return older[-1] if older else None


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        log.debug("log endpoint: " + format, *args)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        match = _PATH.match(url.path)
        if match is None:
            self.send_error(404, "only /containerLogs/{namespace}/{pod}/{container} is served")
            return
        namespace, pod, container = match.groups()
        query = dict(urllib.parse.parse_qsl(url.query))
        path = log_file(self.server.pods_dir, namespace, pod, container, query.get("previous") == "true")
        if path is None:
            self.send_error(404, f'container "{container}" in pod "{pod}" has no log on this node')
            return
        data = path.read_bytes()
        if "tailLines" in query:
            data = tail(data, int(query["tailLines"]))
        limit = int(query["limitBytes"]) if "limitBytes" in query else None
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        sent = self._send(data, limit, 0)
        offset = path.stat().st_size if "tailLines" in query else len(data)
        if query.get("follow") != "true":
            return
        # Follow: what the container appends, until its Pod stopped running and the file is drained.
        while limit is None or sent < limit:
            with path.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
            offset += len(chunk)
            if chunk:
                sent = self._send(chunk, limit, sent)
                continue
            if not self.server.running(namespace, pod):
                return
            time.sleep(FOLLOW_POLL_S)

    def _send(self, data: bytes, limit: int | None, sent: int) -> int:
        if limit is not None:
            data = data[: max(limit - sent, 0)]
        self.wfile.write(data)
        self.wfile.flush()
        return sent + len(data)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, pods_dir: Path, running: Running) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.pods_dir, self.running = pods_dir, running


def _tls(pki_dir: Path, node_name: str) -> ssl.SSLContext:
    serving = pki.kubelet_serving(pki_dir, node_name)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki_dir / "ca.crt"))
    ctx.load_cert_chain(str(serving.cert), str(serving.key))
    ctx.verify_mode = ssl.CERT_REQUIRED  # a client certificate from the dev CA ...
    return ctx


def _is_apiserver(cert: Any) -> bool:
    """... and only the API server's (CN kube-apiserver-kubelet-client)."""
    subject = (cert or {}).get("subject", ())
    return any(
        key == "commonName" and value == pki.KUBELET_CLIENT_CN for rdn in subject for key, value in rdn
    )


class LogServer:
    """Serves container logs on 127.0.0.1:<port> (port chosen by the OS) until stopped."""

    def __init__(self, pods_dir: Path, pki_dir: Path, node_name: str, running: Running) -> None:
        self.http = _Server(pods_dir, running)
        tls = _tls(pki_dir, node_name)
        plain_get_request = self.http.get_request

        def get_request() -> tuple[object, object]:
            sock, addr = plain_get_request()
            conn = tls.wrap_socket(sock, server_side=True)
            if not _is_apiserver(conn.getpeercert()):
                conn.close()
                raise OSError("log endpoint: client is not the API server")
            return conn, addr

        self.http.get_request = get_request  # type: ignore[method-assign,assignment]
        self.port: int = self.http.server_address[1]
        self.thread = threading.Thread(target=self.http.serve_forever, name="log-endpoint", daemon=True)

    def start(self) -> None:
        self.thread.start()
        log.info("kubelet log endpoint on https://127.0.0.1:%d", self.port)

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()
