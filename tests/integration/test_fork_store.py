"""Forks in Postgres (agentrun_core/store/forks.py, sql/fork.sql): the source is found only in the fork's own
namespace, and the copied checkpoint is the source's state at that point, read back by LangGraph itself from
the fork's thread. Real Postgres, real LangGraph checkpoints (PostgresSaver on the migrated test database)."""

from __future__ import annotations

from typing import Any, TypedDict

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.types import interrupt

from agentrun_core import store
from tests.support.graphs import chain

pytestmark = pytest.mark.postgres


class State(TypedDict, total=False):
    draft: dict[str, Any]
    decision: Any


def _graph() -> Any:
    return chain(
        State,
        draft=lambda s: {"draft": {"to": "ada@example.com", "body": "original"}},
        review=lambda s: {"decision": interrupt({"body": s["draft"]["body"]})},
    )


def _admit(conn: psycopg.Connection[Any], run_id: str, namespace: str, name: str) -> None:
    store.admit_run(conn, run_id=run_id, namespace=namespace, name=name, graph="g:g", input={}, spec_hash="t")


def _source(conn: psycopg.Connection[Any], run_id: str = "src") -> tuple[Any, str]:
    """A source run parked at its interrupt: (graph, the checkpoint after draft, where review waits)."""
    _admit(conn, run_id, "team-a", "src")
    compiled = _graph().compile(checkpointer=PostgresSaver(conn))
    config: Any = {"configurable": {"thread_id": run_id}}
    compiled.invoke({}, config)
    history = list(compiled.get_state_history(config))
    after_draft = history[0]  # review's interrupt is a pending write of this checkpoint
    assert after_draft.next == ("review",) and after_draft.tasks[0].interrupts
    conn.execute(  # what the worker records after each step: the step event names its checkpoint
        "INSERT INTO agentrun_step_events (run_id, attempt, step, checkpoint_id, started_at,"
        " duration_seconds) VALUES (%s, 1, 'draft:1', %s, now(), 0.1)",
        (run_id, after_draft.config["configurable"]["checkpoint_id"]),
    )
    return compiled, after_draft.config["configurable"]["checkpoint_id"]


def _fork(conn: psycopg.Connection[Any], source: store.ForkSource, run_id: str, namespace: str) -> store.Run:
    assert source.run_id is not None and source.checkpoint_id is not None, source
    fork_of = {"run_id": source.run_id, "name": "src", "checkpoint_id": source.checkpoint_id, "step": None}
    return store.admit_fork(
        conn,
        run_id=run_id,
        namespace=namespace,
        name=run_id,
        graph="g:g",
        input={},
        spec_hash="t",
        durability="sync",
        approval_policy={},
        retry_generation=0,
        fork_of=fork_of,
    )


def test_the_fork_starts_from_the_sources_state_at_that_step(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        compiled, after_draft = _source(conn)
        found = store.find_fork_source(
            conn, namespace="team-a", name="src", step="draft", set_keys=("draft",)
        )
        assert (found.run_id, found.checkpoint_id, found.problem) == ("src", after_draft, None)
        assert "draft" in found.channels and found.steps == ("draft",)
        run = _fork(conn, found, "fork-1", "team-a")
        assert run.head_checkpoint_id == after_draft and run.fork_of is not None
        again = _fork(conn, found, "fork-1", "team-a")  # admitting again copies nothing, changes nothing
        assert again.admitted_at == run.admitted_at
        fork_config: Any = {"configurable": {"thread_id": "fork-1"}}
        state = compiled.get_state(fork_config)
        assert state.values == {"draft": {"to": "ada@example.com", "body": "original"}}
        assert state.next == ("review",) and state.tasks[0].interrupts  # its pending writes came along
        # LangGraph's own fork of that checkpoint (what the fork's worker does with --set), then on to review.
        compiled.update_state(
            fork_config, {"draft": {"to": "ada@example.com", "body": "edited"}}, as_node="draft"
        )
        compiled.invoke(None, fork_config)
        assert compiled.get_state(fork_config).tasks[0].interrupts[0].value == {"body": "edited"}
        # The source is untouched, and lists its fork.
        assert (
            compiled.get_state({"configurable": {"thread_id": "src"}}).values["draft"]["body"] == "original"
        )
        assert [f["name"] for f in store.list_forks(conn, "src")] == ["fork-1"]


def test_a_checkpoint_with_a_pending_interrupt_is_copied_with_it(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        compiled, at_review = _source(conn)
        found = store.find_fork_source(conn, namespace="team-a", name="src", checkpoint_id=at_review)
        _fork(conn, found, "fork-2", "team-a")
        state = compiled.get_state({"configurable": {"thread_id": "fork-2"}})
        assert state.tasks[0].interrupts[0].value == {"body": "original"}  # asked again, as the fork's own


def test_another_namespaces_run_is_never_a_source(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _, after_draft = _source(conn)
        _admit(conn, "other", "team-b", "mine")
        for kwargs in (
            {"name": "src"},
            {"name": "src", "run_uid": "src"},
            {"name": "mine", "run_uid": "src"},
        ):
            found = store.find_fork_source(conn, namespace="team-b", checkpoint_id=after_draft, **kwargs)
            assert found.checkpoint_id is None and "was admitted in namespace team-b" in (found.problem or "")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"step": "nosuch"}, "run src has no checkpoint after a step 'nosuch' (steps it completed: draft)"),
        ({"checkpoint_id": "1f0-nope"}, "'1f0-nope' is not a checkpoint of run src"),
        ({"step": "draft", "set_keys": ("email",)}, "cannot set 'email': not in the state at checkpoint"),
    ],
)
def test_what_is_not_there_is_refused_in_words(pg_dsn: str, kwargs: dict[str, Any], message: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _source(conn)
        found = store.find_fork_source(conn, namespace="team-a", name="src", **kwargs)
        assert message in (found.problem or ""), found
