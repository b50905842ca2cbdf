"""Store rows for the operator's pure tests: the fields a test does not name get neutral values.

The operator reads Postgres through the store's row classes (``store.Run``, ``store.Approval``,
``store.Intervention``); a test names only the fields its case is about. Unnamed nullable fields and
timestamps are None, as a row not yet written would have them.
"""

from __future__ import annotations

from typing import Any

from agentrun_core import store
from agentrun_core.api import protocol


def run(status: str = "admitted", **fields: Any) -> store.Run:
    row: dict[str, Any] = {
        "run_id": "run-uid",
        "namespace": "default",
        "name": "run",
        "graph": "pkg.mod:graph",
        "input": {},
        "spec_hash": "",
        "durability": "sync",
        "status": status,
        "lease_epoch": 0,
        "holder": None,
        "current_step": None,
        "read_only": False,
        "approval_policy": {},
        "result": None,
        "error": None,
        "status_reason": None,
        "admitted_at": None,
        "updated_at": None,
        "finished_at": None,
    }
    return store.Run(**(row | fields))


def approval(approval_id: str, status: str = protocol.APPROVAL_PENDING, **fields: Any) -> store.Approval:
    row: dict[str, Any] = {
        "approval_id": approval_id,
        "run_id": "run-uid",
        "interrupt_id": f"interrupt-{approval_id}",
        "prompt": None,
        "requested_at": None,
        "deadline": None,
        "status": status,
        "decided_by": None,
        "decided_at": None,
        "comment": None,
        "payload": None,
        "deadline_action": None,
        "resumed_at": None,
    }
    return store.Approval(**(row | fields))


def intervention(kind: str, by: str = "", **fields: Any) -> store.Intervention:
    row: dict[str, Any] = {
        "id": 1,
        "run_id": "run-uid",
        "kind": kind,
        "effect_key": None,
        "generation": None,
        "by": by,
        "at": None,
        "from_status": None,
        "detail": None,
    }
    return store.Intervention(**(row | fields))
