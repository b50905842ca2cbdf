"""Where an attempt starts: the input the graph is streamed from, read off the run's head checkpoint.

Rule: no checkpoint → invoke with the admitted input (a crash before the first checkpoint just starts again;
never ``EmptyInputError``); a pending interrupt with a decided approval → ``Command(resume=payload)``, still
pending → park; no task at the head → finished; otherwise ``None`` (continue from the head checkpoint). "No
task", never LangGraph's empty ``next``, which also describes a head whose tasks all saved their writes before
a kill prevented the step's checkpoint: that run still has steps to go. A fork's first worker applies the
human's edits of the copied checkpoint first, once.

An ``exit`` save of a graph with a ``DeltaChannel`` and no checkpoint before it first writes a placeholder
checkpoint (empty, step -2, no parent) and the channel's writes on it, then the real one. A kill between the
two leaves the placeholder as the head: it holds no state and no task, so it is "no checkpoint" (start from
the admitted input, as LangGraph snapshots the channel over the stale writes), never "finished".
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agent_worker import checkpointer as checkpointer_mod
from agent_worker import forking
from agentrun_core import errors, faults, keys, store
from agentrun_core.api import status as api_status

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Park:
    reason: str


@dataclasses.dataclass
class Done:
    values: Any


@dataclasses.dataclass
class Failed:
    error: str
    reason: str


# Stream from this input; the approval id being resumed, if any (marked resumed at the next checkpoint).
Start = tuple[Any, str | None]


def single_interrupt(interrupts: Any) -> Any:
    """The one pending interrupt. Several at once (parallel branches) are refused: each approval is asked and
    decided alone, so a run waits on one gate at a time."""
    if len(interrupts) != 1:
        raise errors.TooManyInterrupts(
            f"the graph stopped with {len(interrupts)} interrupts pending at once "
            f"({', '.join(str(i.id) for i in interrupts)}); agentrun asks for one approval at a time: "
            "interrupt in sequence, not in parallel branches"
        )
    return interrupts[0]


def exit_placeholder(head: Any) -> bool:
    """Whether ``head`` is LangGraph's placeholder for an ``exit`` save's DeltaChannel writes (its
    ``_put_exit_delta_writes`` stub): an empty checkpoint of step -2 with no parent."""
    checkpoint = head.checkpoint
    return bool(
        head.metadata.get("step") == -2
        and head.parent_config is None
        and not checkpoint.get("channel_versions")
        and not checkpoint.get("channel_values")
    )


def start_input(
    pool: store.Conn,
    run: store.Run,
    compiled: Any,
    checkpointer: checkpointer_mod.FencedSaver,
    config: RunnableConfig,
) -> Park | Done | Failed | Start:
    run_id = run.run_id
    head = checkpointer.get_tuple(config)
    if head is None or exit_placeholder(head):
        return (run.input, None)
    edits = forking.pending_edits(pool, run)
    if edits is not None:  # a fork's first worker: the human's edits of the copied checkpoint, once
        try:
            forking.apply_edits(compiled, config, run, edits)
        except forking.ForkEditError as exc:
            return Failed(f"fork edit refused: {exc}", api_status.FORK_EDIT_REFUSED)
        logger.info("fork %s: applied edits %s", run_id, sorted(edits))
    state = compiled.get_state(config)
    if state.interrupts:
        interrupt = single_interrupt(state.interrupts)
        approval = store.get_approval(pool, run_id=run_id, approval_id=keys.approval_id(run_id, interrupt.id))
        if approval is None or approval.status == "pending":
            return Park("still waiting for the approval")
        faults.hit("after_resume_read")
        logger.info("resuming %s with approval %s (%s)", run_id, approval.approval_id, approval.status)
        # LangGraph's id map: the payload answers exactly this interrupt, never another one.
        return (Command(resume={interrupt.id: approval.payload}), approval.approval_id)
    if not state.tasks:
        return Done(state.values)  # finished before a crash prevented recording it
    # Not ``state.next``: it leaves out tasks whose writes are saved. A kill after the last task of a step
    # saved its writes and before the step's checkpoint was (``async``, or the gap inside ``sync``) leaves
    # a head whose every task is done and ``next == ()``, yet the run is not: resuming with ``None``
    # applies those writes, saves the step and goes on along their edges.
    return (None, None)
