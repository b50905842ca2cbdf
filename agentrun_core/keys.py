"""Idempotency keys: a pure function of the effect's POSITION — (run id, step identity, action, occurrence).

Never uuid4, never time, and (since key format v2) never the arguments: a re-run of the same step after a
crash must derive the very same key even when the step drafts its arguments nondeterministically (a model
writes the email body in the same node, ``exit`` durability lost the drafting node's checkpoint, a new image
adds a defaulted parameter). The ledger then finds the earlier row, returns its stored result and records
the divergence (agent_worker.effects); the provider (given the key as ``Idempotency-Key``) can dedupe.

``step`` is the full chain of LangGraph tasks down to the node calling the tool: for each level the node,
its ``langgraph_step`` and, for ``Send``/pushed tasks, the push index — never LangGraph's task ids, which
derive from checkpoint ids and so change when a lost checkpoint is re-made. ``occurrence`` counts calls of
the same action within one execution of that step (agent_worker.positions).

Format v3 (migration 0031): the same material, but the identity names what the checkpoint holds instead of
arrival order: inside a LangChain tool call ``/call#<its index in the model's message>``, inside another
effect's body ``/in:<its key>``, inside ``effects.position(name)`` ``/pos:<name>`` (agent_worker.identity).
Runs admitted under v2 keep v2: their identities (and so their keys) are derived as before.

Format v1 (runs admitted before migration 0003 keep it, ``agentrun_runs.key_version``): the canonical args
hash was part of the key, ``occurrence`` counted identical (action, args) calls, and the step had no parent
steps. Both formats coexist in one ledger; a run never changes format.

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
KEY_VERSION = 3  # the format new runs get; agentrun_runs.key_version says which one a run uses
KEY_VERSIONS = (1, 2, 3)


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
    """Key format v1's step identity from a RunnableConfig's ``metadata`` (kept for v1 runs only: inside a
    subgraph it drops the parent's step and push index, so loops and fan-out into subgraphs collide).

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


def _path_text(path: Any) -> str:
    """A task path as stable text: ints and strs only (LangGraph appends booleans for call bookkeeping)."""
    if isinstance(path, tuple | list):
        return ".".join(t for t in (_path_text(p) for p in path) if t)
    if isinstance(path, bool) or not isinstance(path, int | str):
        return ""
    return str(path)


def step_part(metadata: Mapping[str, Any]) -> str:
    """One level of a v2 step identity: ``node:step`` plus ``:push<path>`` for pushed (``Send``) tasks."""
    node = metadata.get("langgraph_node")
    step = metadata.get("langgraph_step")
    if not isinstance(node, str) or not isinstance(step, int):
        raise LookupError("not inside a LangGraph node: no langgraph_node/langgraph_step in the metadata")
    path = metadata.get("langgraph_path") or ()
    base = f"{node}:{step}"
    if isinstance(path, tuple | list) and path and path[0] == "__pregel_push":
        return f"{base}:push{_path_text(path[1:])}"
    return base


def _part(text: str) -> bytes:
    raw = text.encode("utf-8")
    return str(len(raw)).encode("ascii") + b":" + raw


def derive(
    run_id: str,
    step: StepId | str,
    action: str,
    occurrence: int,
    *,
    version: int = KEY_VERSION,
    args_hash: str | None = None,
    generation: int = 0,
) -> str:
    """The idempotency key. Length-prefixed parts: ("a:b", "c") and ("a", "b:c") cannot collide.

    v2 (default): position only. v1: also the canonical args hash (``args_hash`` required).
    ``generation`` (the run's retry generation, ``spec.retryGeneration``) enters the material only when > 0,
    so every key of a never-retried run is unchanged; a ``failed`` effect retried under generation g gets a
    key the provider has never seen (a provider that caches failures by key would replay the failure)."""
    if occurrence < 0:
        raise ValueError("occurrence counts from 0")
    if generation < 0:
        raise ValueError("generation counts from 0")
    if version == 1:
        if args_hash is None:
            raise ValueError("key format v1 needs the canonical args hash")
        parts: tuple[str, ...] = ("agentrun-key-v1", run_id, str(step), action, args_hash, str(occurrence))
    elif version in (2, 3):  # v3 differs in the step identity it is given (agent_worker.identity)
        parts = (f"agentrun-key-v{version}", run_id, str(step), action, str(occurrence))
    else:
        raise ValueError(f"unknown key format version {version!r} (known: {KEY_VERSIONS})")
    if generation > 0:
        parts = (*parts, f"retry-generation:{generation}")
    material = b"".join(_part(p) for p in parts)
    return KEY_PREFIX + hashlib.sha256(material).hexdigest()[:_KEY_HEX]


def approval_id(run_id: str, interrupt_id: str) -> str:
    """docs/design.md: ``a-`` + first 12 hex of sha256(``run_id:interrupt_id``)."""
    return "a-" + hashlib.sha256(f"{run_id}:{interrupt_id}".encode()).hexdigest()[:12]
