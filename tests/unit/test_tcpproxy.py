"""The stall proxy (agentrun_dev/tcpproxy.py) over real loopback sockets: it forwards, holds bytes while
stalled and delivers them on resume, swallows them while black-holed, and closing it (or healing a
blackhole) closes the connections it carried."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from agentrun_dev import tcpproxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def _client(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    return sock


def test_forwards_then_holds_while_stalled_and_delivers_on_resume(echo_port: int) -> None:
    with tcpproxy.Proxy(echo_port) as proxy, _client(proxy.port) as sock:
        sock.sendall(b"one")
        assert sock.recv(16) == b"one"
        proxy.stall()
        sock.sendall(b"two")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(16)  # held back, not lost
        proxy.resume()
        sock.settimeout(30)
        assert sock.recv(16) == b"two"
        assert proxy.connections == 1


def test_close_closes_the_connections_it_carried(echo_port: int) -> None:
    proxy = tcpproxy.Proxy(echo_port).start()
    sock = _client(proxy.port)
    sock.sendall(b"x")
    assert sock.recv(16) == b"x"
    proxy.close()
    sock.settimeout(30)
    assert sock.recv(16) == b""  # EOF: the proxy shut its side down instead of leaving it open
    sock.close()


def test_a_blackhole_swallows_open_and_new_connections_and_heal_closes_them(echo_port: int) -> None:
    with tcpproxy.Proxy(echo_port) as proxy, _client(proxy.port) as before:
        before.sendall(b"a")
        assert before.recv(16) == b"a"
        proxy.blackhole()
        with _client(proxy.port) as during:  # accepted: a partition, not a refusal
            for sock in (before, during):
                sock.sendall(b"lost")
                sock.settimeout(0.5)
                with pytest.raises(TimeoutError):
                    sock.recv(16)  # swallowed, not held: nothing arrives after heal either
            proxy.heal()
            for sock in (before, during):
                sock.settimeout(30)
                assert sock.recv(16) == b""  # dead to its client: closed, so the client reconnects
        with _client(proxy.port) as after:
            after.sendall(b"b")
            after.settimeout(30)
            assert after.recv(16) == b"b"
