"""The per-run loops (agent_operator.serve.run_loops): started from a run's events, woken by them, stopped by
its deletion, replaced for a new run of the same name, holding the run without its managedFields."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
from typing import Any

import kopf

from agent_operator.serve import run_loops

KEY = ("ns", "r")


def _body(uid: str = "u1", rv: str = "1", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "r",
        "namespace": "ns",
        "uid": uid,
        "resourceVersion": rv,
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    return {"metadata": meta, "spec": {"graph": "g:g"}}


class Recorder:
    """A loop body that records the body version of each round and sleeps until woken."""

    def __init__(self) -> None:
        self.rounds: list[tuple[str, str]] = []
        self.round_done = asyncio.Event()

    async def __call__(self, key: tuple[str, str], loop: run_loops.Loop) -> None:
        while not loop.stopping:
            loop.begin_round()
            body = loop.current()
            self.rounds.append((body["metadata"]["uid"], body["metadata"]["resourceVersion"]))
            self.round_done.set()
            await run_loops.sleep(loop, 60)


async def _until(check: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_a_run_is_held_without_its_managed_fields() -> None:
    held = json.loads(run_loops.compact(kopf.Body(_body())))  # as kopf hands it to the event handler
    assert "managedFields" not in held["metadata"] and held["metadata"]["uid"] == "u1"
    assert held["spec"] == {"graph": "g:g"}


def test_events_start_and_wake_the_loop_and_a_deletion_stops_it() -> None:
    async def scenario() -> None:
        rec = Recorder()
        loops = run_loops.Loops(rec)
        loops.seen(KEY, "u1", _body(rv="1"), gone=False)
        await _until(lambda: rec.rounds == [("u1", "1")])
        loops.seen(KEY, "u1", _body(rv="2"), gone=False)  # the next event: a round with the new body
        await _until(lambda: rec.rounds[-1] == ("u1", "2"))
        loops.seen(KEY, "u1", _body(rv="3", deleting=True), gone=False)
        loop = loops.get(KEY)
        assert loop is not None and loop.stopping
        await loops.stopped(KEY, "u1")
        assert loops.get(KEY) is None and loop.task is not None and loop.task.done()
        assert not loop.task.cancelled()  # it ended its round and exited on its own
        loops.seen(KEY, "u1", _body(rv="4", deleting=True), gone=True)  # DELETED: no loop again
        assert loops.get(KEY) is None

    asyncio.run(scenario())


def test_a_new_run_under_the_same_name_gets_its_own_loop() -> None:
    async def scenario() -> None:
        rec = Recorder()
        loops = run_loops.Loops(rec)
        loops.seen(KEY, "u1", _body("u1"), gone=False)
        await _until(lambda: ("u1", "1") in rec.rounds)
        first = loops.get(KEY)
        loops.seen(KEY, "u2", _body("u2", rv="7"), gone=False)
        await _until(lambda: ("u2", "7") in rec.rounds)
        second = loops.get(KEY)
        assert first is not None and second is not None and second is not first and first.stopping
        assert second.uid == "u2" and not second.stopping
        await loops.stopped(KEY, "u1")  # the earlier run's uid: the new run's loop is left alone
        assert loops.get(KEY) is second
        await loops.stop_all()
        assert len(loops) == 0 and second.task is not None and second.task.done()

    asyncio.run(scenario())


def test_a_loop_that_does_not_end_its_round_in_time_is_cancelled() -> None:
    async def stuck(key: tuple[str, str], loop: run_loops.Loop) -> None:
        await asyncio.sleep(3600)  # ignores stopping

    async def scenario() -> None:
        loops = run_loops.Loops(stuck)
        loops.seen(KEY, "u1", _body(), gone=False)
        loop = loops.get(KEY)
        await asyncio.sleep(0)
        await loops.stop_all(timeout=0.2)
        assert loop is not None and loop.task is not None and loop.task.cancelled()

    asyncio.run(scenario())


def test_a_run_first_seen_being_deleted_gets_no_loop() -> None:
    async def scenario() -> None:
        loops = run_loops.Loops(Recorder())
        loops.seen(KEY, "u1", _body(deleting=True), gone=False)
        assert loops.get(KEY) is None

    asyncio.run(scenario())


def test_a_loop_whose_task_died_is_started_again_by_the_next_event() -> None:
    starts: list[str] = []

    async def crashes_once(key: tuple[str, str], loop: run_loops.Loop) -> None:
        starts.append(loop.current()["metadata"]["resourceVersion"])
        if len(starts) == 1:
            raise RuntimeError("escaped the round's guard")
        while not loop.stopping:
            loop.begin_round()
            await run_loops.sleep(loop, 60)

    async def scenario() -> None:
        loops = run_loops.Loops(crashes_once)
        loops.seen(KEY, "u1", _body(rv="1"), gone=False)
        first = loops.get(KEY)
        assert first is not None and first.task is not None
        with contextlib.suppress(RuntimeError):
            await first.task
        loops.seen(KEY, "u1", _body(rv="2"), gone=False)
        await _until(lambda: starts == ["1", "2"])
        assert loops.get(KEY) is first and first.task is not None and not first.task.done()
        await loops.stop_all()

    asyncio.run(scenario())


CAUSE: contextvars.ContextVar[str] = contextvars.ContextVar("cause", default="none")


def test_a_loop_does_not_keep_the_context_of_the_event_that_started_it() -> None:
    """kopf's handler context holds the event's cause (the whole raw body, its patch, its logger): a loop's
    task copying it would keep that alive for as long as the run waits."""
    seen: list[str] = []

    async def reads_the_context(key: tuple[str, str], loop: run_loops.Loop) -> None:
        seen.append(CAUSE.get())
        while not loop.stopping:
            loop.begin_round()
            await run_loops.sleep(loop, 60)

    async def scenario() -> None:
        loops = run_loops.Loops(reads_the_context)
        CAUSE.set("the event's cause")  # as kopf sets its context variables around a handler
        loops.seen(KEY, "u1", _body(), gone=False)
        await _until(lambda: seen == ["none"])
        await loops.stop_all()

    asyncio.run(scenario())


def test_a_sleeping_loop_is_one_task_woken_by_an_event_or_its_timer() -> None:
    woke: list[float] = []

    async def sleeper(key: tuple[str, str], loop: run_loops.Loop) -> None:
        clock = asyncio.get_running_loop().time
        while not loop.stopping:
            loop.begin_round()
            start = clock()
            await run_loops.sleep(loop, 0.2 if woke else 3600)
            woke.append(clock() - start)

    async def scenario() -> None:
        loops = run_loops.Loops(sleeper)
        loops.seen(KEY, "u1", _body(), gone=False)
        loop = loops.get(KEY)
        await _until(lambda: loop is not None and loop.waiter is not None)
        others = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
        assert loop is not None and others == {loop.task}  # no helper task per sleep (wait_for made one)
        loops.wake(KEY)  # an event: the hour-long sleep ends now
        await _until(lambda: len(woke) == 1)
        assert woke[0] < 60
        await _until(lambda: len(woke) >= 2)  # then its 0.2 s timer ends the next one
        assert 0.15 <= woke[1] < 60
        await loops.stop_all()
        assert loop.task is not None and loop.task.done() and not loop.task.cancelled()

    asyncio.run(scenario())


def test_at_most_the_slots_of_rounds_read_their_run_at_once() -> None:
    """Runs created by the thousand must not each parse their body and queue for a reconcile thread: the
    burst's garbage would stay in the heap among what the runs keep."""
    inside: list[int] = []
    most = 0
    release = asyncio.Event()

    async def one_round(key: tuple[str, str], loop: run_loops.Loop) -> None:
        nonlocal most
        async with loops.round(loop):
            inside.append(1)
            most = max(most, len(inside))
            await release.wait()
            inside.pop()
        while not loop.stopping:
            await run_loops.sleep(loop, 60)

    loops = run_loops.Loops(one_round, slots=2)

    async def scenario() -> None:
        for i in range(6):
            loops.seen(("ns", f"r{i}"), f"u{i}", _body(uid=f"u{i}"), gone=False)
        await _until(lambda: len(inside) == 2)
        for _ in range(20):
            await asyncio.sleep(0)
        assert most == 2  # four rounds wait for a slot, holding nothing of their run
        release.set()
        await _until(lambda: not inside and all(loop.waiter is not None for loop in _all(loops)))
        assert most == 2
        await loops.stop_all()

    asyncio.run(scenario())


def _all(loops: run_loops.Loops) -> list[run_loops.Loop]:
    return [loop for i in range(6) if (loop := loops.get(("ns", f"r{i}"))) is not None]
