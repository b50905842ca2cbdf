"""The graph of the upgrade and compatibility tests (tests/integration/test_upgrade.py and
test_worker_compat.py): one HTTP charge, an optional approval, one email, and an optional hold before
them. It uses only what every release since v0.1.0 offers (``effects.tool``, ``interrupt``), so the same
module runs under the old release's workers and the new ones, as a user's graph package would in both images.

Env (spec.worker.env; names outside AGENTRUN_*, which the CRD keeps for the operator): UPGRADE_HTTP_URL
(agentrun_dev.http_provider), UPGRADE_SMTP_HOST / UPGRADE_SMTP_PORT / UPGRADE_SMTP_API
(agentrun_dev.smtp_sink).
Input: {"customer": str, "approval": bool, "hold": path} — ``hold`` keeps the run inside its first step while
that file exists (an active run across the upgrade).
"""

from __future__ import annotations

import email.message
import json
import os
import smtplib
import time
import urllib.error
import urllib.request
from typing import Any, TypedDict

from langgraph.graph import StateGraph
from langgraph.types import interrupt

from agent_worker import effects
from tests.support.graphs import chain, unless_404


class State(TypedDict, total=False):
    customer: str
    approval: bool
    hold: str
    charged: Any
    decision: Any
    mailed: Any


def _http(method: str, url: str, body: Any = None, key: str = "") -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read() or b"null")


def find_charge(key: str, args: dict[str, Any]) -> Any:
    return unless_404(lambda: _http("GET", f"{os.environ['UPGRADE_HTTP_URL']}/effects/{key}")["response"])


@effects.tool(name="charge", dedupes_by_key=True, lookup=find_charge)
def charge(call: effects.Call, *, customer: str, cents: int) -> Any:
    url = f"{os.environ['UPGRADE_HTTP_URL']}/effects"
    return _http("POST", url, {"customer": customer, "cents": cents}, call.idempotency_key)


def find_mail(key: str, args: dict[str, Any]) -> Any:
    found = _http("GET", f"{os.environ['UPGRADE_SMTP_API']}/messages?message_id=%3C{key}%40test.invalid%3E")
    return {"message_id": f"<{key}@test.invalid>"} if found["count"] else None


@effects.tool(name="send_email", dedupes_by_key=False, lookup=find_mail, timeout=5)
def send_email(call: effects.Call, *, to: str, subject: str) -> Any:
    msg = email.message.EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "agent@test.invalid", to, subject
    msg["Message-ID"] = f"<{call.idempotency_key}@test.invalid>"
    msg.set_content("your refund is on its way")
    with smtplib.SMTP(os.environ["UPGRADE_SMTP_HOST"], int(os.environ["UPGRADE_SMTP_PORT"]), timeout=5) as s:
        s.send_message(msg)
    return {"message_id": msg["Message-ID"]}


def hold(state: State) -> State:
    while state.get("hold") and os.path.exists(state["hold"]):
        time.sleep(0.1)
    return {}


def charge_step(state: State) -> State:
    return {"charged": charge(customer=state.get("customer", "c"), cents=500)}


def gate(state: State) -> State:
    if not state.get("approval"):
        return {"decision": None}
    return {"decision": interrupt({"question": f"refund {state.get('customer')}?"})}


def mail(state: State) -> State:
    return {"mailed": send_email(to=f"{state.get('customer', 'c')}@test.invalid", subject="refund")}


def build() -> StateGraph[State]:
    return chain(State, hold=hold, charge=charge_step, gate=gate, mail=mail)


graph = build()
