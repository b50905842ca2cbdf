"""Rows as the operator and the worker write them, for tests that seed the store directly.

The values tests do not care about have one default here (namespace "ns", graph "m:g", step "n:1", ...);
a test names what it looks at.
"""

from __future__ import annotations

import datetime
from typing import Any, cast

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver

from agent_worker import graphs
from agentrun_core import store
from tests.support.graphs import chain


def admit(conn: Any, *, run_id: str, **given: Any) -> store.Run:
    """``store.admit_run`` of a run named like its id (the operator's admission of an AgentRun); fields not
    ``given`` get the defaults tests do not look at."""
    fields = {"namespace": "ns", "graph": "m:g", "input": {}, "spec_hash": "h", **given}
    return store.admit_run(conn, run_id=run_id, name=run_id, **fields)


def reserve(conn: Any, *, key: str, run_id: str, **given: Any) -> store.Reservation:
    """``store.reserve_effect`` (the worker's reservation of an effect before its call), with defaults."""
    fields = {
        "epoch": 1,
        "step": "n:1",
        "action": "a",
        "tool": "t",
        "occurrence": 0,
        "args_hash": "x",
        "args": {},
    }
    return store.reserve_effect(conn, key=key, run_id=run_id, **{**fields, **given})


def run_row(dsn: str, run_id: str) -> store.Run:
    """The run's row, which must exist."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        run = store.get_run(conn, run_id)
    assert run is not None, run_id
    return run


def final_messages(dsn: str, ref: str, thread_id: str) -> list[tuple[str, Any]]:
    """The messages (type, content) of a finished run of the agent graph ``ref``, read from its checkpoints
    as LangGraph reads them; fails the test when the run has nodes left to run."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        graph = graphs.compile_graph(graphs.load(ref), PostgresSaver(cast(Any, conn)), ref=ref)
        state = graph.get_state({"configurable": {"thread_id": thread_id}})
    assert state.next == (), (thread_id, state.next)
    return [(m.type, m.content) for m in state.values["messages"]]


def seed_run_rows(
    admin: psycopg.Connection[Any], dsn: str, *, namespace: str, run_id: str, **fields: Any
) -> None:
    """A run of ``namespace`` with a row in each table the operator and its worker write (run, attempt,
    effect, heartbeat, step event) and a LangGraph thread in the checkpoint tables, written by ``admin``;
    ``fields``: of its run row (``input``, ...). For the tests of what one tenant's role may see."""
    admit(admin, run_id=run_id, namespace=namespace, approval_policy={"timeoutSeconds": 3600}, **fields)
    store.claim_run(admin, run_id=run_id, epoch=1, holder="p")
    store.record_attempt_start(admin, run_id=run_id, attempt=1, pod="p", epoch=1)
    reserve(admin, key=f"k-{run_id}", run_id=run_id, step="s:1")
    store.heartbeat(admin, run_id=run_id, key="worker", details={})
    store.record_step_event(
        admin,
        run_id=run_id,
        attempt=1,
        step="s:1",
        checkpoint_id=None,
        started_at=datetime.datetime.now(datetime.UTC),
        duration_seconds=0.1,
    )
    with psycopg.connect(dsn, autocommit=True) as conn:  # LangGraph's own tables, one thread per run
        graph = chain(dict, one=lambda s: {"x": 1}).compile(checkpointer=PostgresSaver(cast(Any, conn)))
        graph.invoke({}, {"configurable": {"thread_id": run_id}})
