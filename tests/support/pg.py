"""Rows as the operator and the worker write them, for tests that seed the store directly.

The values tests do not care about have one default here (namespace "ns", graph "m:g", step "n:1", ...);
a test names what it looks at.
"""

from __future__ import annotations

from typing import Any, cast

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver

from agent_worker import graphs
from agentrun_core import store


def admit(
    conn: Any,
    *,
    run_id: str,
    namespace: str = "ns",
    graph: str = "m:g",
    input: Any = None,
    spec_hash: str = "h",
    **more: Any,
) -> store.Run:
    """``store.admit_run`` of a run named like its id (the operator's admission of an AgentRun)."""
    return store.admit_run(
        conn,
        run_id=run_id,
        namespace=namespace,
        name=run_id,
        graph=graph,
        input={} if input is None else input,
        spec_hash=spec_hash,
        **more,
    )


def reserve(
    conn: Any,
    *,
    key: str,
    run_id: str,
    epoch: int = 1,
    step: str = "n:1",
    action: str = "a",
    tool: str = "t",
    occurrence: int = 0,
    args_hash: str = "x",
    args: Any = None,
    **more: Any,
) -> store.Reservation:
    """``store.reserve_effect`` (the worker's reservation of an effect before its call)."""
    return store.reserve_effect(
        conn,
        key=key,
        run_id=run_id,
        epoch=epoch,
        step=step,
        action=action,
        tool=tool,
        occurrence=occurrence,
        args_hash=args_hash,
        args={} if args is None else args,
        **more,
    )


def final_messages(dsn: str, ref: str, thread_id: str) -> list[tuple[str, Any]]:
    """The messages (type, content) of a finished run of the agent graph ``ref``, read from its checkpoints
    as LangGraph reads them; fails the test when the run has nodes left to run."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        graph = graphs.compile_graph(graphs.load(ref), PostgresSaver(cast(Any, conn)), ref=ref)
        state = graph.get_state({"configurable": {"thread_id": thread_id}})
    assert state.next == (), (thread_id, state.next)
    return [(m.type, m.content) for m in state.values["messages"]]
