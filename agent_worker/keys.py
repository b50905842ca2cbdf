"""Idempotency keys: a pure function of (run id, step, action, canonical args hash, occurrence).

Never uuid4, never time: a re-run of the same step after a crash must derive the very same key, so the
ledger finds the earlier row and the provider (given the key as ``Idempotency-Key``) can dedupe.

``step`` is the LangGraph node plus its ``langgraph_step`` number (plus a task path for ``Send`` fan-out),
stable across replays of the same step. ``occurrence`` counts identical (action, args) calls within one
execution of a step, so two intentionally repeated calls get distinct keys while a replay repeats both.

Format: ``ak-`` + 40 hex of sha256 over the length-prefixed parts. Only ``[a-z0-9-]``: safe as an HTTP
header value and inside an RFC 5322 Message-ID.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

KEY_PREFIX = "ak-"
_KEY_HEX = 40


@dataclasses.dataclass(frozen=True)
class StepId:
    """Where an effect happens: the node, the superstep number, and the task path for pushed tasks."""

    node: str
    step: int
    path: str = ""

    def __str__(self) -> str:
        base = f"{self.node}:{self.step}"
        return f"{base}:{self.path}" if self.path else base


def step_from_metadata(metadata: Mapping[str, Any]) -> StepId:
    """Build the step identity from a RunnableConfig's ``metadata`` (set by LangGraph for every task).

    ``langgraph_checkpoint_ns`` would identify the task too but carries task ids derived from checkpoint ids;
    node + step is what the issue asks for and stays readable. Subgraph nodes get their parent chain (the
    namespace without task ids) so equal node names in different subgraphs differ.
    """
    node = metadata.get("langgraph_node")
    step = metadata.get("langgraph_step")
    if not isinstance(node, str) or not isinstance(step, int):
        raise LookupError("not inside a LangGraph node: no langgraph_node/langgraph_step in the metadata")
    ns = metadata.get("langgraph_checkpoint_ns", "")
    parents = [part.split(":", 1)[0] for part in str(ns).split("|")[:-1] if part]
    name = "/".join([*parents, node])
    path = metadata.get("langgraph_path") or ()
    extra = ""
    # Send() tasks: several tasks of the same node in one step, told apart by their push index.
    if isinstance(path, tuple | list) and path and path[0] == "__pregel_push":
        extra = "push" + ".".join(
            str(p) for p in path[1:] if isinstance(p, int | str) and not isinstance(p, bool)
        )
    return StepId(node=name, step=step, path=extra)


def _part(text: str) -> bytes:
    raw = text.encode("utf-8")
    return str(len(raw)).encode("ascii") + b":" + raw


def derive(run_id: str, step: StepId | str, action: str, args_hash: str, occurrence: int) -> str:
    """The idempotency key. Length-prefixed parts: ("a:b", "c") and ("a", "b:c") cannot collide."""
    if occurrence < 0:
        raise ValueError("occurrence counts from 0")
    material = b"".join(
        _part(p) for p in ("agentrun-key-v1", run_id, str(step), action, args_hash, str(occurrence))
    )
    return KEY_PREFIX + hashlib.sha256(material).hexdigest()[:_KEY_HEX]


def approval_id(run_id: str, interrupt_id: str) -> str:
    """docs/design.md: ``a-`` + first 12 hex of sha256(``run_id:interrupt_id``)."""
    return "a-" + hashlib.sha256(f"{run_id}:{interrupt_id}".encode()).hexdigest()[:12]
