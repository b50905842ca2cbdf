"""The dev cluster's egress proxy (agentrun_dev.egress): what it dials, what it refuses, and that it pipes."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from agentrun_dev import egress
from tests.support import sockets

NODE_IP = "10.213.0.1"


@pytest.mark.parametrize(
    ("head", "target"),
    [
        (b"CONNECT 127.0.0.1:10250 HTTP/1.1\r\nHost: 127.0.0.1:10250", ("127.0.0.1", 10250)),
        (b"CONNECT [::1]:443 HTTP/1.0", ("::1", 443)),
    ],
)
def test_parse_connect(head: bytes, target: tuple[str, int]) -> None:
    assert egress.parse_connect(head) == target


@pytest.mark.parametrize(
    "head",
    [b"GET / HTTP/1.1", b"CONNECT 127.0.0.1 HTTP/1.1", b"CONNECT :80 HTTP/1.1", b"CONNECT a:b HTTP/1.1"],
)
def test_parse_connect_refuses_anything_else(head: bytes) -> None:
    with pytest.raises(ValueError):
        egress.parse_connect(head)


def test_route_keeps_every_connection_on_the_machine() -> None:
    assert egress.route("127.0.0.1", NODE_IP) == "host"
    assert egress.route("localhost", NODE_IP) == "host"
    assert egress.route(NODE_IP, NODE_IP) == "node"
    for away in ("10.213.0.2", "192.0.2.1", "8.8.8.8", "agentrun-real-node", "example.com"):
        assert egress.route(away, NODE_IP) is None, away


def test_no_node_netns_without_a_live_holder(tmp_path: Path) -> None:
    assert egress.node_netns(tmp_path) is None
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "holder.pid").write_text("1\n")  # pid 1 is not the node holder
    assert egress.node_netns(tmp_path) is None


def _proxy(tmp_path: Path) -> Path:
    path = tmp_path / "egress.sock"
    server = egress.listen(path)
    threading.Thread(target=egress.serve, args=(server, tmp_path, NODE_IP), daemon=True).start()
    return path


def _connect(path: Path, target: str) -> tuple[socket.socket, bytes]:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(10)
    client.connect(str(path))
    client.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    return client, sockets.recv_until(client, b"\r\n\r\n")


def test_a_loopback_target_is_piped_both_ways(tmp_path: Path) -> None:
    echo = socket.create_server(("127.0.0.1", 0))

    def serve_echo() -> None:
        conn, _ = echo.accept()
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data.upper())

    threading.Thread(target=serve_echo, daemon=True).start()
    path = _proxy(tmp_path)
    client, answer = _connect(path, f"127.0.0.1:{echo.getsockname()[1]}")
    with client:
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        client.sendall(b"hello")
        assert client.recv(4096) == b"HELLO"
    echo.close()


def test_other_targets_are_refused_and_a_missing_node_is_a_bad_gateway(tmp_path: Path) -> None:
    path = _proxy(tmp_path)
    client, answer = _connect(path, "192.0.2.1:10250")
    client.close()
    assert answer.startswith(b"HTTP/1.1 403 "), answer
    client, answer = _connect(path, f"{NODE_IP}:10250")  # no real node is up here
    client.close()
    assert answer.startswith(b"HTTP/1.1 502 "), answer
