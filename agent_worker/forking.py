"""The first worker of a fork applies the human's edits (``fork_of.set``) to the copied checkpoint. Once.

Rule: the operator copied the source checkpoint into this run's thread and made it the head at admission
(agentrun_core/store/forks.py). The edits are applied with LangGraph's ``update_state`` — the time-travel
"fork" of a checkpoint: a new checkpoint whose parent is the copied one, written through the fenced saver,
with the graph's own reducers and as the node the fork was taken after (``--step``) so the graph continues
with that node's successors. They are applied only while the head is still the copied checkpoint: the
write moves the head, so a later attempt (a crash after the write) never applies them twice.

A path that does not fit the state (``draft.body`` where ``draft`` is not a mapping) fails the fork with
``ForkEditRefused`` and the path in the message; nothing was written.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from agentrun_core import store


class ForkEditError(ValueError):
    """An edit that does not fit the state at the fork's checkpoint."""


def edited_values(values: Mapping[str, Any], edits: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level state keys to write: each edited key's value with its dotted paths replaced. Pure."""
    out: dict[str, Any] = {}
    for path in sorted(edits):
        top, *rest = path.split(".")
        if not rest:
            out[top] = edits[path]
            continue
        if top not in out:
            if top not in values:
                raise ForkEditError(f"{path}: the state has no {top!r}")
            out[top] = copy.deepcopy(values[top])
        node = out[top]
        for i, part in enumerate(rest[:-1]):
            if not isinstance(node, dict):
                where = ".".join([top, *rest[:i]])
                raise ForkEditError(f"{path}: {where} is a {type(node).__name__}, not a mapping")
            if part not in node:
                raise ForkEditError(f"{path}: {'.'.join([top, *rest[: i + 1]])} does not exist")
            node = node[part]
        if not isinstance(node, dict):
            where = ".".join([top, *rest[:-1]])
            raise ForkEditError(f"{path}: {where} is a {type(node).__name__}, not a mapping")
        node[rest[-1]] = edits[path]
    return out


def pending_edits(pool: store.Conn, run: store.Run) -> Mapping[str, Any] | None:
    """The fork's edits when they are still to be applied (the head is the copied checkpoint), else None."""
    fork = run.fork_of or {}
    edits = fork.get("set") or {}
    if not edits:
        return None
    head = store.get_checkpoint_head(pool, run_id=run.run_id)
    return edits if head == fork.get("checkpoint_id") else None


def apply_edits(compiled: Any, config: RunnableConfig, run: store.Run, edits: Mapping[str, Any]) -> None:
    """``update_state`` with the edited values, as the node the fork was taken after (when known)."""
    state = compiled.get_state(config)
    values = edited_values(state.values or {}, edits)
    step = (run.fork_of or {}).get("step")
    compiled.update_state(config, values, as_node=step or None)
