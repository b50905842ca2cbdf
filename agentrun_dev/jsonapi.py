"""The HTTP side both dev providers share (``http_provider``, ``smtp_sink``'s API): a threading server that
hands its handlers one store, and a handler that answers in JSON.

Quiet by design: the providers are read through their own ``/stats`` and ``/messages`` endpoints, so the
request log would only bury a test's output.
"""

from __future__ import annotations

import http.server
import json
from typing import Any, Generic, TypeVar

S = TypeVar("S")


class Server(http.server.ThreadingHTTPServer, Generic[S]):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], handler: type[http.server.BaseHTTPRequestHandler], store: S
    ) -> None:
        self.store = store
        super().__init__(address, handler)
        # Bound here, so the port is known (0 picked a free one); the URL names the host as it was asked for.
        self.port = int(self.server_address[1])
        self.url = f"http://{address[0]}:{self.port}"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload, sort_keys=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
