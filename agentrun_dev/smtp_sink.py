"""A local SMTP sink (aiosmtpd) that keeps every message, plus an HTTP API to look them up.

SMTP is not idempotent: a client that lost the connection after ``DATA`` cannot tell whether the message
was taken, and sending again may deliver twice. That is exactly the provider the effect ledger must not
duplicate against, so the sink counts everything it receives. The email tool's lookup hook reconciles an
unknown outcome by asking ``GET /messages?message_id=<id>``.

Stored per message in ``<store>/messages/``: ``NNNNNN.eml`` (raw bytes) and ``NNNNNN.json`` (envelope and
parsed headers: Message-ID, From, To, Subject), each fsync'd before the ``250`` reply. The index is rebuilt
from those files at start, so a restarted sink keeps its messages.

HTTP API: ``GET /messages`` (list), ``GET /messages?message_id=<id>`` (lookup; angle brackets optional),
``GET /stats`` (count, per Message-ID counts), ``DELETE /messages`` (clear), ``POST /control/faults``
``{"mode": "drop" | "451", "count": N}`` (``drop``: store the message, then cut the connection before
replying — an unknown outcome; ``451``: refuse temporarily, nothing stored), ``DELETE /control/faults``.

Run: ``python -m agentrun_dev.smtp_sink --host H --port P --api-port Q --store DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email.parser
import email.policy
import json
import os
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrun_dev import jsonapi

if TYPE_CHECKING:  # imported where used: the in-cluster mail catcher (agentrun_dev.mailcatcher) reuses the
    import aiosmtpd.smtp  # store and the HTTP API from the image, which has no aiosmtpd (a dev extra)


def normalise_message_id(value: str | None) -> str:
    return (value or "").strip().strip("<>").strip()


class MessageStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory / "messages"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.messages: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        for meta in sorted(self.directory.glob("*.json")):
            with contextlib.suppress(ValueError, OSError):
                self.messages.append(json.loads(meta.read_text()))
        self._seq = max((int(m["seq"]) for m in self.messages), default=0)

    def add(self, raw: bytes, mail_from: str, rcpt_tos: list[str]) -> dict[str, Any]:
        headers = email.parser.BytesHeaderParser(policy=email.policy.default).parsebytes(raw)
        with self.lock:
            self._seq += 1
            seq = self._seq
            meta = {
                "seq": seq,
                "message_id": normalise_message_id(str(headers.get("Message-ID") or "")),
                "from": str(headers.get("From") or ""),
                "to": str(headers.get("To") or ""),
                "subject": str(headers.get("Subject") or ""),
                "mail_from": mail_from,
                "rcpt_tos": list(rcpt_tos),
                "received_at": time.time(),
                "size": len(raw),
            }
            stem = self.directory / f"{seq:06d}"
            _write_durably(stem.with_suffix(".eml"), raw)
            _write_durably(stem.with_suffix(".json"), json.dumps(meta, sort_keys=True).encode())
            self.messages.append(meta)
            return meta

    def find(self, message_id: str | None) -> list[dict[str, Any]]:
        with self.lock:
            if message_id is None:
                return list(self.messages)
            wanted = normalise_message_id(message_id)
            return [m for m in self.messages if m["message_id"] == wanted]

    def raw(self, seq: int) -> bytes:
        return (self.directory / f"{seq:06d}.eml").read_bytes()

    def clear(self) -> int:
        with self.lock:
            count = len(self.messages)
            for path in self.directory.iterdir():
                path.unlink()
            self.messages.clear()
            return count

    def next_fault(self) -> str | None:
        with self.lock:
            if not self.faults:
                return None
            fault = self.faults[0]
            fault["count"] -= 1
            if fault["count"] <= 0:
                self.faults.pop(0)
            return str(fault["mode"])


def _write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _SmtpHandler:
    def __init__(self, store: MessageStore) -> None:
        self.store = store

    async def handle_DATA(self, server: aiosmtpd.smtp.SMTP, session: Any, envelope: Any) -> str:
        fault = self.store.next_fault()
        if fault == "451":
            return "451 4.3.0 Try again later"
        content = envelope.original_content or envelope.content
        raw = content if isinstance(content, bytes) else str(content).encode()
        # fsync in a thread: the event loop keeps serving other connections meanwhile.
        await asyncio.to_thread(self.store.add, raw, envelope.mail_from or "", list(envelope.rcpt_tos))
        transport = server.transport
        if fault == "drop" and isinstance(transport, asyncio.Transport):
            transport.abort()  # stored, but the client never hears 250
        return "250 2.0.0 Message accepted for delivery"


class _ApiHandler(jsonapi.Handler):
    server: jsonapi.Server[MessageStore]

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        store = self.server.store
        if url.path == "/messages":
            ids = query.get("message_id")
            found = store.find(ids[0] if ids else None)
            if query.get("raw", ["0"])[0] in ("1", "true"):
                found = [{**m, "raw": store.raw(int(m["seq"])).decode("utf-8", "replace")} for m in found]
            self._send(200, {"count": len(found), "messages": found})
        elif url.path == "/stats":
            messages = store.find(None)
            per_id: dict[str, int] = {}
            for m in messages:
                per_id[m["message_id"]] = per_id.get(m["message_id"], 0) + 1
            self._send(200, {"count": len(messages), "by_message_id": per_id})
        else:
            self._send(404, {"error": "no such route"})

    def do_DELETE(self) -> None:
        if self.path == "/messages":
            self._send(200, {"deleted": self.server.store.clear()})
        elif self.path == "/control/faults":
            with self.server.store.lock:
                self.server.store.faults.clear()
            self._send(200, {"faults": []})
        else:
            self._send(404, {"error": "no such route"})

    def do_POST(self) -> None:
        if self.path != "/control/faults":
            self._send(404, {"error": "no such route"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            fault = {"mode": str(body["mode"]), "count": int(body.get("count", 1))}
        except (ValueError, KeyError, TypeError):
            self._send(400, {"error": 'expected {"mode": "drop"|"451", "count": N}'})
            return
        if fault["mode"] not in ("drop", "451"):
            self._send(400, {"error": f"unknown fault mode {fault['mode']!r}"})
            return
        with self.server.store.lock:
            self.server.store.faults.append(fault)
            queued = list(self.server.store.faults)
        self._send(200, {"faults": queued})


def api_server(address: tuple[str, int], store: MessageStore) -> jsonapi.Server[MessageStore]:
    """The HTTP API over ``store`` (not serving yet): this sink's, and the in-cluster mail catcher's."""
    return jsonapi.Server(address, _ApiHandler, store)


class SmtpSink:
    """In-process sink for tests: ``with SmtpSink(store_dir) as sink: smtplib.SMTP(sink.host, sink.port)``.

    Port 0 picks free ports (aiosmtpd's own ``Controller`` cannot, so the loop is run here directly).
    """

    def __init__(
        self, store_dir: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 0, api_port: int = 0
    ) -> None:
        self.host = host
        self.store = MessageStore(Path(store_dir))
        self._requested_port = port
        self.port = port
        self._api = api_server((host, api_port), self.store)
        self.api_port, self.api_url = self._api.port, self._api.url
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._threads: list[threading.Thread] = []

    def start(self) -> SmtpSink:
        import aiosmtpd.smtp

        handler = _SmtpHandler(self.store)

        def factory() -> aiosmtpd.smtp.SMTP:
            return aiosmtpd.smtp.SMTP(handler, hostname="agentrun-smtp-sink", loop=self._loop)

        self._server = self._loop.run_until_complete(
            self._loop.create_server(factory, self.host, self._requested_port)
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._threads = [
            threading.Thread(target=self._loop.run_forever, name="smtp-sink", daemon=True),
            threading.Thread(target=self._api.serve_forever, args=(0.05,), name="smtp-sink-api", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._api.shutdown()
        self._api.server_close()

        async def close() -> None:
            assert self._server is not None
            self._server.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), timeout=2)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        for thread in self._threads:
            thread.join(timeout=5)
        self._loop.close()

    def __enter__(self) -> SmtpSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentrun_dev.smtp_sink", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="SMTP port; 0 picks a free one (printed)")
    parser.add_argument("--api-port", type=int, default=0, help="HTTP API port; 0 picks a free one (printed)")
    parser.add_argument("--store", required=True, help="directory for stored messages")
    args = parser.parse_args(argv)
    sink = SmtpSink(args.store, args.host, args.port, args.api_port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sink.start()
    print(json.dumps({"smtp_host": sink.host, "smtp_port": sink.port, "api": sink.api_url}), flush=True)
    stop.wait()
    sink.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
