"""A graph for the schedule-author approval tests, run by real worker Pods against the real HTTP provider
(``agentrun_dev.http_provider``, URL in ``CHARGE_URL``, a worker Pod's spec.worker.env). No tests here.

``tests.integration.author_graphs:gated_charge`` — ``gate`` asks an approval (interrupt), then ``charge``
POSTs one effect (``{"customer", "cents"}``, keyed) when it was approved: the test counts it at the provider.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any, TypedDict

from langgraph.types import interrupt

from agent_worker import effects
from tests.support.graphs import chain


class State(TypedDict, total=False):
    approved: bool
    charged: dict[str, Any]


def _call(req: urllib.request.Request) -> dict[str, Any]:
    with urllib.request.urlopen(req, timeout=10) as resp:
        body: dict[str, Any] = json.loads(resp.read())
    return body


def _find(key: str, args: dict[str, Any]) -> Any:
    try:
        return _call(urllib.request.Request(f"{os.environ['CHARGE_URL']}/effects/{key}"))["response"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


@effects.tool(name="scheduled_charge", dedupes_by_key=True, lookup=_find, timeout=15)
def scheduled_charge(call: effects.Call, *, customer: str, cents: int) -> dict[str, Any]:
    return _call(
        urllib.request.Request(
            f"{os.environ['CHARGE_URL']}/effects",
            data=json.dumps({"customer": customer, "cents": cents}).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": call.idempotency_key},
        )
    )


def gate(state: State) -> State:
    decision = interrupt({"question": "charge the customer 500 cents?"})
    approved = decision.get("approved") if isinstance(decision, dict) else decision
    return {"approved": approved is True}


def charge(state: State) -> State:
    if not state.get("approved"):
        return {}
    return {"charged": scheduled_charge(customer="c-scheduled", cents=500)}


gated_charge = chain(State, gate=gate, charge=charge)
