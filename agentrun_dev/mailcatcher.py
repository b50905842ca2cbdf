"""The quickstart's in-cluster mail catcher: ``python -m agentrun_dev.mailcatcher`` in the agentrun image.

The example's email goes here instead of a real relay, so a first run on kind / k3d ends with a message you
can read (deploy/examples/mailcatcher.yaml runs it as a Deployment + Service; ``… mailcatcher list`` in its
Pod prints what it caught). It is the SMTP sink the tests
use (agentrun_dev.smtp_sink: the same message store and HTTP API — ``GET /messages``, ``GET /stats``) with a
plain SMTP server from the standard library in front, because the image carries no aiosmtpd (a dev extra; the
image holds runtime dependencies only). The server speaks what ``smtplib`` sends — EHLO/HELO, MAIL, RCPT,
DATA, RSET, NOOP, QUIT — with no TLS and no AUTH: a catcher, never a relay.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from agentrun_dev import smtp_sink

MAX_BYTES = 10 << 20  # one message; more is refused (552), not truncated


async def _session(store: smtp_sink.MessageStore, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    def say(line: str) -> None:
        w.write(line.encode() + b"\r\n")

    say("220 agentrun-mailcatcher ESMTP")
    mail_from, rcpts = "", list[str]()
    while not r.at_eof():
        raw = await r.readline()
        if not raw:
            break
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        verb = line[:4].upper()
        if verb == "EHLO":
            say("250-agentrun-mailcatcher")
            say(f"250 SIZE {MAX_BYTES}")
        elif verb == "HELO":
            say("250 agentrun-mailcatcher")
        elif verb == "MAIL":
            mail_from, rcpts = line.partition(":")[2].strip().strip("<>").split(">")[0], []
            say("250 2.1.0 OK")
        elif verb == "RCPT":
            rcpts.append(line.partition(":")[2].strip().strip("<>").split(">")[0])
            say("250 2.1.5 OK")
        elif verb == "DATA":
            if not rcpts:
                say("503 5.5.1 RCPT first")
                continue
            say("354 End data with <CR><LF>.<CR><LF>")
            await w.drain()
            lines, size = [], 0
            while (chunk := await r.readline()) not in (b".\r\n", b".\n", b""):
                size += len(chunk)
                lines.append(chunk[1:] if chunk.startswith(b"..") else chunk)  # RFC 5321 4.5.2 dot-stuffing
            if size > MAX_BYTES:
                say("552 5.3.4 Message too big")
                continue
            # fsync'd before the 250, in a thread so other connections are served meanwhile.
            await asyncio.to_thread(store.add, b"".join(lines), mail_from, list(rcpts))
            say("250 2.0.0 Message accepted for delivery")
            mail_from, rcpts = "", []
        elif verb == "RSET":
            mail_from, rcpts = "", []
            say("250 2.0.0 OK")
        elif verb == "NOOP":
            say("250 2.0.0 OK")
        elif verb == "QUIT":
            say("221 2.0.0 Bye")
            await w.drain()
            break
        else:
            say("502 5.5.2 Command not implemented")
        await w.drain()
    w.close()


def list_messages(api_port: int) -> int:
    """``… mailcatcher list``: what the catcher holds, one line per message (run in its Pod: kubectl exec)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/messages", timeout=10) as resp:
        found = json.loads(resp.read())
    print(f"{found['count']} message(s)")
    for m in found["messages"]:
        print(f"  {m['from']} -> {m['to']}: {m['subject']} (Message-ID {m['message_id']})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["list"]:
        listing = argparse.ArgumentParser(prog="python -m agentrun_dev.mailcatcher list")
        listing.add_argument("--api-port", type=int, default=8025)
        return list_messages(listing.parse_args(args_in[1:]).api_port)
    parser = argparse.ArgumentParser(prog="python -m agentrun_dev.mailcatcher", description=__doc__)
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--smtp-port", type=int, default=2525)
    parser.add_argument("--api-port", type=int, default=8025)
    parser.add_argument("--store", default="/tmp/mail", help="directory for stored messages")
    args = parser.parse_args(args_in)
    store = smtp_sink.MessageStore(Path(args.store))
    api = smtp_sink.api_server((args.host, args.api_port), store)
    threading.Thread(target=api.serve_forever, name="mail-api", daemon=True).start()

    async def serve() -> None:
        server = await asyncio.start_server(
            lambda r, w: _session(store, r, w), args.host, args.smtp_port, limit=MAX_BYTES
        )
        port = server.sockets[0].getsockname()[1]
        print(json.dumps({"smtp_port": port, "api_port": api.server_address[1]}), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with server:
            await stop.wait()

    asyncio.run(serve())
    api.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
