"""The Pod watch handler keeps a run's Pod's final state from its DELETED event (``memory.pod_deleted``).

Called with the keyword arguments kopf gives ``@kopf.on.event`` handlers (``type``, ``body``, ``labels``):
only DELETED events are kept, only for runs this replica reconciles (a memory is never made here), and what
is kept says why the Pod ended (tests/integration/test_operator_pod_end.py: how the reconcile uses it).
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from agent_operator.observe import memory as memory_
from agent_operator.serve import handlers
from agentrun_core.api import protocol


def _final_body(uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "r-1",
            "namespace": "ns",
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "labels": {protocol.LABEL_RUN: "r", protocol.LABEL_ATTEMPT: "1", protocol.LABEL_RUN_UID: uid},
        },
        "status": {
            "phase": "Failed",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}],
            "containerStatuses": [
                {"name": "worker", "state": {"terminated": {"exitCode": 11, "reason": "Error"}}}
            ],
        },
    }


def _event(event_type: str | None, uid: str) -> None:
    body = _final_body(uid)
    labels = body["metadata"]["labels"]
    # kopf types the decorated handler as its WatchingFn (every kwarg it passes, ``type`` among them); the
    # handler itself takes only these, the rest go to ``**_``.
    handler: Any = handlers.pod_changed
    raw: Any = body
    asyncio.run(handler(namespace="ns", labels=labels, type=event_type, body=kopf.Body(raw)))


def test_deleted_event_keeps_the_final_state_for_its_run_only() -> None:
    memory = memory_.RunMemory()
    handlers.STATE.memories["uid-1"] = memory
    try:
        _event("MODIFIED", "uid-1")
        assert memory.final_pods == {}  # the index holds a Pod that still exists
        _event("DELETED", "uid-1")
        final = memory.final_pods["r-1"]
        assert final.disruption == "EvictionByEvictionAPI" and final.terminated and final.exit_code == 11
        _event("DELETED", "uid-2")  # a run this replica does not reconcile (or already deleted)
        assert "uid-2" not in handlers.STATE.memories
    finally:
        handlers.STATE.memories.pop("uid-1", None)
