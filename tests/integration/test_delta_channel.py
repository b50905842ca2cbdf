"""Long chats whose ``messages`` is LangGraph 1.2's ``DeltaChannel`` (tests/graphs/delta_chat.py).

A ``DeltaChannel`` stores only each step's writes; its value at a checkpoint is rebuilt by walking the parent
chain back to the nearest ``_DeltaSnapshot`` and replaying the writes on the way. Every test reads the state
back through LangGraph itself and compares the messages with those of an unkilled run
(``delta_chat.expected_messages``, whose model answers with a digest of the whole history it was handed, so a
wrong rebuild at any resume changes every later answer):

- real worker processes, each durability mode, killed at step boundaries and between a task's saved writes
  and its step's checkpoint, then re-run;
- an attempt whose wall clock is behind (libfaketime): its checkpoint ids sort before their parents';
- a run that fails mid-chat and is retried (reopened), resuming from its head;
- a fork at a mid-chat step (the operator's copy, sql/fork.sql), run to the end, before and after the source
  run is purged by retention.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
import pytest

from agent_worker import checkpointer
from agentrun_core import store
from agentrun_dev import http_provider
from tests.graphs import delta_chat
from tests.support import worker_harness

pytestmark = pytest.mark.postgres

GRAPH = "tests.graphs.delta_chat:builder"
TURNS = 12
_LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


@pytest.fixture
def worker(pg_dsn: str, providers: worker_harness.Providers) -> worker_harness.Worker:
    return worker_harness.Worker(pg_dsn, providers)


def writes_replayed(dsn: str, run_id: str) -> tuple[int, int]:
    """(messages LangGraph rebuilds at the head as stored, messages in the snapshot + the writes it replays
    for them): equal unless a write is replayed twice (``add_messages`` would hide it: same message id)."""
    with psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=2, kwargs={"autocommit": True}) as pool:
        saver = checkpointer.FencedSaver(pool, run_id=run_id, epoch=0)
        head = saver.get_tuple({"configurable": {"thread_id": run_id}})
        assert head is not None
        stored = head.checkpoint["channel_values"].get("messages")
        history = saver.get_delta_channel_history(config=head.config, channels=["messages"])["messages"]
    at_head = len(delta_chat.messages_at(dsn, run_id, head.config["configurable"]["checkpoint_id"]))
    if stored is not None:  # a snapshot at the head itself: nothing replayed
        return at_head, len(stored.value)
    seed = history.get("seed")
    replayed = (len(seed.value) if seed is not None else 0) + sum(len(w[2]) for w in history["writes"])
    return at_head, replayed


def admit(dsn: str, run_id: str, durability: str = "sync", **input_: Any) -> None:
    worker_harness.admit(dsn, run_id, graph=GRAPH, durability=durability, **{"turns": TURNS, **input_})


def finish(worker: worker_harness.Worker, run_id: str, *, attempt: int = 2, **env: str) -> None:
    """Run ``run_id`` to the end, approving each approval it parks on."""
    for n in range(attempt, attempt + 5):
        proc = worker.run(run_id, pod=f"p{n}", attempt=n, **env)
        if proc.returncode != 10:
            break
        with psycopg.connect(worker.dsn, autocommit=True) as conn:
            (pending,) = [a for a in store.list_approvals(conn, run_id) if a.status == "pending"]
            assert store.decide_approval(
                conn, approval_id=pending.approval_id, run_id=run_id, decision="approved", decided_by="t"
            )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with psycopg.connect(worker.dsn, autocommit=True) as conn:
        run = store.get_run(conn, run_id)
    assert run is not None and run.status == "succeeded", run


def charges(providers: worker_harness.Providers) -> list[int]:
    return sorted(http_provider.stats(providers.http_url)["effects_performed"].values())


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_delta_chat_runs_to_the_same_messages(
    worker: worker_harness.Worker, providers: worker_harness.Providers, durability: str
) -> None:
    admit(worker.dsn, "r", durability, charge_every=4)
    finish(worker, "r", attempt=1)
    assert delta_chat.messages_at(worker.dsn, "r") == delta_chat.expected_messages(TURNS, charge_every=4)
    assert charges(providers) == [1, 1, 1]
    with psycopg.connect(worker.dsn, autocommit=True) as conn:
        stored = conn.execute(
            "SELECT count(*) FROM checkpoint_blobs WHERE thread_id = 'r' AND channel = 'messages'"
            " AND type <> 'empty'"
        ).fetchone()
    # Only the snapshots hold the messages (every 7th update), not every step: the channel is a delta one.
    assert stored is not None and stored[0] <= 2 * TURNS // delta_chat.SNAPSHOT_FREQUENCY + 1


# (durability, fault): step boundaries early and late, around a snapshot, and the gap between a task's saved
# writes and its step's checkpoint. Under exit the saves are at the end (here: where the run parks on an
# approval at turn 2, before a snapshot is due): a kill between the exit's saved writes and its checkpoint.
KILLS = [
    ("sync", "after_checkpoint@3"),
    ("sync", "after_checkpoint@16"),
    ("sync", "after_task_writes@9"),
    ("sync", "after_task_writes@15"),
    ("async", "after_checkpoint@11"),
    ("async", "after_task_writes@15"),
    ("async", "after_task_writes@22"),
    ("exit", "after_task_writes@1"),
    ("exit", "after_task_writes@2"),
    ("exit", "after_task_writes@3"),
    ("sync", "after_reserve@2"),
    ("async", "after_record@3"),
]


@pytest.mark.parametrize(("durability", "fault"), KILLS)
def test_a_killed_delta_chat_resumes_to_the_same_messages(
    worker: worker_harness.Worker, providers: worker_harness.Providers, durability: str, fault: str
) -> None:
    approve_at = 2 if durability == "exit" else 0
    admit(worker.dsn, "r", durability, charge_every=3, approve_at=approve_at)
    killed = worker.run("r", pod="p1", faults=fault)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    finish(worker, "r")
    expected = delta_chat.expected_messages(TURNS, charge_every=3, approve_at=approve_at)
    assert delta_chat.messages_at(worker.dsn, "r") == expected
    at_head, replayed = writes_replayed(worker.dsn, "r")
    assert at_head == replayed, (at_head, replayed)
    assert charges(providers) == [1, 1, 1, 1]


@pytest.mark.parametrize("hit", [1, 2, 3])
def test_an_exit_save_killed_after_a_park_replays_no_write_twice(
    worker: worker_harness.Worker, hit: int
) -> None:
    """Under exit, the run resumed after its park (turn 2) saves its DeltaChannel writes on the parked
    checkpoint, then its own; killed between the two, the next attempt saves them there again. Three turns:
    the end comes before a snapshot is due, so the final checkpoint is rebuilt from those writes."""
    admit(worker.dsn, "r", "exit", turns=3, approve_at=2)
    parked = worker.run("r", pod="p1")
    assert parked.returncode == 10, parked.stderr[-3000:]
    with psycopg.connect(worker.dsn, autocommit=True) as conn:
        (pending,) = store.list_approvals(conn, "r")
        assert store.decide_approval(
            conn, approval_id=pending.approval_id, run_id="r", decision="approved", decided_by="t"
        )
    killed = worker.run("r", pod="p2", attempt=2, faults=f"after_task_writes@{hit}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    finish(worker, "r", attempt=3)
    assert delta_chat.messages_at(worker.dsn, "r") == delta_chat.expected_messages(3, approve_at=2)
    at_head, replayed = writes_replayed(worker.dsn, "r")
    assert at_head == replayed, (at_head, replayed)


@pytest.mark.skipif(not os.path.exists(_LIBFAKETIME), reason="needs Debian's faketime (.ci/run installs it)")
def test_an_attempt_whose_clock_is_behind_rebuilds_the_history(worker: worker_harness.Worker) -> None:
    """The ids of the second attempt's checkpoints (uuid6 of its wall clock) sort before their parents'; the
    third attempt resumes from one of them, whose chain back to a snapshot crosses into the first's."""
    admit(worker.dsn, "r")
    killed = worker.run("r", pod="p1", faults="after_checkpoint@12")  # at step 10, 3 updates after a snapshot
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    behind = {
        "LD_PRELOAD": _LIBFAKETIME,
        "FAKETIME": "-60",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": f"{worker_harness.REPO / 'tests' / 'faketime'}:{worker_harness.REPO}",
    }
    killed = worker.run("r", pod="p2", attempt=2, faults="after_checkpoint@2", **behind)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    with psycopg.connect(worker.dsn, autocommit=True) as conn:
        head = store.get_checkpoint_head(conn, run_id="r")
        (parent,) = conn.execute(
            "SELECT parent_checkpoint_id FROM checkpoints WHERE thread_id = 'r' AND checkpoint_id = %s",
            (head,),
        ).fetchone() or (None,)
    assert head is not None and parent is not None and head < parent  # the skew is real
    # the head is step 11: turn 6 asked, not yet answered
    assert delta_chat.messages_at(worker.dsn, "r") == delta_chat.expected_messages(6)[:11]
    finish(worker, "r", attempt=3)
    assert delta_chat.messages_at(worker.dsn, "r") == delta_chat.expected_messages(TURNS)


def test_a_failed_delta_chat_retried_resumes_from_its_head(
    worker: worker_harness.Worker, tmp_path: Path
) -> None:
    flag = tmp_path / "fail"
    flag.touch()
    admit(worker.dsn, "r", fail_at=7)
    failed = worker.run("r", pod="p1", AGENTRUN_TEST_FAIL_FILE=str(flag))
    with psycopg.connect(worker.dsn, autocommit=True) as conn:
        run = store.get_run(conn, "r")
        assert run is not None and run.status == "failed", (failed.returncode, failed.stderr[-3000:])
        flag.unlink()
        assert store.reopen_run(conn, run_id="r", generation=1, by="alice", reason="retry") is not None
    finish(worker, "r", AGENTRUN_TEST_FAIL_FILE=str(flag))
    assert delta_chat.messages_at(worker.dsn, "r") == delta_chat.expected_messages(TURNS)


def _fork_at_turn(dsn: str, source: str, fork: str, turn: int, **edits: Any) -> str:
    """Admit ``fork`` from the checkpoint of ``source`` written after its model answered turn ``turn``, as the
    operator does (agentrun_core/store/forks.py); that checkpoint's id."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        (checkpoint_id,) = conn.execute(  # the step after model's answer to that turn: 2*turn (input is -1)
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = ''"
            " AND (metadata ->> 'step')::int = %s",
            (source, 2 * turn),
        ).fetchone() or (None,)
        assert checkpoint_id is not None
        found = store.find_fork_source(conn, namespace="ns", name=source, checkpoint_id=checkpoint_id)
        assert found.problem is None, found.problem
        fork_of = {"run_id": source, "name": source, "checkpoint_id": checkpoint_id, "step": None}
        if edits:  # as `kubectl agentrun fork --step model --set k=v` records them
            fork_of.update(step="model", set=edits)
        store.admit_fork(
            conn,
            run_id=fork,
            namespace="ns",
            name=fork,
            graph=GRAPH,
            input={"turns": TURNS},
            spec_hash="t",
            durability="sync",
            approval_policy={},
            retry_generation=0,
            fork_of=fork_of,
        )
    return str(checkpoint_id)


@pytest.mark.parametrize("turn", [3, 7, 10])
def test_a_fork_at_a_mid_chat_step_holds_the_history_to_that_step(
    worker: worker_harness.Worker, turn: int
) -> None:
    admit(worker.dsn, "src")
    finish(worker, "src", attempt=1)
    at = _fork_at_turn(worker.dsn, "src", "fork", turn)
    assert delta_chat.messages_at(worker.dsn, "src", at) == delta_chat.expected_messages(turn)
    assert delta_chat.messages_at(worker.dsn, "fork", at) == delta_chat.expected_messages(turn)
    finish(worker, "fork", attempt=1)
    assert delta_chat.messages_at(worker.dsn, "fork") == delta_chat.expected_messages(TURNS)


def test_a_fork_outlives_its_source_purged_by_retention(worker: worker_harness.Worker) -> None:
    admit(worker.dsn, "src")
    finish(worker, "src", attempt=1)
    at = _fork_at_turn(worker.dsn, "src", "fork", 9)
    with psycopg.connect(worker.dsn, autocommit=True) as conn:
        store.mark_for_purge(conn, "src", after_seconds=0, reason="test")
        assert store.purge_due(conn) == ["src"]
        left = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'src'").fetchone()
    assert left == (0,)
    assert delta_chat.messages_at(worker.dsn, "fork", at) == delta_chat.expected_messages(9)
    finish(worker, "fork", attempt=1)
    assert delta_chat.messages_at(worker.dsn, "fork") == delta_chat.expected_messages(TURNS)


def test_a_fork_with_an_edit_continues_from_the_rebuilt_history(worker: worker_harness.Worker) -> None:
    admit(worker.dsn, "src")
    finish(worker, "src", attempt=1)
    _fork_at_turn(worker.dsn, "src", "fork", 4, turns=6)  # the human shortens the chat to 6 turns
    finish(worker, "fork", attempt=1)
    assert delta_chat.messages_at(worker.dsn, "fork") == delta_chat.expected_messages(6)
