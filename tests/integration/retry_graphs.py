"""Graphs for the "never re-key what may have happened" tests, run by real workers against the real HTTP
provider (``agentrun_dev.http_provider``, URL in BILLING_URL — a worker Pod's spec.worker.env — or
AGENTRUN_TEST_HTTP_URL, set by tests.support.worker_harness). No tests in this module.

``tests.integration.retry_graphs:bill`` — one node, ``bill``, as the input's ``shape`` says:

* ``"once"``: ``charge_once`` (provider dedupes by key, ONE call allowed, 1 s client timeout);
* ``"receipt"``: ``charge_with_receipt`` charges, then fails writing its receipt with an ``OSError`` subclass
  no classifier knows (while the file ``flag`` does not exist) — after the provider committed;
* ``"two"``: ``gift_card`` (its failure is caught: the node goes on without it), then ``charge_twice``
  (provider dedupes by key, two calls allowed).

The provider's faults (queued by the test) decide how the calls end. Every effect is a POST /effects with
``{"customer", "cents"}``: the test sums the cents the provider performed.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any, TypedDict

from langgraph.graph import StateGraph

from agent_worker import effects
from agentrun_core import errors
from tests.support.graphs import chain


class State(TypedDict, total=False):
    shape: str
    flag: str
    charged: dict[str, Any]
    gift: dict[str, Any] | None


class ReceiptDiskFull(OSError):
    """Raised after the charge, as smtplib / ssl errors would be: no classifier knows this type."""


def _post(call: effects.Call, customer: str, cents: int) -> dict[str, Any]:
    req = urllib.request.Request(
        f"{os.environ.get('BILLING_URL') or os.environ['AGENTRUN_TEST_HTTP_URL']}/effects",
        data=json.dumps({"customer": customer, "cents": cents}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": call.idempotency_key},
    )
    with urllib.request.urlopen(req, timeout=1.0) as resp:  # 1 s: the tests' provider answers late
        body: dict[str, Any] = json.loads(resp.read())
    return {"id": body["id"], "cents": cents}


_FAST = effects.RetryPolicy(max_attempts=2, initial_backoff=0.05, jitter=0.0)


@effects.tool(name="charge_once", dedupes_by_key=True, retry=effects.RetryPolicy(max_attempts=1), timeout=10)
def charge_once(call: effects.Call, *, customer: str, cents: int) -> dict[str, Any]:
    return _post(call, customer, cents)


@effects.tool(name="charge_with_receipt", timeout=10)
def charge_with_receipt(call: effects.Call, *, customer: str, cents: int, flag: str) -> dict[str, Any]:
    charged = _post(call, customer, cents)
    if not os.path.exists(flag):
        raise ReceiptDiskFull(28, "No space left on device (writing the receipt)")
    return charged


@effects.tool(name="gift_card", retry=_FAST, timeout=10)
def gift_card(call: effects.Call, *, customer: str, cents: int) -> dict[str, Any]:
    return _post(call, customer, cents)


@effects.tool(name="charge_twice", dedupes_by_key=True, retry=_FAST, timeout=10)
def charge_twice(call: effects.Call, *, customer: str, cents: int) -> dict[str, Any]:
    return _post(call, customer, cents)


def bill(state: State) -> State:
    shape = state.get("shape")
    if shape == "once":
        return {"charged": charge_once(customer="c1", cents=500)}
    if shape == "receipt":
        return {"charged": charge_with_receipt(customer="c1", cents=500, flag=state.get("flag", ""))}
    try:
        gift: dict[str, Any] | None = gift_card(customer="c1", cents=100)
    except errors.EffectFailed:
        gift = None  # the run goes on without the gift card
    return {"gift": gift, "charged": charge_twice(customer="c1", cents=500)}


def _bill() -> StateGraph[State]:
    return chain(State, bill=bill)


bill_graph = _bill()
