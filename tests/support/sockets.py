"""Loopback sockets in the tests: a free port to listen on, and reading a socket in the tests that play a peer
(a receiver, a proxy's client)."""

from __future__ import annotations

import socket


def recv_until(sock: socket.socket, marker: bytes) -> bytes:
    """Everything read until ``marker`` arrived or the peer closed (the caller asserts which it expected)."""
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def free_port() -> int:
    """A loopback port nothing listens on right now (the OS picks it), for a server a test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
