"""Step events and the current step: one statement, riding on the saver's next write or, past the interval,
written by the recorder's own thread; in order; a ride rolled back with its write is written later."""

from __future__ import annotations

import datetime
import threading
import time
from typing import Any

import pytest

from agent_worker import steps
from agentrun_core import store
from tests.support.waiting import wait_for

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class Saver:
    def __init__(self, timed: set[str]) -> None:
        self.timed = timed

    def write_seconds(self, checkpoint_id: str) -> float | None:
        return 0.001 if checkpoint_id in self.timed else None


class Calls:
    """What reached Postgres: (how, steps, current step) per statement; ``how`` is "own" or "ride"."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.made: list[tuple[str, list[str], str | None]] = []
        self.fail_own = False
        self.failed = 0

    def own(self, conn: Any, **kw: Any) -> bool:
        if self.fail_own:
            self.failed += 1
            raise OSError("Postgres is away")
        with self.lock:
            self.made.append(("own", [e["step"] for e in kw["events"]], kw["current_step"]))
        return True

    def ride(self, conn: Any, **kw: Any) -> None:
        with self.lock:
            self.made.append(("ride", [e["step"] for e in kw["events"]], kw["current_step"]))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _recorder(
    monkeypatch: pytest.MonkeyPatch, batch: float, timed: set[str], clock: Any = time.monotonic
) -> tuple[steps.StepRecorder, Calls]:
    calls = Calls()
    monkeypatch.setattr(store, "record_steps", calls.own)
    monkeypatch.setattr(store, "send_steps", calls.ride)
    rec = steps.StepRecorder(
        None,  # type: ignore[arg-type]
        run_id="r",
        attempt=1,
        saver=Saver(timed),  # type: ignore[arg-type]
        epoch=3,
        batch_seconds=batch,
        clock=clock,
    )
    return rec, calls


def _add(rec: steps.StepRecorder, n: int) -> None:
    rec.add(
        step=f"s:{n}",
        checkpoint_id=f"cp{n}",
        started_at=NOW,
        duration_seconds=0.0,
        effect_keys=[],
        current_step=f"s{n}",
    )



def test_without_an_interval_each_flush_is_one_statement(monkeypatch: pytest.MonkeyPatch) -> None:
    rec, calls = _recorder(monkeypatch, 0.0, {"cp1", "cp2"})
    for n in (1, 2):
        _add(rec, n)
        rec.flush(final=False)
    assert calls.made == [("own", ["s:1"], "s1"), ("own", ["s:2"], "s2")]


def test_events_ride_on_a_write_once_due_and_commit_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    rec, calls = _recorder(monkeypatch, 3600, {"cp1", "cp2", "cp3"}, clock)  # the thread would wait an hour
    _add(rec, 1)
    rec.flush(final=False)
    assert rec.ride(object()) is None  # not due yet: fast steps share one statement
    _add(rec, 2)
    clock.now += 1800  # half the interval: the next write carries them
    done = rec.ride(object())
    assert done is not None and calls.made == [("ride", ["s:1", "s:2"], "s2")]
    clock.now += 1800
    assert rec.ride(object()) is None  # one batch at a time: the next waits for this one's commit
    done(True)
    assert rec.ride(object()) is None  # nothing left to carry
    _add(rec, 3)
    clock.now += 1800
    done = rec.ride(object())
    assert done is not None
    done(True)
    rec.flush(final=True)
    assert calls.made == [("ride", ["s:1", "s:2"], "s2"), ("ride", ["s:3"], "s3")]  # none of their own


def test_the_current_step_is_written_when_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    rec, calls = _recorder(monkeypatch, 2, {"cp1", "cp2", "cp3"}, clock)
    for n, name in ((1, "loop"), (2, "loop"), (3, "other")):
        rec.add(step=f"{name}:{n}", checkpoint_id=f"cp{n}", started_at=NOW, duration_seconds=0.0,
                effect_keys=[], current_step=name)
        clock.now += 1
        done = rec.ride(object())
        assert done is not None
        done(True)
    assert [c[2] for c in calls.made] == ["loop", None, "other"]


def test_an_untimed_event_waits_and_keeps_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    saver_timed: set[str] = {"cp2"}
    rec, calls = _recorder(monkeypatch, 2, saver_timed, clock)
    _add(rec, 1)
    _add(rec, 2)
    clock.now += 1
    done = rec.ride(object())  # cp1's write is not timed yet: only the current step may go
    assert done is not None and calls.made == [("ride", [], "s2")]
    done(True)
    saver_timed.add("cp1")
    clock.now += 1
    done = rec.ride(object())
    assert done is not None and calls.made[-1] == ("ride", ["s:1", "s:2"], None)
    done(True)


def test_a_ride_rolled_back_is_recorded_later_first_in_line(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    rec, calls = _recorder(monkeypatch, 2, {"cp1", "cp2"}, clock)
    _add(rec, 1)
    clock.now += 1
    done = rec.ride(object())
    assert done is not None
    _add(rec, 2)
    done(False)  # the write it rode on did not commit
    rec.flush(final=True)
    assert calls.made[-1] == ("own", ["s:1", "s:2"], "s2")


def test_what_does_not_ride_is_written_by_the_thread_within_the_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rec, calls = _recorder(monkeypatch, 0.05, {"cp1"})
    _add(rec, 1)
    rec.flush(final=False)  # no write follows (a slow next node): the recorder's thread writes it
    wait_for(lambda: calls.made == [("own", ["s:1"], "s1")], 30, interval=0.01)
    rec.flush(final=True)
    assert calls.made == [("own", ["s:1"], "s1")]  # nothing new: no statement


def test_the_thread_is_woken_only_when_it_waits_with_no_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step while the thread has a deadline already costs no thread switch; a step while it waits for
    nothing wakes it, so what does not ride is still written within the interval. (A fake clock: no
    deadline passes until the test moves it, however slow the machine.)"""
    clock = Clock()
    rec, calls = _recorder(monkeypatch, 0.2, {"cp1", "cp2", "cp3"}, clock)
    notified: list[int] = []
    real_notify = rec._cond.notify_all
    monkeypatch.setattr(rec._cond, "notify_all", lambda: (notified.append(1), real_notify())[1])
    _add(rec, 1)
    rec.flush(final=False)  # starts the thread, which has s:1's deadline to wait for
    _add(rec, 2)
    rec.flush(final=False)
    assert notified == [] and calls.made == []
    clock.now += 1  # s:1's deadline passes: the thread writes both at its next look
    wait_for(lambda: calls.made == [("own", ["s:1", "s:2"], "s2")], 30, interval=0.01)
    wait_for(lambda: rec._idle, 30, interval=0.01)  # nothing pending: it waits for nothing now
    notified.clear()  # (the thread's own write notified the waiters of a final flush)
    _add(rec, 3)
    rec.flush(final=False)
    assert notified == [1]
    clock.now += 1
    wait_for(lambda: len(calls.made) == 2, 30, interval=0.01)
    assert calls.made[-1] == ("own", ["s:3"], "s3")
    rec.flush(final=True)


def test_a_failed_write_of_the_thread_is_retried_and_never_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    rec, calls = _recorder(monkeypatch, 0.02, {"cp1"})
    calls.fail_own = True
    _add(rec, 1)
    rec.flush(final=False)
    # the thread tried, failed, and tried again an interval later
    wait_for(lambda: calls.failed >= 2, 30, interval=0.01)
    calls.fail_own = False
    rec.flush(final=True)
    assert ("own", ["s:1"], "s1") in calls.made and len(calls.made) == 1


def test_exit_records_untimed_events_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    rec, calls = _recorder(monkeypatch, 3600, {"cp3"})  # exit: only the last checkpoint is written
    for n in (1, 2, 3):
        _add(rec, n)
        rec.flush(final=False)
    assert calls.made == []  # no round trip per step
    rec.flush(final=True)
    assert calls.made == [("own", ["s:1", "s:2", "s:3"], "s3")]
    rec.flush(final=True)
    assert len(calls.made) == 1  # nothing new: no statement


def test_batch_seconds_per_durability() -> None:
    assert set(steps.BATCH_SECONDS) == {"sync", "async", "exit"}
    assert all(0 < s <= 1.0 for s in steps.BATCH_SECONDS.values())  # current_step lags at most a second


def test_the_final_batch_is_handed_over_after_a_ride_in_flight_and_written_by_no_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    rec, calls = _recorder(monkeypatch, 2, {"cp1"}, clock)  # cp2 never timed: an exit-mode checkpoint
    _add(rec, 1)
    clock.now += 1
    done = rec.ride(object())
    assert done is not None
    _add(rec, 2)
    taken: list[steps.Batch] = []
    taker = threading.Thread(target=lambda: taken.append(rec.take_final()))
    taker.start()
    time.sleep(0.05)
    assert not taken  # order: the ride in flight ends first
    done(False)  # rolled back: its events are handed over too, first in line
    taker.join(timeout=30)
    assert [(e["step"], e["checkpoint_id"]) for e in taken[0][0]] == [("s:1", "cp1"), ("s:2", None)]
    assert taken[0][1] == "s2"
    assert calls.made == [("ride", ["s:1"], "s1")]  # nothing written on its own: the outcome carries it
    assert rec.take_final() == ([], None)  # handed over once
    rec.write_taken(taken[0])  # the outcome was not written after all
    assert calls.made[-1] == ("own", ["s:1", "s:2"], "s2")
