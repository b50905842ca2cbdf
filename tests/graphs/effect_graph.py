"""A tiny graph with one idempotent HTTP effect, one SMTP effect and (optionally) an approval.

Nondeterministic on purpose, like a model: ``act`` drafts the email body at random in the same node that
sends it, so every re-execution of ``act`` asks for the email with other arguments (a divergence): exactly
one email must still reach the sink, with the key of the email's position.

Env: AGENTRUN_TEST_HTTP_URL (agentrun_dev.http_provider),
AGENTRUN_SMTP_HOST/PORT/API (agentrun_dev.smtp_sink),
AGENTRUN_TEST_JITTER_MS (random sleep up to N ms inside each node, to shake timings),
AGENTRUN_TEST_NODE_LOG (a file each node execution appends its name to: re-execution counting),
AGENTRUN_TEST_BLOCK_FILE (the first node waits while this file exists),
AGENTRUN_TEST_HOLD_MS (the first node takes at least N ms: a run long enough for a Lease renewal).
Input: {"approval": bool, "fail": bool, "extra_effects": int}.
"""

from __future__ import annotations

import email.message
import json
import operator
import os
import random
import smtplib
import time
import urllib.error
import urllib.request
from typing import Annotated, Any, TypedDict

from langgraph.graph import StateGraph
from langgraph.types import interrupt

from agent_worker import effects
from tests.support.graphs import chain


class State(TypedDict, total=False):
    approval: bool
    fail: bool
    extra_effects: int
    log: Annotated[list[Any], operator.add]


def provider_url() -> str:
    """The HTTP provider: ``AGENTRUN_TEST_HTTP_URL``, or ``TEST_HTTP_URL`` in a worker Pod (an AgentRun's
    ``spec.worker.env`` may not set ``AGENTRUN_*`` variables)."""
    return os.environ.get("AGENTRUN_TEST_HTTP_URL") or os.environ["TEST_HTTP_URL"]


def jitter_ms() -> int:
    """``AGENTRUN_TEST_JITTER_MS`` (or ``TEST_JITTER_MS`` in a worker Pod)."""
    return int(os.environ.get("AGENTRUN_TEST_JITTER_MS") or os.environ.get("TEST_JITTER_MS") or 0)


def _jitter() -> None:
    ms = jitter_ms()
    if ms:
        time.sleep(random.random() * ms / 1000)


def _log(name: str) -> None:
    path = os.environ.get("AGENTRUN_TEST_NODE_LOG")
    if path:
        with open(path, "a") as f:
            f.write(name + "\n")
            f.flush()
            os.fsync(f.fileno())


def _http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        if exc.code >= 400 and exc.code != 404:
            # Who answered, and what: an unexplained 400 here once reached no provider's /stats.
            body = exc.read()[:300]
            exc.msg = f"{exc.msg} [{method} {url}: Server {exc.headers.get('Server')!r}, body {body!r}]"
        raise


def find_charge(key: str, args: dict[str, Any]) -> Any:
    try:
        found = _http("GET", f"{provider_url()}/effects/{key}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return found["response"]


@effects.tool(name="charge", dedupes_by_key=True, lookup=find_charge)
def charge(call: effects.Call, *, customer: str, cents: int) -> Any:
    _jitter()
    return _http(
        "POST",
        f"{os.environ['AGENTRUN_TEST_HTTP_URL']}/effects",
        {"customer": customer, "cents": cents},
        {"Idempotency-Key": call.idempotency_key},
    )


def find_mail(key: str, args: dict[str, Any]) -> Any:
    api = os.environ["AGENTRUN_SMTP_API"]
    found = _http("GET", f"{api}/messages?message_id=%3C{key}%40test.invalid%3E")
    return {"message_id": f"<{key}@test.invalid>", "found": found["count"]} if found["count"] else None


@effects.tool(name="send_email", dedupes_by_key=False, lookup=find_mail, timeout=2)
def send_email(call: effects.Call, *, to: str, subject: str, body: str = "hello") -> Any:
    msg = email.message.EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "agent@test.invalid", to, subject
    msg["Message-ID"] = f"<{call.idempotency_key}@test.invalid>"
    msg.set_content(body)
    _jitter()
    with smtplib.SMTP(
        os.environ["AGENTRUN_SMTP_HOST"], int(os.environ["AGENTRUN_SMTP_PORT"]), timeout=2
    ) as s:
        s.send_message(msg)
    return {"message_id": msg["Message-ID"]}


def prepare(state: State) -> State:
    _log("prepare")
    _jitter()
    time.sleep(int(os.environ.get("AGENTRUN_TEST_HOLD_MS", "0") or 0) / 1000)
    block = os.environ.get("AGENTRUN_TEST_BLOCK_FILE")
    while block and os.path.exists(block):  # tests hold the run inside a step while the file exists
        time.sleep(0.05)
    return {"log": ["prepared"]}


def act(state: State) -> State:
    _log("act")
    receipt = charge(customer="c-1", cents=500)
    for i in range(int(state.get("extra_effects", 0) or 0)):
        charge(customer=f"c-extra-{i}", cents=1)
    draft = f"Dear customer, here is draft {random.getrandbits(64):016x}."  # a model's fresh draft
    mail = send_email(to="user@test.invalid", subject="your receipt", body=draft)
    if state.get("fail"):
        raise ValueError("the graph failed on purpose")
    return {"log": [receipt["id"], mail["message_id"]]}


def approve(state: State) -> State:
    _log("approve")
    if not state.get("approval"):
        return {"log": ["no approval needed"]}
    answer = interrupt({"question": "ship it?"})
    return {"log": [{"approved": answer.get("approved")}]}


def finish(state: State) -> State:
    _log("finish")
    _jitter()
    receipt = charge(customer="c-final", cents=1)
    return {"log": ["done", receipt["id"]]}


def build() -> StateGraph[State]:
    return chain(State, prepare=prepare, act=act, approve=approve, finish=finish)


builder = build()
graph = build().compile()
