"""The read API: a run's trace, effect ledger and approvals, read with the reader's own Kubernetes identity.

An aggregated API (APIService ``v1alpha1.read.agentrun.dev``, deploy/base/read-api.yaml), served here over
HTTPS the way metrics-server serves ``pods.metrics.k8s.io``:

    GET /apis/read.agentrun.dev/v1alpha1/namespaces/NS/agentruntraces/NAME      # AgentRunTrace
    GET /apis/read.agentrun.dev/v1alpha1/namespaces/NS/agentruneffects/NAME     # AgentRunEffects
    GET /apis/read.agentrun.dev/v1alpha1/namespaces/NS/agentrunapprovals/NAME   # AgentRunApprovals

Rule: three checks, in order, each refusing with a Status the user reads.
* Authentication is the API server's: a request counts only when it comes with the client certificate of the
  API server's front proxy (verified against ``requestheader-client-ca-file`` and its CN against
  ``requestheader-allowed-names`` of the ``extension-apiserver-authentication`` ConfigMap); the user, groups
  and extra are then its ``X-Remote-*`` headers. Anybody else's certificate, or none, gets 401 and the
  headers are never read.
* Authorization twice: the API server checked RBAC on the read resource before proxying; here a
  SubjectAccessReview asks whether that user may ``get`` the AgentRun itself, so a run's trace is for exactly
  those who may read the run.
* The rows are read as the namespace's tenant role (its DSN Secret, the one its workers use), in read-only
  sessions: row-level security still decides, and nothing here can write.
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import re
import ssl
import threading
import urllib.parse
from collections.abc import Mapping
from typing import Any

from agent_operator import kube
from agent_operator import settings as settings_
from agent_operator.decide import pods
from agentrun_core import trace
from agentrun_core.kube import runs as core_runs
from agentrun_core.store import connect

log = logging.getLogger(__name__)

GROUP, VERSION = core_runs.READ_GROUP, core_runs.READ_VERSION
API_VERSION = core_runs.READ_API_VERSION
KINDS = core_runs.READ_RESOURCES  # plural -> kind
FIELD = {"agentruntraces": "trace", "agentruneffects": "effects", "agentrunapprovals": "approvals"}
PREFIX = f"/apis/{GROUP}/{VERSION}"
_VIEW = re.compile(PREFIX + r"/namespaces/([a-z0-9.-]{1,253})/([a-z]+)/([a-z0-9.-]{1,253})")


class Refused(Exception):
    """An answer other than the object: HTTP ``code`` with a Status of ``reason`` and ``message``."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """Pure: a ``v1`` Status, as the API server relays it to kubectl."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip


def discovery() -> dict[str, Any]:
    """Pure: the APIResourceList the aggregator and kubectl discover."""
    resources = [
        {"name": plural, "singularName": "", "namespaced": True, "kind": kind, "verbs": ["get"]}
        for plural, kind in KINDS.items()
    ]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION,
            "resources": resources}  # fmt: skip


class FrontProxy:
    """The API server's request-header settings (``kube.front_proxy_config``). Pure after construction."""

    def __init__(self, data: Mapping[str, str]) -> None:
        self.ca_pem = data.get("requestheader-client-ca-file", "")
        if not self.ca_pem:
            raise ValueError(
                "the API server publishes no requestheader-client-ca-file in kube-system/"
                "extension-apiserver-authentication: start it with --requestheader-client-ca-file (the "
                "aggregation layer is off)"
            )
        self.allowed_names = tuple(_list(data, "requestheader-allowed-names"))
        self.user_headers = tuple(_list(data, "requestheader-username-headers")) or ("X-Remote-User",)
        self.group_headers = tuple(_list(data, "requestheader-group-headers")) or ("X-Remote-Group",)
        self.uid_headers = tuple(_list(data, "requestheader-uid-headers"))
        self.extra_prefixes = tuple(p.lower() for p in _list(data, "requestheader-extra-headers-prefix"))

    def authenticate(self, peer_cn: str | None, headers: Any) -> dict[str, Any]:
        """The SubjectAccessReview identity (user, groups, extra, uid) of a request whose client certificate
        (verified against the CA by TLS) has common name ``peer_cn``; Refused(401) else."""
        if peer_cn is None:
            raise Refused(401, "Unauthorized", "the API server's front proxy client certificate is required")
        if self.allowed_names and peer_cn not in self.allowed_names:
            raise Refused(
                401, "Unauthorized",
                f"client certificate {peer_cn!r} is not the front proxy's ({', '.join(self.allowed_names)})",
            )  # fmt: skip
        user = next((str(headers[h]) for h in self.user_headers if headers.get(h)), "")
        if not user:
            raise Refused(401, "Unauthorized", "the front proxy named no user")
        groups = [str(g) for h in self.group_headers for g in headers.get_all(h, [])]
        extra: dict[str, list[str]] = {}
        for name, value in headers.items():
            low = name.lower()
            for prefix in self.extra_prefixes:
                if low.startswith(prefix) and len(low) > len(prefix):
                    extra.setdefault(urllib.parse.unquote(low[len(prefix) :]), []).append(str(value))
        found: dict[str, Any] = {"user": user, "groups": groups, "extra": extra}
        uid = next((str(headers[h]) for h in self.uid_headers if headers.get(h)), "")
        if uid:
            found["uid"] = uid
        return found


def _list(data: Mapping[str, str], key: str) -> list[str]:
    raw = data.get(key, "")
    if not raw:
        return []
    value = json.loads(raw)
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


class Reader:
    """Answers one authenticated request: authorize, read the run, read its rows as the tenant."""

    def __init__(self, cfg: settings_.Settings, api: kube.ApiClient) -> None:
        self.cfg, self.api = cfg, api
        # The Secret the namespace's workers get their DSN from (pods.py): the tenant's role.
        where = cfg.worker.dsn_secret or f"{pods.TENANT_SECRET}/{pods.TENANT_SECRET_KEY}"
        self.secret, _, self.key = where.partition("/")

    def answer(self, path: str, user: dict[str, Any]) -> dict[str, Any]:
        path = urllib.parse.urlsplit(path).path.rstrip("/")
        if path == PREFIX:
            return discovery()
        match = _VIEW.fullmatch(path)
        if match is None or match.group(2) not in KINDS:
            raise Refused(404, "NotFound", f"the server could not find the requested resource ({path})")
        namespace, plural, name = match.groups()
        allowed, why = kube.may_get_run(self.api, user, namespace, name)
        if not allowed:
            raise Refused(
                403, "Forbidden",
                f'{plural}.{GROUP} "{name}" is forbidden: user "{user["user"]}" may not get AgentRun '
                f'"{name}" in namespace "{namespace}" (a run\'s trace is for those who may read the run)'
                + (f": {why}" if why else ""),
            )  # fmt: skip
        if self.cfg.namespaces and namespace not in self.cfg.namespaces:
            raise Refused(404, "NotFound", f'namespace "{namespace}" is not watched by this operator')
        try:
            resource = kube.get_run(self.api, namespace, name)
        except kube.NotFound as exc:
            raise Refused(404, "NotFound", f'agentruns.agentrun.dev "{name}" not found') from exc
        data = trace.build(self._rows(resource, namespace))
        meta = resource["metadata"]
        return {
            "apiVersion": API_VERSION,
            "kind": KINDS[plural],
            "metadata": {"name": name, "namespace": namespace, "uid": meta.get("uid"),
                         "creationTimestamp": meta.get("creationTimestamp")},
            FIELD[plural]: data if plural == "agentruntraces" else data[FIELD[plural]],
        }  # fmt: skip

    def _rows(self, resource: dict[str, Any], namespace: str) -> trace.Inputs:
        try:
            dsn = kube.read_secret_key(self.api, namespace, self.secret, self.key)
        except kube.NotFound:
            dsn = None  # no worker ever ran here: the ledger holds nothing of this namespace
        if not dsn:
            return trace.Inputs(resource=resource, run=None, attempts=(), steps=(), effects=(), approvals=())
        try:
            return trace.gather(resource, dsn, read_only=True)
        except connect.Error as exc:
            log.warning("read API: cannot read namespace %s's ledger as its tenant role: %s", namespace, exc)
            raise Refused(503, "ServiceUnavailable", f"cannot read namespace {namespace}'s ledger") from exc


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    timeout = 30  # seconds a connection may stall (TLS handshake included: it happens on first read)
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        try:
            user = self.server.proxy.authenticate(_peer_cn(self.connection), self.headers)
            code, body = 200, self.server.reader.answer(self.path, user)
        except Refused as exc:
            code, body = exc.code, status(exc.code, exc.reason, exc.message)
        except kube.KubeError as exc:
            log.warning("read API: %s %s: %s", self.command, self.path, exc)
            message = f"the operator cannot ask the API server: {exc}"
            code, body = 503, status(503, "ServiceUnavailable", message)
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("read API: " + format, *args)


def _peer_cn(conn: Any) -> str | None:
    """The common name of the verified client certificate, or None without one."""
    cert: dict[str, Any] | None = conn.getpeercert() if isinstance(conn, ssl.SSLSocket) else None
    if not cert:
        return None
    names = [str(attr[1]) for rdn in cert.get("subject", ()) for attr in rdn if attr[0] == "commonName"]
    return names[0] if names else None


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    proxy: FrontProxy
    reader: Reader

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A failed handshake or a dropped connection: the client's problem, not a traceback on stderr.
        log.debug("read API: connection from %s failed", client_address, exc_info=True)


def tls_context(cfg: settings_.ReadApiSettings, proxy: FrontProxy) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cfg.cert, cfg.key)
    # Optional: the aggregator's availability checks and the proxied requests carry the front proxy's
    # certificate; one without is answered 401 (not dropped in the handshake: the client learns why).
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.load_verify_locations(cadata=proxy.ca_pem)
    return ctx


def start(cfg: settings_.Settings, api: kube.ApiClient) -> http.server.ThreadingHTTPServer:
    """Serve the read API in daemon threads; the server (``shutdown()`` stops it). Raises when the API
    server's front-proxy settings cannot be read or the certificate cannot be loaded."""
    files = {"AGENTRUN_READ_API_CERT": cfg.read_api.cert, "AGENTRUN_READ_API_KEY": cfg.read_api.key}
    for what, path in files.items():
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{what}: no file {path} (is the serving certificate's Secret mounted?)")
    try:
        proxy = FrontProxy(kube.front_proxy_config(api))
    except kube.KubeError as exc:
        raise kube.KubeError(
            f"cannot read the API server's front-proxy settings ({'/'.join(kube.FRONT_PROXY_CONFIG)}; the "
            f"operator needs the Role extension-apiserver-authentication-reader there): {exc}"
        ) from exc
    server = _Server((cfg.read_api.address, cfg.read_api.port), _Handler, bind_and_activate=True)
    # The handshake runs in the request's thread, on first read: a slow client never holds up accept().
    server.socket = tls_context(cfg.read_api, proxy).wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
    server.proxy, server.reader = proxy, Reader(cfg, api)
    threading.Thread(target=server.serve_forever, name="read-api", daemon=True).start()
    log.info("read API (%s) on https://%s:%d", API_VERSION, cfg.read_api.address, cfg.read_api.port)
    return server
