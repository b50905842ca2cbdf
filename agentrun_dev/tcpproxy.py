"""A loopback TCP proxy that can stop forwarding: a lagging or stalled watch, made on purpose.

Tests put it between the operator and the kube-apiserver (a kubeconfig whose ``server`` names the proxy's
port; TLS passes through untouched, the API server's certificate covers 127.0.0.1). ``stall()`` stops
moving bytes on every connection open at that moment — kopf's long-lived watch streams and any pooled
request connection — while connections opened afterwards are forwarded normally (``stall(new=True)``
holds those too). ``resume()`` delivers what was held back, in order: the stall looks like a watch that
lagged, never like one that lost events. ``blackhole()`` is the other failure, a partition: every byte is
swallowed, both ways, and new connections are accepted but never reach the upstream, so requests hang until
their client gives up; ``heal()`` forwards again and closes the connections open until then (dead to their
clients). Loopback only, one thread with its own event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator

CHUNK = 65536


@dataclasses.dataclass
class _Conn:
    gate: asyncio.Event  # set = forwarding
    writers: list[asyncio.StreamWriter]


class Proxy:
    """``with Proxy(upstream_port) as proxy: ... proxy.port ...``; stall/resume from any thread."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcpproxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._conns: list[_Conn] = []
        self._hold_new = False
        self._blackholed = False
        self.connections = 0  # accepted so far (tests check the client really goes through the proxy)

    # --- control (any thread) ------------------------------------------------------------------------------

    def start(self) -> Proxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)
        return self

    def stall(self, *, new: bool = False) -> None:
        """Stop forwarding on the open connections (and, with ``new``, on later ones)."""
        self._call(self._stall, new)

    def resume(self) -> None:
        self._call(self._resume)

    def blackhole(self) -> None:
        """Swallow everything from now on, on open and new connections (a partition)."""
        self._call(self._blackhole)

    def heal(self) -> None:
        """Forward again; the connections open until now are closed, so clients make new ones."""
        self._call(self._heal)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            # A coroutine: it must be awaited on the loop (``_call`` runs plain functions only).
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()  # its selector and self-pipe are file descriptors too

    def __enter__(self) -> Proxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, fn: Callable[..., None], *args: object) -> None:
        async def run() -> None:
            fn(*args)

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    # --- the loop ------------------------------------------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def _stall(self, new: bool) -> None:
        self._hold_new = new
        for conn in self._conns:
            conn.gate.clear()

    def _resume(self) -> None:
        self._hold_new = False
        for conn in self._conns:
            conn.gate.set()

    def _blackhole(self) -> None:
        self._blackholed = True

    def _heal(self) -> None:
        self._blackholed = False
        for conn in list(self._conns):
            conn.gate.set()
            for writer in conn.writers:
                writer.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in self._conns:
            conn.gate.set()
            for writer in conn.writers:
                writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._blackholed:  # accepted, then silence until healed or closed
            conn = _Conn(asyncio.Event(), [writer])
            self._conns.append(conn)
            try:
                with contextlib.suppress(OSError, ConnectionError):
                    while await reader.read(CHUNK):
                        pass
            finally:
                self._conns.remove(conn)
                writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        conn = _Conn(asyncio.Event(), [writer, up_writer])
        if not self._hold_new:
            conn.gate.set()
        self._conns.append(conn)
        try:
            await asyncio.gather(self._pipe(reader, up_writer, conn), self._pipe(up_reader, writer, conn))
        finally:
            self._conns.remove(conn)
            for w in conn.writers:
                w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Conn) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while True:
                await conn.gate.wait()
                data = await reader.read(CHUNK)
                if not data:
                    break
                await conn.gate.wait()  # stalled while reading: hold what was read
                if self._blackholed:
                    continue  # swallowed
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


@contextlib.contextmanager
def running(upstream_port: int) -> Iterator[Proxy]:
    with Proxy(upstream_port) as proxy:
        yield proxy
