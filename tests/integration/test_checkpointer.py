"""The fenced saver on real Postgres: refused zombie writes, the head checkpoint, subgraph namespaces, timing.

These drive ``FencedSaver`` in-process (the worker-process cases are in test_checkpoint_fencing.py).
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import psycopg_pool
import pytest
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph

from agent_worker import checkpointer, errors, store

pytestmark = [pytest.mark.postgres]

RUN = "run-ckpt"


@pytest.fixture
def pool(pg_dsn: str) -> Iterator[psycopg_pool.ConnectionPool[Any]]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        store.admit_run(conn, run_id=RUN, namespace="ns", name=RUN, graph="g:g", input={}, spec_hash="h")
    p: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        pg_dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True
    )
    try:
        yield p
    finally:
        p.close()


def _claim(pool: psycopg_pool.ConnectionPool[Any], epoch: int) -> None:
    store.claim_run(pool, run_id=RUN, epoch=epoch, holder=f"pod-{epoch}")


def _checkpoint(checkpoint_id: str, value: str) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = checkpoint_id
    cp["channel_values"] = {"value": value}
    cp["channel_versions"] = {"value": 1}
    return cp


def _uuid6_at(seconds: int) -> str:
    """A uuid6-shaped id whose time field is ``seconds``: sorts by that wall-clock value, like LangGraph's."""
    ticks = seconds * 10_000_000
    hi = (ticks >> 12) & 0xFFFF_FFFF_FFFF
    lo = ticks & 0x0FFF
    return str(uuid.UUID(int=(hi << 80) | (0x6 << 76) | (lo << 64) | (0x8 << 60) | 1))


def _config(ns: str = "", checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": RUN, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _count(pool: psycopg_pool.ConnectionPool[Any], table: str) -> int:
    with pool.connection() as conn:
        row = conn.execute(f"SELECT count(*) FROM {table} WHERE thread_id = %s", (RUN,)).fetchone()
    return int(row[0]) if row else 0


def test_deposed_saver_cannot_write_a_checkpoint_or_writes(pool: psycopg_pool.ConnectionPool[Any]) -> None:
    _claim(pool, 1)
    refused: list[errors.ControlSignal] = []
    zombie = checkpointer.FencedSaver(pool, run_id=RUN, epoch=1, on_refused=refused.append)
    first = _uuid6_at(1_000)
    zombie.put(_config(), _checkpoint(first, "zombie-1"), {}, {"value": 1})
    assert store.get_checkpoint_head(pool, run_id=RUN) == first
    _claim(pool, 2)  # a new attempt took the Lease
    with pytest.raises(errors.Fenced, match="epoch 1 is not current"):
        zombie.put(_config(checkpoint_id=first), _checkpoint(_uuid6_at(2_000), "zombie-2"), {}, {"value": 2})
    with pytest.raises(errors.Fenced):
        zombie.put_writes(_config(checkpoint_id=first), [("value", "late")], "task-1")
    with pytest.raises(errors.Fenced):
        zombie.put(_config("sub:1"), _checkpoint(_uuid6_at(3_000), "zombie-sub"), {}, {"value": 1})
    assert [type(e) for e in refused] == [errors.Fenced] * 3  # reported at once, not only raised
    assert _count(pool, "checkpoints") == 1 and _count(pool, "checkpoint_writes") == 0
    assert _count(pool, "checkpoint_blobs") == 0  # the blob upsert rolled back with the refused put
    assert store.get_checkpoint_head(pool, run_id=RUN) == first
    owner = checkpointer.FencedSaver(pool, run_id=RUN, epoch=2)
    owner.put_writes(_config(checkpoint_id=first), [("value", "mine")], "task-1")
    assert _count(pool, "checkpoint_writes") == 1


def test_resume_follows_the_head_not_the_newest_id(pool: psycopg_pool.ConnectionPool[Any]) -> None:
    _claim(pool, 1)
    ahead = checkpointer.FencedSaver(pool, run_id=RUN, epoch=1)
    late_id = _uuid6_at(5_000)  # written by an attempt whose clock ran ahead
    ahead.put(_config(), _checkpoint(late_id, "first attempt"), {}, {"value": 1})
    _claim(pool, 2)
    behind = checkpointer.FencedSaver(pool, run_id=RUN, epoch=2)
    early_id = _uuid6_at(4_970)  # the next attempt, 30 s behind: its newer checkpoint sorts first
    behind.put(_config(checkpoint_id=late_id), _checkpoint(early_id, "second attempt"), {}, {"value": 2})
    plain = PostgresSaver(pool).get_tuple(_config())
    assert plain is not None and plain.checkpoint["id"] == late_id  # LangGraph's rule: newest by id
    for saver in (behind, checkpointer.FencedSaver(pool, run_id=RUN, epoch=3)):
        found = saver.get_tuple(_config())
        assert found is not None and found.checkpoint["id"] == early_id
        assert found.checkpoint["channel_values"]["value"] == "second attempt"
        assert found.parent_config is not None
        assert found.parent_config["configurable"]["checkpoint_id"] == late_id
    run = store.get_run(pool, RUN)
    assert run is not None and run.head_checkpoint_id == early_id


def test_subgraph_namespaces_are_fenced_and_have_their_own_head(
    pool: psycopg_pool.ConnectionPool[Any],
) -> None:
    _claim(pool, 1)
    saver = checkpointer.FencedSaver(pool, run_id=RUN, epoch=1)
    root = _uuid6_at(100)
    saver.put(_config(), _checkpoint(root, "root"), {}, {"value": 1})
    sub_late, sub_early = _uuid6_at(300), _uuid6_at(200)
    saver.put(_config("inner:abc"), _checkpoint(sub_late, "sub 1"), {}, {"value": 1})
    saver.put(_config("inner:abc", sub_late), _checkpoint(sub_early, "sub 2"), {}, {"value": 2})
    found = saver.get_tuple(_config("inner:abc"))
    assert found is not None and found.checkpoint["id"] == sub_early
    assert store.get_checkpoint_head(pool, run_id=RUN, checkpoint_ns="inner:abc") == sub_early
    assert store.get_checkpoint_head(pool, run_id=RUN) == root  # the run's head tracks the root only
    explicit = saver.get_tuple(_config("inner:abc", sub_late))  # an addressed checkpoint is not redirected
    assert explicit is not None and explicit.checkpoint["id"] == sub_late


class _State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_refused_write_stops_the_graph_in_every_durability_mode(
    pool: psycopg_pool.ConnectionPool[Any], durability: str
) -> None:
    """Writes may happen on LangGraph's background threads; the refusal still surfaces, it is not lost."""
    _claim(pool, 1)

    def depose(state: _State) -> _State:
        _claim(pool, 2)  # while this node runs, a newer attempt takes over
        return {"log": ["deposed"]}

    g: StateGraph[_State] = StateGraph(_State)
    g.add_node("depose", depose)
    g.add_node("after", lambda state: {"log": ["after"]})
    g.add_edge(START, "depose")
    g.add_edge("depose", "after")
    g.add_edge("after", END)
    refused: list[errors.ControlSignal] = []
    saver = checkpointer.FencedSaver(pool, run_id=RUN, epoch=1, on_refused=refused.append)
    graph = g.compile(checkpointer=saver)
    with pytest.raises(errors.Fenced):
        graph.invoke({"log": []}, {"configurable": {"thread_id": RUN}}, durability=durability)  # type: ignore[arg-type]
    assert refused and all(isinstance(e, errors.Fenced) for e in refused)
    owner = checkpointer.FencedSaver(pool, run_id=RUN, epoch=2)
    head = owner.get_tuple(_config())
    values = head.checkpoint["channel_values"] if head is not None else {}
    assert "deposed" not in (values.get("log") or [])  # nothing the deposed node produced is durable


def test_the_saver_times_its_own_writes(pool: psycopg_pool.ConnectionPool[Any]) -> None:
    _claim(pool, 1)
    saver = checkpointer.FencedSaver(pool, run_id=RUN, epoch=1)
    cp = _uuid6_at(10)
    assert saver.write_seconds(cp) is None
    saver.put(_config(), _checkpoint(cp, "x"), {}, {"value": 1})
    seconds = saver.write_seconds(cp)
    assert seconds is not None and 0.0001 < seconds < 5  # a real round trip to Postgres, not microseconds


def test_step_events_wait_for_the_savers_timing_and_keep_their_order(
    pool: psycopg_pool.ConnectionPool[Any],
) -> None:
    import datetime

    from agent_worker import steps

    _claim(pool, 1)
    saver = checkpointer.FencedSaver(pool, run_id=RUN, epoch=1)
    recorder = steps.StepRecorder(pool, run_id=RUN, attempt=1, saver=saver)
    first, second, never = _uuid6_at(20), _uuid6_at(21), _uuid6_at(22)
    now = datetime.datetime.now(datetime.UTC)
    for name, cp in (("a:0", first), ("b:1", second), ("c:2", never)):
        recorder.add(step=name, checkpoint_id=cp, started_at=now, duration_seconds=0.1, effect_keys=[])
    saver.put(_config(checkpoint_id=None), _checkpoint(second, "2"), {}, {"value": 1})  # async: out of order
    recorder.flush(final=False)
    assert store.list_step_events(pool, RUN) == []  # "a" is not timed yet, and events keep their order
    saver.put(_config(), _checkpoint(first, "1"), {}, {"value": 1})
    recorder.flush(final=False)
    recorded = store.list_step_events(pool, RUN)
    assert [(e.step, e.checkpoint_seconds) for e in recorded] == [
        ("a:0", saver.write_seconds(first)),
        ("b:1", saver.write_seconds(second)),
    ]
    recorder.flush(final=True)  # "c" was never written by this attempt (durability=exit): no figure
    assert [(e.step, e.checkpoint_seconds) for e in store.list_step_events(pool, RUN)][-1] == ("c:2", None)
