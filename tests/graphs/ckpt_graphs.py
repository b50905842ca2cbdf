"""Graphs for the checkpoint-fencing and infra-loss tests (tests/integration/test_checkpoint_fencing.py).

``heartbeat_graph``: ``charge`` (HTTP effect) → ``beat`` (heartbeats from inside the node every 0.1 s while
AGENTRUN_TEST_BEAT_FILE exists, else for AGENTRUN_TEST_BEAT_SECONDS) → ``mail`` (SMTP effect). The provider
env of tests/graphs/effect_graph.py applies; AGENTRUN_TEST_NODE_LOG records node executions.
"""

from __future__ import annotations

import os
import time

from langgraph.graph import StateGraph

from agent_worker import effects
from tests.graphs import effect_graph
from tests.support.graphs import chain


def charge(state: effect_graph.State) -> effect_graph.State:
    effect_graph._log("charge")
    receipt = effect_graph.charge(customer="c-beat", cents=100)
    return {"log": [receipt["id"]]}


def beat(state: effect_graph.State) -> effect_graph.State:
    effect_graph._log("beat")
    hold = os.environ.get("AGENTRUN_TEST_BEAT_FILE")
    end = time.monotonic() + float(os.environ.get("AGENTRUN_TEST_BEAT_SECONDS", "0.5"))
    n = 0
    while (hold and os.path.exists(hold)) or (not hold and time.monotonic() < end):
        effects.heartbeat({"n": n})  # a Postgres write from inside the node (coalesced to ~1/s)
        n += 1
        time.sleep(0.1)
    return {"log": [f"beat {n}"]}


def mail(state: effect_graph.State) -> effect_graph.State:
    effect_graph._log("mail")
    sent = effect_graph.send_email(to="user@test.invalid", subject="after the beats")
    return {"log": [sent["message_id"]]}


def _heartbeat() -> StateGraph[effect_graph.State]:
    return chain(effect_graph.State, charge=charge, beat=beat, mail=mail)


heartbeat_graph = _heartbeat()
