"""Reading a loopback socket in the unit tests that play a peer (a receiver, a proxy's client)."""

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
