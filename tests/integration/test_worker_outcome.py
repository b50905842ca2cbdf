"""A finished run's result is the state its stream ended with — the same values LangGraph reads back from
Postgres — in every durability mode, with ``Send`` fan-out and a subgraph, and the worker does not read the
state back to learn it (two round trips after the last step, ``agent_worker/runner.py``). A stream that ends
with work left (an interrupt) still reads it back, and parks.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import psycopg_pool
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.pregel import Pregel
from langgraph.types import Send, interrupt

from agent_worker import drive, runner, steps
from agent_worker import settings as settings_mod
from agentrun_core import errors, results, store
from agentrun_core.api import protocol
from tests.support import worker_harness
from tests.support.graphs import chain

pytestmark = pytest.mark.postgres


class State(TypedDict, total=False):
    items: Annotated[list[str], operator.add]
    rounds: int
    answer: Any


def _inner() -> Any:
    g = StateGraph(State)
    g.add_node("tag", lambda s: {"items": [f"sub{s.get('rounds', 0)}"]})
    g.add_edge(START, "tag")
    return g.compile()


def builder(park: bool = False) -> StateGraph[State]:
    def plan(state: State) -> State:
        return {"rounds": state.get("rounds", 0) + 1}

    def fan(state: State) -> list[Send]:
        return [Send("work", {"items": [], "rounds": i}) for i in range(3)]

    def work(state: State) -> State:
        return {"items": [f"w{state.get('rounds')}"]}

    def gate(state: State) -> State:
        return {"answer": interrupt({"ask": "ok?"}) if park else "auto"}

    g = StateGraph(State)
    g.add_node("plan", plan)
    g.add_node("work", work)
    g.add_node("sub", _inner())
    g.add_node("gate", gate)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", fan, ["work"])
    g.add_edge("work", "sub")
    g.add_conditional_edges("sub", lambda s: "plan" if s.get("rounds", 0) < 2 else "gate", ["plan", "gate"])
    g.add_edge("gate", END)
    return g


def parking() -> StateGraph[State]:
    return builder(park=True)


def talkative() -> StateGraph[State]:
    """A final state larger than the result kept whole (``agentrun_core.results.RESULT_LIMIT_BYTES``)."""
    return chain(State, say=lambda s: {"items": [f"line {i} " + "x" * 60 for i in range(200)]})


@pytest.fixture
def get_state_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    calls: list[str] = []
    original = Pregel.get_state

    def counted(self: Any, config: Any, **kwargs: Any) -> Any:
        calls.append(str(config))
        return original(self, config, **kwargs)

    monkeypatch.setattr(Pregel, "get_state", counted)
    yield calls


def _attempt(dsn: str, run_id: str) -> int:
    return runner.run(
        settings_mod.WorkerSettings(run_id=run_id, dsn=dsn, pod_name=f"{run_id}-p1", lease_mode="none")
    )


def _stored_values(dsn: str, run_id: str, graph: StateGraph[State]) -> Any:
    with psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
        compiled = graph.compile(checkpointer=PostgresSaver(pool))  # type: ignore[arg-type]
        return compiled.get_state({"configurable": {"thread_id": run_id}}).values


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_the_result_is_the_streamed_final_state_without_reading_it_back(
    pg_dsn: str, durability: str, get_state_calls: list[str]
) -> None:
    run_id = f"outcome-{durability}"
    worker_harness.admit(pg_dsn, run_id, graph=f"{__name__}:builder", durability=durability)
    assert _attempt(pg_dsn, run_id) == protocol.EXIT_SUCCEEDED
    assert get_state_calls == []
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        run = store.get_run(conn, run_id)
    assert run is not None and run.status == "succeeded"
    stored = _stored_values(pg_dsn, run_id, builder())
    assert run.result == stored
    assert {"w0", "w1", "w2", "sub1", "sub2"} <= set(stored["items"])
    assert stored["answer"] == "auto" and stored["rounds"] == 2
    # The steps' checkpoint ids are checkpoints that exist (exit mode writes only the last one).
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        events = store.list_step_events(conn, run_id)
        written = {
            r[0]
            for r in conn.execute(
                "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = ''", (run_id,)
            )
        }
    ids = [e.checkpoint_id for e in events]
    assert len(events) >= 6 and {i for i in ids if i is not None} <= written
    if durability == "exit":
        assert ids[:-1] == [None] * (len(ids) - 1) and ids[-1] in written
    else:
        assert None not in ids


@pytest.mark.parametrize("durability", ["sync", "exit"])
def test_a_large_result_is_kept_as_a_summary_and_whole_in_the_last_checkpoint(
    pg_dsn: str, durability: str
) -> None:
    run_id = f"outcome-large-{durability}"
    worker_harness.admit(pg_dsn, run_id, graph=f"{__name__}:talkative", durability=durability)
    assert _attempt(pg_dsn, run_id) == protocol.EXIT_SUCCEEDED
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        run = store.get_run(conn, run_id)
        head = store.get_checkpoint_head(conn, run_id=run_id)
    assert run is not None and run.status == "succeeded"
    stored = _stored_values(pg_dsn, run_id, talkative())
    whole = json.dumps(stored)
    assert len(whole) > results.RESULT_LIMIT_BYTES
    assert run.result == {"truncated": True, "bytes": len(whole), "preview": whole[: results.PREVIEW_CHARS]}
    assert run.result == results.summarise(stored)  # what the status shows, from either
    with psycopg_pool.ConnectionPool(pg_dsn, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
        last = PostgresSaver(pool).get_tuple(  # type: ignore[arg-type]
            {"configurable": {"thread_id": run_id, "checkpoint_ns": "", "checkpoint_id": head}}
        )
    assert last is not None and last.checkpoint["channel_values"]["items"] == stored["items"]


def test_a_stream_ending_with_work_left_reads_the_state_and_parks(
    pg_dsn: str, get_state_calls: list[str]
) -> None:
    worker_harness.admit(pg_dsn, "outcome-park", graph=f"{__name__}:parking")
    assert _attempt(pg_dsn, "outcome-park") == protocol.EXIT_PARKED
    assert get_state_calls  # the interrupt is read from the saved state
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        run = store.get_run(conn, "outcome-park")
        approvals = store.list_approvals(conn, "outcome-park")
    assert run is not None and run.status == "parked"
    assert [a.prompt for a in approvals] == [{"ask": "ok?"}]


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_succeeded_attempts_last_step_events_ride_in_its_outcome_statement(
    pg_dsn: str, durability: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The events and current step still unrecorded when the stream ends go in the outcome's statement
    (store.finish_attempt), not a statement of their own after the last step: every step is recorded, the
    run row shows the last step, and the recorder never wrote a final batch itself."""
    finals: list[bool] = []
    original = steps.StepRecorder._write

    def counted(self: steps.StepRecorder, *, final: bool) -> bool:
        finals.append(final)
        return original(self, final=final)

    monkeypatch.setattr(steps.StepRecorder, "_write", counted)
    run_id = f"outcome-last-events-{durability}"
    worker_harness.admit(pg_dsn, run_id, graph=f"{__name__}:builder", durability=durability)
    assert _attempt(pg_dsn, run_id) == protocol.EXIT_SUCCEEDED
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        run = store.get_run(conn, run_id)
        events = store.list_step_events(conn, run_id)
    assert run is not None and run.status == "succeeded" and run.current_step == "gate"
    assert True not in finals  # the thread may have written a batch beside a slow step; never the last
    assert [e.step.rpartition(":")[0] for e in events][:2] == ["plan", "work"]
    assert events[-1].step.startswith("gate:") and len({e.step for e in events}) == len(events) >= 6


def test_an_attempt_stopped_after_its_stream_finished_still_records_its_last_step_events(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its Lease lost between the stream's end and the outcome: no outcome is written, so the events handed
    to it are recorded on their own (history, as a fenced attempt's are)."""
    original = drive.Stream.run

    def then_fenced(self: drive.Stream, *args: Any, **kwargs: Any) -> bool:
        drained = original(self, *args, **kwargs)
        self.ctx.set_stop(errors.Fenced("lease lost: taken over right after the stream ended"))
        return drained

    monkeypatch.setattr(drive.Stream, "run", then_fenced)
    worker_harness.admit(pg_dsn, "outcome-stopped", graph=f"{__name__}:builder")
    assert _attempt(pg_dsn, "outcome-stopped") == protocol.EXIT_FENCED
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        run = store.get_run(conn, "outcome-stopped")
        events = store.list_step_events(conn, "outcome-stopped")
    assert run is not None and run.status != "succeeded"
    assert len(events) >= 6 and events[-1].step.startswith("gate:")
