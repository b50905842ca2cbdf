"""What the CA mount gives a worker: libpq (psycopg) verifies a Postgres server's TLS certificate with
``sslmode=verify-full`` from ``PGSSLROOTCERT`` alone — the variable the operator sets next to the mounted CA
(AGENTRUN_WORKER_CA_SECRET; deploy/helm ``database.caSecret``) — and refuses a server its CA did not sign.

The dev cluster's Postgres (embedded binaries, built without SSL) sits behind a TLS front that speaks
Postgres's own negotiation (the client's SSLRequest, ``S``, then the TLS handshake; after it, bytes pass
through to the server unchanged), with a certificate for 127.0.0.1 from the dev CA (agentrun_dev.pki). The
client is a separate process, as in a Pod, with only the DSN and PGSSLROOTCERT in its environment, and runs
a query through the tunnel."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import struct
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrun_dev import pki
from agentrun_dev import settings as settings_mod

pytestmark = pytest.mark.cluster

SSL_REQUEST = struct.pack("!ii", 8, 80877103)
PROBE = (
    "import os, psycopg\n"
    "with psycopg.connect(os.environ['DSN']) as c:\n"
    "    print(c.pgconn.ssl_in_use, c.execute('SELECT 41 + 1').fetchone()[0])\n"
)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _serve(listener: socket.socket, ctx: ssl.SSLContext, upstream: tuple[str, int]) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return  # closed: the test is over
        try:
            if conn.recv(8, socket.MSG_WAITALL) != SSL_REQUEST:
                conn.close()
                continue
            conn.sendall(b"S")
            tls = ctx.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            conn.close()  # e.g. the client refused our certificate
            continue
        up = socket.create_connection(upstream)
        threading.Thread(target=_pipe, args=(tls, up), daemon=True).start()
        threading.Thread(target=_pipe, args=(up, tls), daemon=True).start()


@pytest.fixture
def tls_postgres(tmp_path: Path, pg_dsn: str) -> Iterator[tuple[str, Path]]:
    """(DSN through the TLS front with sslmode=verify-full, the dev CA's certificate)."""
    ca = pki._ensure_ca(settings_mod.from_env().pki_dir)
    cert, key = pki._issue_pem(ca, "127.0.0.1", [], server=True, client=False, ips=["127.0.0.1"])
    (tmp_path / "server.crt").write_bytes(cert)
    (tmp_path / "server.key").write_bytes(key)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    target = urllib.parse.urlsplit(pg_dsn)
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=_serve, args=(listener, ctx, (target.hostname, target.port)), daemon=True).start()
    front = target._replace(netloc=f"{target.username}@127.0.0.1:{listener.getsockname()[1]}")
    query = "&".join(filter(None, [target.query, "sslmode=verify-full"]))
    try:
        yield urllib.parse.urlunsplit(front._replace(query=query)), ca.cert
    finally:
        listener.close()


def _connect(dsn: str, root_cert: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "DSN": dsn, "PGSSLROOTCERT": str(root_cert), "HOME": "/nonexistent"}
    return subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_verify_full_with_pgsslrootcert(tls_postgres: tuple[str, Path], tmp_path: Path) -> None:
    dsn, ca_cert = tls_postgres
    ok = _connect(dsn, ca_cert)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["True", "42"], ok.stdout
    other = pki._ensure_ca(tmp_path / "other-ca")  # a CA that did not sign the server's certificate
    refused = _connect(dsn, other.cert)
    assert refused.returncode != 0
    assert "certificate verify failed" in refused.stderr, refused.stderr
