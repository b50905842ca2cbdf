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

from agent_worker import checkpointer
from agentrun_core import errors, store
from tests.support import pg

pytestmark = [pytest.mark.postgres]

RUN = "run-ckpt"


@pytest.fixture
def pool(pg_dsn: str) -> Iterator[psycopg_pool.ConnectionPool[Any]]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        pg.admit(conn, run_id=RUN, graph="g:g")
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


def _to_us(seconds: float | None) -> float | None:
    """A timing as step events keep it: whole microseconds (migration 21)."""
    return None if seconds is None else round(seconds, 6)


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
        zombie.put_writes(_config(checkpoint_id=first), [("value", "late"), ("other", "too")], "task-1")
    with pytest.raises(errors.Fenced):
        zombie.put(_config("sub:1"), _checkpoint(_uuid6_at(3_000), "zombie-sub"), {}, {"value": 1})
    assert [type(e) for e in refused] == [errors.Fenced] * 3  # reported at once, not only raised
    # Each refused write was one pipeline (fence, blobs, checkpoint/writes, COMMIT): the server refused the
    # fence and skipped the rest, so nothing of it is durable and no head moved.
    assert _count(pool, "checkpoints") == 1 and _count(pool, "checkpoint_writes") == 0
    assert _count(pool, "checkpoint_blobs") == 0  # the blob upsert rolled back with the refused put
    assert store.get_checkpoint_head(pool, run_id=RUN) == first
    assert store.get_checkpoint_head(pool, run_id=RUN, checkpoint_ns="sub:1") is None
    owner = checkpointer.FencedSaver(pool, run_id=RUN, epoch=2)
    owner.put_writes(_config(checkpoint_id=first), [("value", "mine")], "task-1")
    assert _count(pool, "checkpoint_writes") == 1


class _Flights:
    """Client/server flights of one pool's connections: statements sent outside a pipeline, pipeline Syncs,
    and what ``transaction()`` sends outside a pipeline (the method of bench/db.py)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from psycopg import _connection_base, _pipeline_base

        self.count = 0
        self.conns: set[int] = set()
        enqueue_sync = _pipeline_base.BasePipeline._enqueue_sync
        exec_command = _connection_base.BaseConnection._exec_command
        execute = psycopg.Cursor.execute
        flights = self

        def counted_sync(pipeline: Any) -> None:
            flights._trip(pipeline._conn)
            enqueue_sync(pipeline)

        def counted_command(conn: Any, *args: Any, **kwargs: Any) -> Any:
            if conn._pipeline is None:
                flights._trip(conn)
            return exec_command(conn, *args, **kwargs)

        def counted_execute(cur: Any, *args: Any, **kwargs: Any) -> Any:
            if cur.connection._pipeline is None:
                flights._trip(cur.connection)
            return execute(cur, *args, **kwargs)

        monkeypatch.setattr(_pipeline_base.BasePipeline, "_enqueue_sync", counted_sync)
        monkeypatch.setattr(_connection_base.BaseConnection, "_exec_command", counted_command)
        monkeypatch.setattr(psycopg.Cursor, "execute", counted_execute)

    def _trip(self, conn: Any) -> None:
        if id(conn) in self.conns:
            self.count += 1

    def take(self) -> int:
        count, self.count = self.count, 0
        return count


def test_a_fenced_write_is_one_round_trip_refused_or_not(
    pool: psycopg_pool.ConnectionPool[Any], pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write is PostgresSaver's own pipeline, fenced by the trigger inside its statements: one Sync per
    write, like bare PostgresSaver — and a refusal costs no more and leaves nothing (its blobs included)."""
    _claim(pool, 1)
    one: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        pg_dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, open=True
    )
    with one:
        _one_round_trip(pool, one, _Flights(monkeypatch))


def _one_round_trip(
    pool: psycopg_pool.ConnectionPool[Any], one: psycopg_pool.ConnectionPool[Any], flights: _Flights
) -> None:
    saver = checkpointer.FencedSaver(one, run_id=RUN, epoch=1)
    with one.connection() as conn:  # the pool's only connection: the one the saver takes
        flights.conns.add(id(conn))
    cp = _checkpoint(_uuid6_at(50), "x")
    cp["channel_values"]["blob"] = {"not": "inline"}  # a blob: PostgresSaver's executemany rides the pipeline
    cp["channel_versions"]["blob"] = 1
    saver.put(_config(), cp, {}, {"value": 1, "blob": 1})
    assert flights.take() == 1
    saver.put_writes(_config(checkpoint_id=cp["id"]), [("value", "a"), ("blob", "b")], "task-1")
    assert flights.take() == 1
    assert _count(pool, "checkpoints") == 1 and _count(pool, "checkpoint_blobs") == 1
    assert _count(pool, "checkpoint_writes") == 2
    _claim(pool, 2)
    flights.take()
    refused = _checkpoint(_uuid6_at(60), "y")
    refused["channel_values"]["blob"] = {"zombie": "blob"}
    refused["channel_versions"]["blob"] = 2
    with pytest.raises(errors.Fenced):
        saver.put(_config(checkpoint_id=cp["id"]), refused, {}, {"value": 2, "blob": 2})
    # The pipeline alone (psycopg may add a DEALLOCATE of statements it had prepared in the aborted pipeline).
    assert flights.take() in (1, 2)
    with one.connection() as conn:
        assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert _count(pool, "checkpoints") == 1 and store.get_checkpoint_head(pool, run_id=RUN) == cp["id"]
    assert _count(pool, "checkpoint_blobs") == 1  # the refused write's blob went with it


def test_a_run_that_is_not_admitted_gets_no_checkpoint(pool: psycopg_pool.ConnectionPool[Any]) -> None:
    """The fence's two refusals stay apart: no run row is RunNotFound (exit 2), not Fenced."""
    refused: list[errors.ControlSignal] = []
    stranger = checkpointer.FencedSaver(pool, run_id="never-admitted", epoch=1, on_refused=refused.append)
    config = {"configurable": {"thread_id": "never-admitted", "checkpoint_ns": ""}}
    with pytest.raises(errors.RunNotFound, match="run never-admitted is not admitted"):
        stranger.put(config, _checkpoint(_uuid6_at(70), "z"), {}, {"value": 1})  # type: ignore[arg-type]
    with pool.connection() as conn:
        row = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'never-admitted'").fetchone()
    assert row is not None and row[0] == 0
    assert refused == []  # as before: RunNotFound is the worker's own error, not a control signal


def test_a_write_its_client_abandons_half_way_commits_nothing(
    pool: psycopg_pool.ConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client-side failure between two statements of a write (blobs sent, checkpoint row not): the implicit
    transaction is aborted before its Sync, so neither the blobs nor the head move commit."""
    _claim(pool, 1)
    saver = checkpointer.FencedSaver(pool, run_id=RUN, epoch=1)
    real_execute = psycopg.Cursor.execute

    def failing_execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if query == saver.UPSERT_CHECKPOINTS_SQL:
            raise RuntimeError("the client failed between two statements")
        return real_execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", failing_execute)
    cp = _checkpoint(_uuid6_at(80), "x")
    cp["channel_values"]["blob"] = {"not": "inline"}
    cp["channel_versions"]["blob"] = 1
    with pytest.raises(RuntimeError, match="between two statements"):
        saver.put(_config(), cp, {}, {"value": 1, "blob": 1})
    monkeypatch.undo()
    assert _count(pool, "checkpoint_blobs") == 0 and _count(pool, "checkpoints") == 0
    assert store.get_checkpoint_head(pool, run_id=RUN) is None
    # That failed write was the saver's first on its connection: the fence mark went with it, and is sent
    # again by the next write, which is still fenced (a newer epoch now holds the run).
    _claim(pool, 2)
    with pytest.raises(errors.Fenced):
        saver.put(_config(), _checkpoint(_uuid6_at(81), "late"), {}, {"value": 2})
    assert _count(pool, "checkpoints") == 0


def test_rows_on_a_connection_the_saver_did_not_mark_are_not_fenced(
    pool: psycopg_pool.ConnectionPool[Any],
) -> None:
    """The trigger fences the worker's saver, whose connections carry the mark: a plain PostgresSaver on the
    same tables (the operator's forks, a baseline) writes as it always did; a marked connection writing
    another run's thread is refused."""
    _claim(pool, 1)
    PostgresSaver(pool).put(_config(), _checkpoint(_uuid6_at(90), "plain"), {}, {"value": 1})
    assert _count(pool, "checkpoints") == 1
    saver = checkpointer.FencedSaver(pool, run_id=RUN, epoch=1)
    other = {"configurable": {"thread_id": "another-run", "checkpoint_ns": ""}}
    with pytest.raises(errors.Fenced):
        saver.put(other, _checkpoint(_uuid6_at(91), "not mine"), {}, {"value": 1})  # type: ignore[arg-type]
    with pool.connection() as conn:
        row = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'another-run'").fetchone()
    assert row is not None and row[0] == 0


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
        ("a:0", _to_us(saver.write_seconds(first))),
        ("b:1", _to_us(saver.write_seconds(second))),
    ]
    recorder.flush(final=True)  # "c" was never written by this attempt (durability=exit): no figure, no id
    last = store.list_step_events(pool, RUN)[-1]
    assert (last.step, last.checkpoint_seconds, last.checkpoint_id) == ("c:2", None, None)


def test_a_saver_on_tables_without_the_fence_fails_instead_of_writing_unfenced(
    pool: psycopg_pool.ConnectionPool[Any],
) -> None:
    """A worker against a schema without migration 16's triggers (or a table recreated by hand) must not
    write unfenced: marking its connection is refused, and so is the write."""
    _claim(pool, 1)
    with pool.connection() as conn:
        conn.execute("DROP TRIGGER agentrun_fence ON checkpoint_writes")
    saver = checkpointer.FencedSaver(pool, run_id=RUN, epoch=1)
    with pytest.raises(psycopg.Error, match="not fenced"):
        saver.put(_config(), _checkpoint(_uuid6_at(95), "x"), {}, {"value": 1})
    assert _count(pool, "checkpoints") == 0


def test_a_namespace_without_a_head_is_read_only_when_something_was_written_there(
    pool: psycopg_pool.ConnectionPool[Any],
) -> None:
    """The saver answers "no checkpoint" from the head query alone when the namespace holds none (a new run,
    a subgraph's first entry: one round trip), and still reads LangGraph's newest when rows exist without a
    head (written unfenced: a run from before migration 2)."""
    _claim(pool, 1)
    saver = checkpointer.FencedSaver(pool, run_id=RUN, epoch=1)
    assert store.checkpoint_head(pool, run_id=RUN) == store.Head(None, False)
    assert saver.get_tuple(_config()) is None
    PostgresSaver(pool).put(_config("old:1"), _checkpoint(_uuid6_at(95), "unfenced"), {}, {"value": 1})
    assert store.checkpoint_head(pool, run_id=RUN, checkpoint_ns="old:1") == store.Head(None, True)
    found = saver.get_tuple(_config("old:1"))
    assert found is not None and found.checkpoint["channel_values"]["value"] == "unfenced"
    saver.put(_config(), _checkpoint(_uuid6_at(96), "fenced"), {}, {"value": 1})
    assert store.checkpoint_head(pool, run_id=RUN) == store.Head(_uuid6_at(96), True)
    assert store.checkpoint_head(pool, run_id="not-admitted") == store.Head(None, False)


def test_a_namespace_read_empty_is_not_read_again_until_written(
    pool: psycopg_pool.ConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new run is asked for its latest checkpoint twice before its first step (the worker's start read,
    then LangGraph's): the second answer costs no round trip. A write to the namespace ends that, and a read
    that raced a write (the write started while the read was in flight) is not remembered."""
    _claim(pool, 1)
    saver = checkpointer.FencedSaver(pool, run_id=RUN, epoch=1)
    reads: list[str] = []
    real_head = store.checkpoint_head

    def head(conn: Any, *, run_id: str, checkpoint_ns: str = "") -> store.Head:
        reads.append(checkpoint_ns)
        return real_head(conn, run_id=run_id, checkpoint_ns=checkpoint_ns)

    monkeypatch.setattr(store, "checkpoint_head", head)
    assert saver.get_tuple(_config()) is None
    assert saver.get_tuple(_config()) is None
    assert reads == [""]
    saver.put(_config(), _checkpoint(_uuid6_at(97), "first"), {}, {"value": 1})
    found = saver.get_tuple(_config())
    assert found is not None and found.checkpoint["channel_values"]["value"] == "first"
    assert reads == ["", ""]

    def racing_head(conn: Any, *, run_id: str, checkpoint_ns: str = "") -> store.Head:
        answer = head(conn, run_id=run_id, checkpoint_ns=checkpoint_ns)
        saver.put(_config(checkpoint_ns), _checkpoint(_uuid6_at(98), "raced"), {}, {"value": 1})
        return answer  # "nothing there", answered before the write above committed

    monkeypatch.setattr(store, "checkpoint_head", racing_head)
    assert saver.get_tuple(_config("sub:1")) is None
    monkeypatch.setattr(store, "checkpoint_head", head)
    found = saver.get_tuple(_config("sub:1"))
    assert found is not None and found.checkpoint["channel_values"]["value"] == "raced"
    assert reads == ["", "", "sub:1", "sub:1"]


WRITE_ROW = (  # one pending write, as PostgresSaver's put_writes inserts it: (thread, checkpoint, task, idx)
    "INSERT INTO checkpoint_writes"
    " (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob)"
    " VALUES (%s, '', %s, %s, %s, 'value', 'json', '\\x00')"
)


def _claimed_by_epoch_1(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        pg.admit(admin, run_id=RUN, graph="g:g")
        store.claim_run(admin, run_id=RUN, epoch=1, holder="pod-1")


def test_an_epoch_is_read_once_per_write_and_again_by_the_next(pg_dsn: str) -> None:
    """Migration 18: the rows of one write check the run's epoch once (the first locks the run row until the
    write ends, so no claim can move the epoch in between); the next write on the same connection reads it
    again, and a claim that came in between is seen."""
    _claimed_by_epoch_1(pg_dsn)
    checkpoint_id = _uuid6_at(100)

    def held(conn: psycopg.Connection[Any]) -> str | None:
        row = conn.execute("SELECT current_setting('agentrun.fence_held', true)").fetchone()
        return row[0] if row and row[0] else None

    with psycopg.connect(pg_dsn) as worker:  # one connection, explicit transactions
        worker.execute("SELECT agentrun_mark_fence(%s)", (f"1:{RUN}",))
        worker.commit()
        assert held(worker) is None
        worker.execute(WRITE_ROW, (RUN, checkpoint_id, "task-1", 0))
        assert held(worker) == f"{RUN}:1"  # the first row checked and locked; set past the trigger's end
        with psycopg.connect(pg_dsn, autocommit=True) as admin:  # a claim now waits for this write to end
            admin.execute("SET lock_timeout = '200ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                store.claim_run(admin, run_id=RUN, epoch=2, holder="pod-2")
        worker.execute(WRITE_ROW, (RUN, checkpoint_id, "task-1", 1))
        worker.commit()
        assert held(worker) is None  # transaction-local: gone with the commit
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            store.claim_run(admin, run_id=RUN, epoch=2, holder="pod-2")
        with pytest.raises(psycopg.Error, match="epoch 1 is not current") as refused:
            worker.execute(WRITE_ROW, (RUN, checkpoint_id, "task-2", 0))
        assert refused.value.sqlstate == "AR409"
        worker.rollback()
        # A savepoint rolled back takes the setting with it, as it takes the lock it stands for.
        worker.execute("SELECT agentrun_mark_fence(%s)", (f"2:{RUN}",))
        worker.commit()
        worker.execute("SAVEPOINT s")
        worker.execute(WRITE_ROW, (RUN, checkpoint_id, "task-3", 0))
        assert held(worker) == f"{RUN}:2"
        worker.execute("ROLLBACK TO SAVEPOINT s")
        assert held(worker) is None
        worker.rollback()
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT task_id, idx FROM checkpoint_writes WHERE thread_id = %s ORDER BY 1, 2", (RUN,)
        ).fetchall()
    assert rows == [("task-1", 0), ("task-1", 1)]


def test_the_rows_of_a_checked_write_pass_without_the_fence_function(pg_dsn: str) -> None:
    """Migration 20: once a write checked the epoch, its further checkpoint_writes rows are passed by the row
    trigger itself (no call of agentrun_fence_checkpoint); a checkpoints row (it moves a head) and a row of
    another run still go through the fence, in the same transaction."""
    _claimed_by_epoch_1(pg_dsn)
    checkpoint_id = _uuid6_at(100)

    def fence_calls(conn: psycopg.Connection[Any]) -> int:
        """Calls so far (this backend's counts not yet flushed, which the transaction ends may flush)."""
        row = conn.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
            " WHERE funcname = 'agentrun_fence_checkpoint'"
        ).fetchone()
        return int(row[0]) if row else 0

    with psycopg.connect(pg_dsn) as worker:  # one connection, explicit transactions
        worker.execute("SET track_functions = 'pl'")
        worker.execute("SELECT agentrun_mark_fence(%s)", (f"1:{RUN}",))
        worker.commit()
        calls = fence_calls(worker)  # opens the transaction
        for idx in range(4):
            worker.execute(WRITE_ROW, (RUN, checkpoint_id, "task", idx))
        assert fence_calls(worker) - calls == 1  # the first row only
        worker.execute(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, type, checkpoint, metadata)"
            " VALUES (%s, '', %s, 'json', '{}', '{}')",
            (RUN, checkpoint_id),
        )
        assert fence_calls(worker) - calls == 2
        with pytest.raises(psycopg.Error, match="may not write checkpoints of run other") as refused:
            worker.execute(WRITE_ROW, ("other", checkpoint_id, "task", 0))
        assert refused.value.sqlstate == "AR409"
        worker.rollback()
        calls = fence_calls(worker)
        for idx in range(2):  # a new transaction checks again
            worker.execute(WRITE_ROW, (RUN, checkpoint_id, "task", idx))
        assert fence_calls(worker) - calls == 1
        worker.commit()
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        head = store.get_checkpoint_head(admin, run_id=RUN)
        rows = admin.execute("SELECT count(*) FROM checkpoint_writes WHERE thread_id = %s", (RUN,)).fetchone()
    assert head is None  # the head moved by the checkpoints row went with its rolled-back transaction
    assert rows is not None and rows[0] == 2
