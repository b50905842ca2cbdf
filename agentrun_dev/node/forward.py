"""TCP forwarders from the node's network namespace to the dev cluster's loopback services.

The rule: no address, route or interface outside namespaces the dev cluster creates. So there is no veth to
the host: this process lives in the host's namespace, switches its main thread into the node's namespace
(``setns``) just long enough to create the listening sockets, and switches back. A socket stays in the
namespace it was created in, so it accepts pods' connections (to the node IP, or the ``kubernetes`` Service
IP) while every outgoing connection is made from the host's namespace to ``127.0.0.1``.

    python -m agentrun_dev.node.forward --netns /proc/PID/ns/net 10.213.0.1:5432=127.0.0.1:41234 ...
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import selectors
import signal
import socket
import sys
import threading
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def parse_map(spec: str) -> tuple[tuple[str, int], tuple[str, int]]:
    """Pure: ``10.213.0.1:5432=127.0.0.1:41234`` -> ((listen host, port), (target host, port))."""
    try:
        left, right = spec.split("=", 1)
        lh, lp = left.rsplit(":", 1)
        th, tp = right.rsplit(":", 1)
        return (lh, int(lp)), (th, int(tp))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected LISTEN_IP:PORT=TARGET_IP:PORT, got {spec!r}") from exc


@contextlib.contextmanager
def in_netns(netns: str) -> Iterator[None]:
    """The calling thread inside ``netns`` for the block, then back in its own namespace. Sockets created in
    the block keep ``netns`` (listen or connect from there); ``setns`` moves only this thread."""
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    try:
        setns(target)
        try:
            yield
        finally:
            setns(own)
    finally:
        os.close(own)
        os.close(target)


def listen_in(netns: str, addrs: list[tuple[str, int]]) -> list[socket.socket]:
    """Listening sockets created inside ``netns``; the calling thread returns to its own namespace."""
    socks = []
    with in_netns(netns):
        for addr in addrs:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(64)
            socks.append(sock)
    return socks


def pump(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both sides are done (a half-close is passed on), then close both."""
    sel = selectors.DefaultSelector()
    sel.register(a, selectors.EVENT_READ, b)
    sel.register(b, selectors.EVENT_READ, a)
    try:
        open_ends = 2
        while open_ends:
            for key, _ in sel.select():
                src: socket.socket = key.fileobj  # type: ignore[assignment]
                dst: socket.socket = key.data
                try:
                    data = src.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(src)
                    open_ends -= 1
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        open_ends = 0
                    continue
                try:
                    dst.sendall(data)
                except OSError:
                    open_ends = 0
    finally:
        sel.close()
        a.close()
        b.close()


def _connect_and_pump(conn: socket.socket, target: tuple[str, int]) -> None:
    try:
        upstream = socket.create_connection(target, timeout=10)
        upstream.settimeout(None)
    except OSError:
        conn.close()
        return
    pump(conn, upstream)


def _serve(listener: socket.socket, target: tuple[str, int]) -> None:
    # The upstream dial happens on the connection's own thread: one slow dial (a loaded host, a full backlog)
    # must not hold up the accept loop, or every other connection through this port (the operator's Lease
    # renewals among them) waits behind it.
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_connect_and_pump, args=(conn, target), daemon=True).start()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentrun_dev.node.forward")
    ap.add_argument("--netns", required=True, help="path of the network namespace to listen in")
    ap.add_argument("maps", nargs="+", type=parse_map, metavar="LISTEN=TARGET")
    args = ap.parse_args(argv)
    socks = listen_in(args.netns, [m[0] for m in args.maps])
    for sock, (listen, target) in zip(socks, args.maps, strict=True):
        print(f"forwarding {listen[0]}:{listen[1]} (node namespace) -> {target[0]}:{target[1]}", flush=True)
        threading.Thread(target=_serve, args=(sock, target), daemon=True).start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
