"""A local "payments/tickets" HTTP API that honours ``Idempotency-Key`` the way Stripe does.

``POST /effects`` with a JSON body performs an effect. With an ``Idempotency-Key`` header seen before, it
returns the stored response (header ``Idempotent-Replayed: true``) and performs nothing; the same key with a
different body is refused (422), as Stripe refuses reusing a key with other parameters. Each key counts how
many times its effect was actually performed, which is what the chaos tests assert on (exactly 1).

* ``GET /effects/<key>`` — lookup by key (404 when never seen): the ledger's reconcile hook.
* ``GET /stats`` — totals and per-key counts.
* ``POST /control/faults`` — ``{"mode": ..., "count": N, "retry_after": s, "delay": s}`` queues faults for the
  next N ``POST /effects``: ``"429"`` / ``"503"`` (refused with ``Retry-After``, nothing performed),
  ``"drop"`` (performed and persisted, then the connection is closed without a response: an unknown
  outcome), ``"delay"`` (performed after sleeping ``delay`` seconds, holding the provider's lock),
  ``"late"`` (accepted, then committed ``delay`` seconds later WITHOUT holding the lock: lookups and other
  requests meanwhile see nothing — a provider whose commit outlives the client's timeout).
  ``DELETE /control/faults`` clears.
* ``POST /control/config`` — ``{"honour_keys": false}`` makes the provider ignore keys (every POST performs:
  shows the ledger alone prevents duplicates). ``POST /control/reset`` forgets everything.

State is a JSON file in the store directory, written (tmp + fsync + rename) before each response, so a
restarted provider keeps its counts.
Run: ``python -m agentrun_dev.http_provider --host H --port P --store D``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agentrun_dev import jsonapi

STATE_FILE = "http_provider_state.json"


@dataclasses.dataclass
class Fault:
    mode: str  # "429" | "503" | "drop" | "delay" | "late"
    count: int = 1
    retry_after: float = 1.0
    delay: float = 0.0


def _empty_state() -> dict[str, Any]:
    return {"keys": {}, "effects_performed_total": 0, "requests": 0, "replays": 0, "next_id": 1}


class Store:
    """The provider's state, one JSON document, rewritten durably on every change."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / STATE_FILE
        directory.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.state = json.loads(self.path.read_text()) if self.path.exists() else _empty_state()
        self.honour_keys = True
        self.faults: list[Fault] = []
        self.late_accepted = 0  # "late" requests received so far (committed or still sleeping)
        self.late_committed = 0  # "late" requests performed (their delay over)
        self.rejected: list[dict[str, Any]] = []  # 4xx answers to malformed requests: what was received

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(self.state, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def next_fault(self) -> Fault | None:
        if not self.faults:
            return None
        fault = self.faults[0]
        fault.count -= 1
        if fault.count <= 0:
            self.faults.pop(0)
        return fault


class _Handler(jsonapi.Handler):
    server: jsonapi.Server[Store]

    # --- plumbing -------------------------------------------------------------------------------------

    def _raw_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # http.server's own refusals (bad request line, headers) and ours, kept for /stats: a test that sees
        # a 4xx can then tell what actually reached the provider.
        self._reject(code, message or "")
        super().send_error(code, message, explain)

    def _reject(self, code: int, reason: str, raw: bytes = b"") -> None:
        entry = {
            "code": code,
            "reason": reason,
            "requestline": getattr(self, "raw_requestline", b"")[:200].decode("latin-1"),
            "headers": dict(self.headers.items()) if getattr(self, "headers", None) else {},
            "body": raw[:200].decode("latin-1"),
        }
        with self.server.store.lock:
            self.server.store.rejected.append(entry)

    def _drop(self) -> None:
        """Close the connection without a response: the client cannot know whether we performed."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    # --- routes ---------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        store = self.server.store
        if self.path == "/stats":
            with store.lock:
                st = store.state
                per_key = {k: v["effects_performed"] for k, v in st["keys"].items()}
                self._send(
                    200,
                    {
                        "effects_performed_total": st["effects_performed_total"],
                        "requests": st["requests"],
                        "replays": st["replays"],
                        "late_accepted": store.late_accepted,
                        "late_committed": store.late_committed,
                        "rejected": list(store.rejected),
                        "keys": len(per_key),
                        "effects_performed": per_key,
                    },
                )
            return
        if self.path.startswith("/effects/"):
            key = urllib.parse.unquote(self.path[len("/effects/") :])
            with store.lock:
                entry = store.state["keys"].get(key)
            if entry is None:
                self._send(404, {"error": "not_found", "idempotency_key": key})
            else:
                self._send(200, {"idempotency_key": key, **entry})
            return
        self._send(404, {"error": "no such route"})

    def do_DELETE(self) -> None:
        if self.path == "/control/faults":
            with self.server.store.lock:
                self.server.store.faults.clear()
            self._send(200, {"faults": []})
            return
        self._send(404, {"error": "no such route"})

    def do_POST(self) -> None:
        store = self.server.store
        raw = b""
        try:
            raw = self._raw_body()
            body = json.loads(raw) if raw else None
        except ValueError:
            self._reject(400, "body is not JSON", raw)
            self._send(400, {"error": "body is not JSON"})
            return
        if self.path == "/effects":
            self._effect(body)
        elif self.path == "/control/faults":
            try:
                fault = Fault(**(body or {}))
            except TypeError as exc:
                self._send(400, {"error": f"bad fault: {exc}"})
                return
            if fault.mode not in ("429", "503", "drop", "delay", "late"):
                self._send(400, {"error": f"unknown fault mode {fault.mode!r}"})
                return
            with store.lock:
                store.faults.append(fault)
                queued = [dataclasses.asdict(f) for f in store.faults]
            self._send(200, {"faults": queued})
        elif self.path == "/control/config":
            with store.lock:
                store.honour_keys = bool((body or {}).get("honour_keys", True))
            self._send(200, {"honour_keys": store.honour_keys})
        elif self.path == "/control/reset":
            with store.lock:
                store.state = _empty_state()
                store.faults.clear()
                store.honour_keys = True
                store.save()
            self._send(200, {"reset": True})
        else:
            self._send(404, {"error": "no such route"})

    def _effect(self, body: Any) -> None:
        store = self.server.store
        key = self.headers.get("Idempotency-Key")
        late: Fault | None = None
        with store.lock:
            if store.faults and store.faults[0].mode == "late":
                late = store.next_fault()
                # Counted on arrival (not persisted): tests see the request is in flight before it commits.
                store.late_accepted += 1
        if late is not None:
            time.sleep(late.delay)  # the client may have given up long ago; we commit anyway
        # One lock around decide + perform + persist: concurrent retries with one key perform once.
        with store.lock:
            st = store.state
            st["requests"] += 1
            fault = None if late is not None else store.next_fault()
            if fault is not None and fault.mode in ("429", "503"):
                store.save()
                self._send(
                    int(fault.mode),
                    {"error": "rate_limited" if fault.mode == "429" else "unavailable"},
                    {"Retry-After": f"{fault.retry_after:g}"},
                )
                return
            entry = st["keys"].get(key) if key else None
            if entry is not None and store.honour_keys:
                if entry["request"] != body:
                    store.save()
                    self._send(
                        422,
                        {"error": "idempotency_key_reused", "message": "key used with different parameters"},
                    )
                    return
                st["replays"] += 1
                store.save()
                self._send(entry["status"], entry["response"], {"Idempotent-Replayed": "true"})
                return
            if fault is not None and fault.mode == "delay":
                time.sleep(fault.delay)
            # Perform the effect.
            effect_id = f"eff_{st['next_id']}"
            st["next_id"] += 1
            st["effects_performed_total"] += 1
            response = {"id": effect_id, "idempotency_key": key, "request": body, "created": time.time()}
            if key:
                if entry is None:
                    entry = {"request": body, "status": 201, "response": response, "effects_performed": 0}
                    st["keys"][key] = entry
                entry["effects_performed"] += 1
            if late is not None:
                store.late_committed += 1
            store.save()
            if fault is not None and fault.mode == "drop":
                self._drop()
                return
            self._send(201, response)


class HttpProvider:
    """In-process provider for tests: ``with HttpProvider(store_dir) as p: ... p.url``."""

    def __init__(self, store_dir: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 0) -> None:
        self.store = Store(Path(store_dir))
        self.host = host
        self._server = jsonapi.Server((host, port), _Handler, self.store)
        self.port, self.url = self._server.port, self._server.url
        self._thread: threading.Thread | None = None

    def start(self) -> HttpProvider:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="http-provider", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> HttpProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- a tiny client, for tests and the demo ----------------------------------------------------------------


def request(
    url: str,
    method: str = "GET",
    payload: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10,
) -> tuple[int, Any, dict[str, str]]:
    """(status, JSON body, headers); HTTP errors are returned, not raised."""
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null"), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null"), dict(err.headers)


def stats(base_url: str) -> dict[str, Any]:
    status, body, _ = request(base_url.rstrip("/") + "/stats")
    assert status == 200, body
    result: dict[str, Any] = body
    return result


@contextlib.contextmanager
def running(
    store_dir: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 0
) -> Iterator[HttpProvider]:
    with HttpProvider(store_dir, host, port) as provider:
        yield provider


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentrun_dev.http_provider", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    parser.add_argument("--store", required=True, help="directory for the durable state file")
    parser.add_argument("--ignore-idempotency-keys", action="store_true", help="perform on every POST")
    args = parser.parse_args(argv)
    provider = HttpProvider(args.store, args.host, args.port)
    provider.store.honour_keys = not args.ignore_idempotency_keys
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    provider.start()
    print(json.dumps({"http_provider": provider.url, "port": provider.port}), flush=True)
    stop.wait()
    provider.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
