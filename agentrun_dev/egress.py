"""The API server's way to the nodes: an HTTP CONNECT proxy on a unix socket (the dev cluster's konnectivity).

``kubectl logs``/``exec``/``port-forward`` make the API server dial a node's kubelet. Its ``cluster`` egress
(``--egress-selector-config-file``, written by ``agentrun_dev.components``) sends every such connection here.

Rule: only two kinds of destination are dialled, anything else is refused (403), so no connection the API
server makes to a "node" ever leaves the machine:
* loopback: the local pod runtime's log endpoint (``agentrun_dev.podruntime.logserver``), dialled from here;
* the real node's IP (``agentrun_dev.node``), which exists only inside the node's own network namespace (no
  veth, no route on the host): the socket is created inside that namespace — this thread ``setns``-es into
  it for the ``socket()`` call only, as ``agentrun_dev.node.forward`` does for its listeners — and a socket
  keeps the namespace it was made in, so it connects from there. The namespace is the node holder's, found
  through ``<state>/node/holder.pid`` (written by ``agentrun_dev.node.lifecycle``, checked against the
  holder's command line so a reused pid is never entered).

    python -m agentrun_dev.egress --socket PATH --state-dir DIR --node-ip 10.213.0.1
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from agentrun_dev.node import forward

HOLDER_MARK = b"agentrun-node-holder"
MAX_HEAD = 16 * 1024  # bytes of a CONNECT request head
TIMEOUT = 10.0  # seconds to read the request head, and to connect
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def parse_connect(head: bytes) -> tuple[str, int]:
    """Pure: ``CONNECT host:port HTTP/1.1`` (the first line of ``head``) -> (host, port); ValueError else."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split()
    if len(parts) != 3 or parts[0] != "CONNECT" or not parts[2].startswith("HTTP/1."):
        raise ValueError(f"not a CONNECT request: {line[:200]!r}")
    host, sep, port = parts[1].rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"CONNECT target is not host:port: {parts[1][:200]!r}")
    return host.strip("[]"), int(port)


def route(host: str, node_ip: str) -> str | None:
    """Pure: where a connection to ``host`` is made: "host" (loopback, from here), "node" (inside the real
    node's namespace), or None (refused: it would leave the machine)."""
    if host in LOOPBACK:
        return "host"
    if host == node_ip:
        return "node"
    return None


def node_netns(state_dir: Path) -> str | None:
    """``/proc/PID/ns/net`` of the running node holder, or None when no real node is up."""
    try:
        pid = int((state_dir / "node" / "holder.pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return f"/proc/{pid}/ns/net" if HOLDER_MARK in cmdline else None


def dial(host: str, port: int, state_dir: Path, node_ip: str) -> socket.socket:
    """A connected socket to ``host:port`` by ``route``; PermissionError when refused, OSError when down."""
    where = route(host, node_ip)
    if where is None:
        raise PermissionError(f"{host}:{port} is neither loopback nor the real node ({node_ip})")
    if where == "host":
        return socket.create_connection((host, port), timeout=TIMEOUT)
    netns = node_netns(state_dir)
    if netns is None:
        raise ConnectionRefusedError(f"no real node is up for {host}:{port}")
    with forward.in_netns(netns):  # the socket keeps the node's namespace and connects from there
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(TIMEOUT)
        sock.connect((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _read_head(conn: socket.socket) -> tuple[bytes, bytes]:
    conn.settimeout(TIMEOUT)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError("closed before the request head ended")
        data += chunk
        if len(data) > MAX_HEAD:
            raise ValueError("request head too large")
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def serve_one(conn: socket.socket, state_dir: Path, node_ip: str) -> None:
    """One CONNECT: answer 200 and pipe both ways, or answer why not and close."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(conn)
        try:
            head, rest = _read_head(conn)
            host, port = parse_connect(head)
        except (OSError, ValueError) as exc:
            with contextlib.suppress(OSError):
                conn.sendall(f"HTTP/1.1 400 Bad Request\r\n\r\n{exc}\n".encode())
            return
        try:
            upstream = dial(host, port, state_dir, node_ip)
        except PermissionError as exc:
            with contextlib.suppress(OSError):
                conn.sendall(f"HTTP/1.1 403 Forbidden\r\n\r\n{exc}\n".encode())
            return
        except OSError as exc:
            with contextlib.suppress(OSError):
                conn.sendall(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{exc}\n".encode())
            return
        stack.enter_context(upstream)
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        if rest:
            upstream.sendall(rest)
        conn.settimeout(None)
        upstream.settimeout(None)
        forward.pump(conn, upstream)


def listen(path: Path) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)  # only this user (the API server runs as it) may connect
    try:
        server.bind(str(path))
    finally:
        os.umask(old)
    server.listen(64)
    return server


def serve(server: socket.socket, state_dir: Path, node_ip: str) -> None:
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve_one, args=(conn, state_dir, node_ip), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentrun_dev.egress", description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--node-ip", required=True)
    args = parser.parse_args(argv)
    server = listen(args.socket)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"egress proxy on {args.socket}", flush=True)
    try:
        serve(server, args.state_dir, args.node_ip)
    finally:
        with contextlib.suppress(OSError):
            args.socket.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
