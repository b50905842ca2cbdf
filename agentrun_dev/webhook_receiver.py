"""A real webhook receiver on loopback (spec.approval.notify tests): an HTTP server counting every request.

Rule: it records every request it reads (raw count, headers, body) before answering, so a duplicate can never
hide; ``delivered`` holds the first accepted (2xx) request per ``Idempotency-Key`` — the receiver-side dedupe
the generic JSON format documents. ``answers`` scripts the status codes of the next requests (e.g. 503, 429)
to exercise retries.

What was *acted on* is counted apart (``acted``), the way a real receiver behaves: a 2xx, and a 500/502/504
(the receiver, or the upstream behind its gateway, acted, then the answer was an error: RFC 9110 says nothing
of whether such a request was processed) are actions; a 503 / 429 / 408 / 3xx / other 4xx is not. With
``dedupes`` False it acts again on every request (a Slack-like receiver): ``acted`` is what a human would see.
``location`` is the ``Location`` header of a scripted 3xx (a redirect the sender must not follow).
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import threading
from typing import Any

# Answers after which the receiver has acted on the request (see the module's docstring).
ACTED_THEN_FAILED = frozenset({500, 502, 504})


@dataclasses.dataclass(frozen=True)
class Request:
    key: str
    event: str
    headers: dict[str, str]
    body: dict[str, Any]
    answered: int


class Receiver:
    def __init__(self, *, host: str = "127.0.0.1", dedupes: bool = True) -> None:
        self.requests: list[Request] = []
        self.delivered: dict[str, Request] = {}
        self.acted: list[Request] = []  # requests acted on (deduped by key only when ``dedupes``)
        self.dedupes = dedupes
        self.answers: list[int] = []  # status codes for the next requests, consumed in order
        self.retry_after: str | None = None  # Retry-After sent with a scripted 429/503
        self.location: str | None = None  # Location sent with a scripted 3xx
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"unparsed": raw.decode(errors="replace")}
                key = self.headers.get("Idempotency-Key", "")
                with receiver._lock:
                    status = receiver.answers.pop(0) if receiver.answers else 200
                    duplicate = status == 200 and key in receiver.delivered
                    req = Request(
                        key, self.headers.get("X-AgentRun-Event", ""), dict(self.headers), body, status
                    )
                    receiver.requests.append(req)
                    if status == 200 and not duplicate:
                        receiver.delivered[key] = req
                    acts = 200 <= status < 300 or status in ACTED_THEN_FAILED
                    seen = any(r.key == key for r in receiver.acted)
                    if acts and not (receiver.dedupes and seen):
                        receiver.acted.append(req)
                self.send_response(status)
                if status in (429, 503) and receiver.retry_after:
                    self.send_header("Retry-After", receiver.retry_after)
                if 300 <= status < 400 and receiver.location:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps({"duplicate": duplicate}).encode())

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}/hooks/agentrun"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def by_key(self, key: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.key == key]

    def acted_on(self, key: str) -> int:
        """How many times the receiver acted on ``key`` (what its users saw)."""
        with self._lock:
            return len([r for r in self.acted if r.key == key])
