"""Retry classification over the REAL exceptions of requests, httpx, urllib3, urllib and aiohttp.

Each exception is produced by the library itself against a loopback server: a closed port (refused: nothing
sent), a server that accepts and never answers (read timeout: ambiguous), a server that reads the request and
drops the connection (ambiguous), and an HTTP server answering 429/503 with ``Retry-After`` or 404/400
(``raise_for_status()``). Nothing is constructed by hand, so a library that renames or re-parents a class
fails here.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import httpx
import pytest
import requests
import urllib3

from agent_worker import retry


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again on exit: connecting is refused


@contextlib.contextmanager
def _raw_server(behaviour: str) -> Iterator[int]:
    """'silent': accept, read, never answer; 'drop': read the request, then close without a response."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    stop = threading.Event()
    conns: list[socket.socket] = []

    def serve() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(2)
            with contextlib.suppress(OSError):
                conn.recv(65536)
            if behaviour == "drop":
                conn.close()
            else:
                conns.append(conn)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        stop.set()
        t.join(5)
        srv.close()
        for c in conns:
            c.close()


class _Status(http.server.BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        code = int(self.path.strip("/"))
        self.send_response(code)
        if code in (429, 503):
            self.send_header("Retry-After", "7")
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture(scope="module")
def status_url() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _raised(fn: Callable[[], Any]) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("expected the client to raise")


def _aio(url: str, timeout: float, raise_status: bool = False) -> Any:
    async def go() -> Any:
        t = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        async with aiohttp.ClientSession(timeout=t) as s, s.get(url) as r:
            if raise_status:
                r.raise_for_status()
            return await r.read()

    return asyncio.run(go())


def _urllib3(url: str, timeout: float) -> Any:
    return urllib3.PoolManager(retries=False).request("GET", url, timeout=timeout)


CLIENTS: dict[str, Callable[[str, float], Any]] = {
    "requests": lambda url, t: requests.get(url, timeout=t).raise_for_status(),
    "httpx": lambda url, t: httpx.get(url, timeout=t).raise_for_status(),
    "urllib": lambda url, t: urllib.request.urlopen(url, timeout=t).read(),
    "urllib3": _urllib3,
    "aiohttp": lambda url, t: _aio(url, t, raise_status=True),
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_refused_connection_is_retryable(client: str) -> None:
    exc = _raised(lambda: CLIENTS[client](f"http://127.0.0.1:{_closed_port()}/x", 2))
    assert retry.classify(exc).kind == "refused", repr(exc)


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_read_timeout_after_sending_is_ambiguous(client: str) -> None:
    with _raw_server("silent") as port:
        exc = _raised(lambda: CLIENTS[client](f"http://127.0.0.1:{port}/x", 0.3))
    assert retry.classify(exc).kind == "ambiguous", repr(exc)


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_connection_dropped_after_sending_is_ambiguous(client: str) -> None:
    with _raw_server("drop") as port:
        exc = _raised(lambda: CLIENTS[client](f"http://127.0.0.1:{port}/x", 2))
    assert retry.classify(exc).kind == "ambiguous", repr(exc)


@pytest.mark.parametrize("client", ["requests", "httpx", "urllib", "aiohttp"])
@pytest.mark.parametrize("code", [429, 503])
def test_throttled_raise_for_status_is_retryable_with_retry_after(
    client: str, code: int, status_url: str
) -> None:
    exc = _raised(lambda: CLIENTS[client](f"{status_url}/{code}", 2))
    failure = retry.classify(exc)
    assert (failure.kind, failure.status, failure.retry_after) == ("refused", code, 7.0), repr(exc)


@pytest.mark.parametrize("client", ["requests", "httpx", "urllib", "aiohttp"])
@pytest.mark.parametrize(("code", "kind"), [(404, "permanent"), (400, "permanent"), (500, "ambiguous")])
def test_other_statuses(client: str, code: int, kind: str, status_url: str) -> None:
    exc = _raised(lambda: CLIENTS[client](f"{status_url}/{code}", 2))
    assert retry.classify(exc).kind == kind, repr(exc)


def test_malformed_url_is_permanent() -> None:
    assert retry.classify(_raised(lambda: requests.get("nope://x", timeout=1))).kind == "permanent"
    assert retry.classify(_raised(lambda: httpx.get("nope://x", timeout=1))).kind == "permanent"


def test_classify_imports_no_client_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom agent_worker import retry\n"
        "retry.classify(TimeoutError())\n"
        "print(sorted(m for m in ('requests', 'httpx', 'aiohttp', 'urllib3') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_decide_honours_retry_after_from_a_real_429(status_url: str) -> None:
    import random

    exc = _raised(lambda: requests.get(f"{status_url}/429", timeout=2).raise_for_status())
    decision = retry.decide(
        retry.RetryPolicy(), 1, retry.classify(exc), dedupes_by_key=False, rng=random.Random(0)
    )
    assert decision.action == "retry" and 7.0 <= decision.delay <= 7.7
